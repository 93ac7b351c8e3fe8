"""Minimum Bayes risk decoding (mtkit/decoding/mbr.py): the utility matrices are sacreBLEU's sentence scores, the
candidate picked is the one a hand-computed matrix picks, and `--algorithm mbr` runs from the API and the
command line; epsilon sampling keeps only subwords of at least epsilon probability."""

from __future__ import annotations

from pathlib import Path

import pytest
import sacrebleu
import torch

import mtkit
from mtkit.decoding import mbr
from mtkit.decoding.hypothesis import Decoded
from mtkit.decoding.sampling import filter_top_k_top_p
from mtkit.inference.options import Options

SOURCES = ["A man is riding a bike .", "Two dogs and a cat .", "The white tree ."]
TEXTS = [
    ["Ein Mann fährt Fahrrad.", "Ein Mann fährt ein Fahrrad.", "Ein Mann fährt Rad.", "Zwei Hunde."],
    ["Ein Baum.", "Der weiße Baum.", "Der weiße Baum.", "Ein weißer Baum steht."],
]


@pytest.fixture(scope="module")
def run(toy_run_workdir) -> Path:
    return toy_run_workdir / "run"


def test_the_matrices_are_sacrebleus_sentence_scores():
    chrf, bleu = mbr.chrf_matrix(TEXTS, TEXTS), mbr.bleu_matrix(TEXTS, TEXTS)
    for s, texts in enumerate(TEXTS):
        for i, hyp in enumerate(texts):
            for j, ref in enumerate(texts):
                assert chrf[s][i][j] == pytest.approx(sacrebleu.sentence_chrf(hyp, [ref]).score, abs=1e-6)
                assert bleu[s][i][j] == pytest.approx(sacrebleu.sentence_bleu(hyp, [ref]).score, abs=1e-9)


@pytest.mark.parametrize("utility", ["chrf", "bleu"])
def test_the_pick_is_the_hand_computed_one(utility):
    """Each candidate's mean score against all candidates (itself included), computed here pair by pair with
    sacreBLEU: the ranking follows it, a repeated text once."""
    score = sacrebleu.sentence_chrf if utility == "chrf" else sacrebleu.sentence_bleu
    candidates = [[Decoded([i], -1.0, -1.0, [-1.0, 0.0]) for i in range(len(t))] for t in TEXTS]
    ranked = mbr.rank(candidates, TEXTS, None, utility, nbest=4)
    for texts, got in zip(TEXTS, ranked):
        expected = [sum(score(h, [r]).score for r in texts) / len(texts) for h in texts]
        order = sorted(range(len(texts)), key=lambda i: (-expected[i], i))
        distinct = [i for k, i in enumerate(order) if texts[i] not in [texts[j] for j in order[:k]]]
        assert [h.tokens[0] for h in got] == distinct
        assert [h.score for h in got] == pytest.approx([expected[i] / 100 for i in distinct])
    # with references of their own, candidates are measured against those
    refs = [["Ein Mann fährt Rad."], ["Ein weißer Baum steht."]]
    picked = mbr.rank([list(c) for c in candidates], TEXTS, refs, "chrf", nbest=1)
    assert [TEXTS[s][p[0].tokens[0]] for s, p in enumerate(picked)] == ["Ein Mann fährt Rad.", "Ein weißer Baum steht."]


def test_mbr_over_the_beam_picks_the_consensus_of_the_n_best(run):
    beam = mtkit.load(run, beam_size=6, nbest=6, device="cpu", dtype="float32")
    model = mtkit.load(run, algorithm="mbr", mbr_candidates=6, mbr_epsilon=0.0, device="cpu", dtype="float32")
    for found, chosen in zip(beam.translate_batch(SOURCES), model.translate_batch(SOURCES)):
        texts = [h.text for h in found.hypotheses]
        expected = [sum(sacrebleu.sentence_chrf(h, [r]).score for r in texts) / len(texts) for h in texts]
        assert chosen.text == texts[max(range(len(texts)), key=lambda i: (expected[i], -i))]
        assert chosen.hypotheses[0].score == pytest.approx(max(expected) / 100)


def test_mbr_over_epsilon_samples_is_seeded_and_takes_pseudo_references(run):
    def translate(**options):
        return mtkit.load(run, algorithm="mbr", device="cpu", dtype="float32", **options).translate(SOURCES)

    first = translate(mbr_candidates=8, mbr_epsilon=0.02, mbr_seed=1)
    assert first == translate(mbr_candidates=8, mbr_epsilon=0.02, mbr_seed=1) and all(first)
    with_refs = translate(mbr_candidates=4, mbr_pseudo_references=6, mbr_utility="bleu", nbest=1)
    assert len(with_refs) == len(SOURCES) and all(with_refs)


def test_mbr_on_the_command_line(run, run_cli):
    src = run.parent / "mbr.en"
    src.write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    args = ("translate", run, "-i", src, "--algorithm", "mbr", "--mbr-candidates", "5", "--mbr-epsilon", "0")
    result = run_cli(*args, "--dtype", "float32")
    assert result.code == 0, result.err
    api = mtkit.load(run, algorithm="mbr", mbr_candidates=5, mbr_epsilon=0.0, dtype="float32", device="cpu")
    assert result.out.splitlines() == api.translate(SOURCES)


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(algorithm="mbr", mbr_candidates=1), "--mbr-candidates 1: input should be greater than or equal to 2"),
        (dict(algorithm="mbr", mbr_utility="ter"), "--mbr-utility 'ter': use chrf or bleu"),
        (dict(mbr_utility="bleu"), "--mbr-utility takes effect with --algorithm mbr only; add --algorithm mbr"),
        (
            dict(algorithm="mbr", mbr_epsilon=0.02, engine="ctranslate2"),
            "--mbr-epsilon 0.02 needs the torch engine (CTranslate2 has no",
        ),
        (dict(algorithm="sampling", epsilon=0.1, engine="ctranslate2"), "--epsilon 0.1 needs the torch engine"),
    ],
)
def test_bad_mbr_options_are_one_line(options, message):
    with pytest.raises(mtkit.MtkitError) as err:
        Options.build(**options)
    assert str(err.value).startswith(message)


def test_mbr_on_the_ctranslate2_engine(run, tmp_path):
    """The CTranslate2 engine ranks its own beam's n-best as the torch engine would rank them; with pseudo-references
    drawn by CTranslate2's sampling it runs too."""
    from conftest import cli

    assert cli("export", run, "--output", tmp_path / "ct2") == 0
    beam = mtkit.load(tmp_path / "ct2", beam_size=4, nbest=4)
    model = mtkit.load(tmp_path / "ct2", algorithm="mbr", mbr_candidates=4, mbr_epsilon=0.0)
    for found, chosen in zip(beam.translate_batch(SOURCES), model.translate_batch(SOURCES)):
        texts = [h.text for h in found.hypotheses]
        expected = [sum(sacrebleu.sentence_chrf(h, [r]).score for r in texts) / len(texts) for h in texts]
        assert chosen.text == texts[max(range(len(texts)), key=lambda i: (expected[i], -i))]
    sampled = mtkit.load(tmp_path / "ct2", algorithm="mbr", mbr_candidates=4, mbr_epsilon=0.0, mbr_pseudo_references=4)
    assert all(sampled.translate(SOURCES))


def test_epsilon_keeps_the_subwords_of_at_least_epsilon():
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.97, 0.01, 0.01, 0.01]])
    kept = filter_top_k_top_p(probs.log(), 0, 1.0, epsilon=0.1).isfinite()
    assert kept.tolist() == [[True, True, True, False], [True, False, False, False]]
    flat = torch.tensor([[0.4, 0.3, 0.3]]).log()  # every subword below epsilon: the most likely stays
    assert filter_top_k_top_p(flat, 0, 1.0, epsilon=0.5).isfinite().tolist() == [[True, False, False]]


def test_epsilon_draws_follow_the_filtered_distribution():
    """draw_epsilon (the top 1/epsilon subwords, normalised over the whole vocabulary) draws as filter_top_k_top_p
    and a multinomial draw do: never a subword under epsilon, each kept one as often as its probability says."""
    from mtkit.decoding.sampling import draw_epsilon

    torch.manual_seed(0)
    logits = torch.randn(1, 300) * 3
    probs = logits.softmax(dim=1)[0]
    kept = filter_top_k_top_p(logits, 0, 1.0, epsilon=0.05).isfinite()[0]
    expected = torch.where(kept, probs, torch.zeros_like(probs))
    expected /= expected.sum()
    generator = torch.Generator().manual_seed(1)
    draws = draw_epsilon(logits.expand(20000, -1), 0.05, generator=generator)
    frequency = torch.bincount(draws, minlength=300).float() / len(draws)
    assert bool((frequency[~kept] == 0).all()) and int(kept.sum()) > 1
    assert torch.allclose(frequency, expected, atol=0.015)
    top2 = draw_epsilon(logits.expand(2000, -1), 0.05, top_k=2, generator=generator)
    assert set(top2.tolist()) <= set(logits[0].topk(2).indices.tolist())
