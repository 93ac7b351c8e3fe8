"""The dcce filter: dual conditional cross-entropy of a forward and a backward model (mtkit/data/dcce.py).

Two tiny Transformers, en -> de and de -> en, are trained on the toy corpus (500 updates each, about 10 s): enough
for both to find the toy translations likely and a pair with another sentence's target, or a target cut short,
unlikely. The scores are held to an independent computation: a step-by-step decode, one sentence at a time.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

from conftest import TINY_TRANSFORMER, assert_one_line_error, prepare_and_train, toy_pairs, write_lines
from mtkit import checkpoint as ckpt
from mtkit.data import dcce
from mtkit.data import filters as F
from mtkit.tokenizer import BOS, EOS

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]  # a module of its own: two models trained
MAX_SCORE = 1.8  # between the toy pairs' scores (at most about 1.6, held-out ones included) and the wrong ones'


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[str, str]:
    """(forward en -> de run dir, backward de -> en run dir), trained on the toy corpus."""
    root = tmp_path_factory.mktemp("dcce")
    train, valid = toy_pairs(300, seed=0), toy_pairs(30, seed=1)
    out = []
    for src_lang, tgt_lang, side in (("en", "de", 0), ("de", "en", 1)):
        work = root / f"{src_lang}-{tgt_lang}"
        splits = {}
        for name, pairs in (("train", train), ("valid", valid)):
            src = write_lines(work / "corpus" / f"{name}.{src_lang}", [p[side] for p in pairs])
            tgt = write_lines(work / "corpus" / f"{name}.{tgt_lang}", [p[1 - side] for p in pairs])
            splits[name] = {"src": str(src), "tgt": str(tgt)}
        config = {
            "data": {"src_lang": src_lang, "tgt_lang": tgt_lang, "dir": str(work / "data"), "vocab_size": 100,
                     "splits": splits},
            "model": {**TINY_TRANSFORMER, "max_positions": 64},
            "training": {"run_dir": str(work / "run"), "max_updates": 500, "batch_tokens": 400, "lr": 5e-3,
                         "warmup_updates": 20, "validate_every": 500, "log_every": 100, "threads": 1,
                         "valid_max_sentences": 10, "calibrate": False},
        }  # fmt: skip
        prepare_and_train(work, config)
        out.append(str(work / "run"))
    return out[0], out[1]


def stepwise_cross_entropy(loaded, source: str, target: str) -> float:
    """-log P(target | source) / (its subwords + EOS), decoded one position at a time."""
    model, tok = loaded.model, loaded.tokenizer
    src = torch.tensor([[*tok.encode_src([source])[0], EOS]])
    tgt = [*tok.encode_tgt([target])[0], EOS]
    with torch.inference_mode():
        state = model.init_state(model.encode(src, src != 0), src != 0)
        prev, total = torch.tensor([BOS]), 0.0
        for token in tgt:
            logp, state, _ = model.step(prev, state)
            total -= float(logp[0, token])
            prev = torch.tensor([token])
    return total / len(tgt)


GOOD = toy_pairs(6, seed=0) + toy_pairs(6, seed=5)  # pairs of the training data, then held-out ones
SHUFFLED = [(GOOD[i][0], GOOD[(i + 3) % 6][1]) for i in range(6)]  # a fluent target of another source
TRUNCATED = [(src, " ".join(tgt.split()[:2])) for src, tgt in toy_pairs(20, seed=0)[8:20] if len(src.split()) >= 7]


@pytest.mark.compares
def test_cross_entropies_equal_a_step_by_step_decode_in_any_batch(runs):
    loaded = ckpt.load_checkpoint(runs[0])
    pairs = GOOD + SHUFFLED + TRUNCATED
    sources, targets = [p[0] for p in pairs], [p[1] for p in pairs]
    batched = dcce.cross_entropies(loaded, sources, targets, batch_tokens=6000)
    one_by_one = dcce.cross_entropies(loaded, sources, targets, batch_tokens=1)  # a batch per sentence
    expected = [stepwise_cross_entropy(loaded, s, t) for s, t in pairs]
    assert batched == pytest.approx(expected, abs=1e-4)
    assert one_by_one == pytest.approx(expected, abs=1e-4)
    assert max(batched[: len(GOOD)]) < min(batched[len(GOOD) : len(GOOD) + len(SHUFFLED)])


def test_dual_score():
    assert dcce.dual_score(1.0, 1.0) == 1.0
    assert dcce.dual_score(0.5, 2.5) == pytest.approx(2.0 + 1.5)
    assert dcce.dual_score(2.5, 0.5) == dcce.dual_score(0.5, 2.5)


def test_filter_keeps_translations_and_drops_wrong_and_cut_pairs(runs):
    (f,) = F.build({"dcce": {"forward": runs[0], "backward": runs[1], "max_score": MAX_SCORE}}, "en", "de")
    assert f.batched and not f.default and "dcce" not in F.DEFAULTS
    verdicts = f.check_batch(GOOD + SHUFFLED + TRUNCATED)
    assert verdicts[: len(GOOD)] == [None] * len(GOOD)
    assert all(v and v.startswith("score ") for v in verdicts[len(GOOD) :]), verdicts
    scores = [float(v.split()[1]) for v in verdicts[len(GOOD) :]]
    assert min(scores) > f.max_score and all(math.isfinite(s) for s in scores)
    assert f.check(*GOOD[0]) is None and f.check(*SHUFFLED[0]) is not None


def test_an_option_of_dcce_adds_it_to_the_default_filters():
    from mtkit.data.clean import parse_filters

    assert list(parse_filters(None, ["dcce.forward=a", "dcce.backward=b"])) == [*F.DEFAULTS, "dcce"]
    assert list(parse_filters(None, [])) == list(F.DEFAULTS)
    assert list(parse_filters("copy,dcce", ["dcce.max_score=2"])) == ["copy", "dcce"]


def test_clean_with_dcce_writes_the_kept_pairs_in_order(runs, tmp_path, run_cli):
    good = toy_pairs(40, seed=0)
    pairs = []
    for i, pair in enumerate(good):  # after every fourth pair, its source with another pair's target
        pairs += [pair, (pair[0], good[(i + 9) % 40][1])] if i % 4 == 3 else [pair]
    src = write_lines(tmp_path / "in" / "crawl.en", [p[0] for p in pairs])
    tgt = write_lines(tmp_path / "in" / "crawl.de", [p[1] for p in pairs])
    out = tmp_path / "out"
    result = run_cli(
        "clean", str(src), str(tgt), "--output", str(out), "--filters", "copy,dcce", "--option", f"dcce.forward={runs[0]}",
        "--option", f"dcce.backward={runs[1]}", "--option", "dcce.batch_tokens=50", "--option", f"dcce.max_score={MAX_SCORE}",
    )  # fmt: skip
    assert result.code == 0, result.err
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert list(report["filters"]) == ["copy", "dcce"]
    kept = list(zip((out / "crawl.en").read_text().splitlines(), (out / "crawl.de").read_text().splitlines()))
    assert report["removed"]["dcce"] == len(pairs) - len(good) and kept == good  # every wrong pair, in order
    scores = report["scores"]["dcce"]  # quantiles of the scores, to choose max_score from
    assert scores["pairs_scored"] == len(pairs) and scores["q10"] <= scores["q50"] <= scores["q90"] <= scores["q99"]
    assert (
        scores["q50"] <= MAX_SCORE < scores["q99"]
    )  # a fifth are wrong: the median is a good pair's, q99 a wrong one's
    assert "dcce scores of 50 pairs: q10" in result.out


def test_prepare_runs_dcce_on_the_train_split(runs, tmp_path, run_cli, write_config):
    good = toy_pairs(60, seed=0)
    pairs = good[:30] + SHUFFLED + good[30:]
    src = write_lines(tmp_path / "c" / "train.en", [p[0] for p in pairs])
    tgt = write_lines(tmp_path / "c" / "train.de", [p[1] for p in pairs])
    valid = {"src": str(src), "tgt": str(tgt)}
    config = write_config(
        {
            "data": {
                "dir": str(tmp_path / "data"),
                "vocab_size": 60,
                "splits": {"train": {"src": str(src), "tgt": str(tgt)}, "valid": valid},
                "filters": {"dcce": {"forward": runs[0], "backward": runs[1], "max_score": MAX_SCORE}},
            }
        }
    )
    result = run_cli("prepare", str(config))
    assert result.code == 0, result.err
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["splits"]["train"]["filtered"]["dcce"] == len(SHUFFLED)
    assert manifest["splits"]["train"]["pairs_kept"] == len(good)
    assert manifest["splits"]["valid"]["pairs_kept"] == len(pairs)  # other splits are not filtered


def test_bad_models_are_one_line(runs, tmp_path, run_cli):
    src = write_lines(tmp_path / "in" / "c.en", [GOOD[0][0]])
    tgt = write_lines(tmp_path / "in" / "c.de", [GOOD[0][1]])
    base = ["clean", str(src), str(tgt), "--output", str(tmp_path / "out"), "--filters", "dcce"]
    cases = [
        ([], "--option dcce.forward: give the run dir of a model translating en -> de"),
        (
            ["--option", f"dcce.forward={runs[0]}"],
            "--option dcce.backward: give the run dir of a model translating de -> en",
        ),
        (
            ["--option", f"dcce.forward={runs[1]}", "--option", f"dcce.backward={runs[1]}"],
            f"--option dcce.forward: {runs[1]} translates de -> en, not en -> de",
        ),
        (
            ["--option", f"dcce.forward={tmp_path / 'nothing'}", "--option", f"dcce.backward={runs[1]}"],
            "--option dcce.forward:",
            "no such run directory or checkpoint",
        ),
        (
            [
                "--option",
                f"dcce.forward={runs[0]}",
                "--option",
                f"dcce.backward={runs[1]}",
                "--option",
                "dcce.max_score=0",
            ],
            "--option dcce.max_score: must be above 0",
        ),
    ]
    for extra, *needles in cases:
        assert_one_line_error(run_cli(*base, *extra), *needles)
    assert not (tmp_path / "out").exists()
