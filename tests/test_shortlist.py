"""Lexical shortlists (mtkit/decoding/shortlist.py) on a tiny Transformer trained once for this module.

- The lexicon: on word-for-word toy data the shortlists cover the reference subwords; the frequent list is
  the target subwords by count; special ids never appear.
- The candidate sets equal a plain set computation (EOS first, frequent + translations + copied source ids).
- Search over a shortlist equals the search over the whole vocabulary with everything outside the sentence's
  candidates masked and the rest renormalised (beam and greedy, grouped rows and the per-row fallback, int8): the
  same hypotheses and scores, bar rounding; the two compute their log-probs differently (a projection onto the
  candidates, or onto everything and then masked), so a sentence may part ways where its search meets a near-tie,
  and only there (conftest.py: search_margin).
- The CLI: --shortlist builds RUN/lexicon.safetensors once, N lines in = N lines out; RNNs, ensembles, a missing
  data dir and a damaged lexicon each fail in one line.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections import Counter
from pathlib import Path

import pytest
import torch
import yaml

from conftest import LOG_PROB_TOL, TINY_TRANSFORMER, diverged_at_near_ties, without_curves, write_toy_splits
from mtkit.checkpoint import load_checkpoint
from mtkit.decoding.search import beam_search, greedy
from mtkit.decoding.shortlist import LEXICON_FILE, Shortlisted, build_lexicon, candidates, load_lexicon
from mtkit.models.base import BOS, EOS, PAD, UNK, Seq2Seq, State
from mtkit.models.int8 import WEIGHT_LEVELS, quantize_int8

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """Toy corpus, prepared data, a tiny Transformer trained for 150 updates (run/) and a 2-update RNN (rnn/)."""
    from mtkit.cli import main

    root = tmp_path_factory.mktemp("shortlist")
    splits = write_toy_splits(root)
    training = {
        "batch_tokens": 1000,
        "lr": 2e-2,
        "warmup_updates": 10,
        "validate_every": 150,
        "log_every": 50,
        "threads": 1,
        "devices": "cpu",
        "valid_bleu": False,
    }
    config = {
        "data": {"dir": str(root / "data"), "vocab_size": 100, "splits": splits},
        "model": {**TINY_TRANSFORMER, "max_positions": 128},
        "training": {"run_dir": str(root / "run"), "max_updates": 150, **training},
        "decoding": {"beam_size": 4, "batch_size": 16, "threads": 1, "device": "cpu"},
    }
    rnn = {
        **config,
        "model": {"arch": "luong", "embed_dim": 16, "hidden_size": 16},
        "training": {"run_dir": str(root / "rnn"), "max_updates": 2, **training, "validate_every": 2},
    }
    for name, tree in (("config", config), ("rnn", rnn)):
        (root / f"{name}.yaml").write_text(yaml.safe_dump(without_curves(tree), sort_keys=False), encoding="utf-8")
    for args in (("prepare", root / "config.yaml"), ("train", root / "config.yaml"), ("train", root / "rnn.yaml")):
        assert main([str(a) for a in args]) == 0
    return root


@pytest.fixture(scope="module")
def loaded(workdir):
    return load_checkpoint(workdir / "run")


@pytest.fixture(scope="module")
def lexicon(workdir, loaded):
    from mtkit.data.batches import ParallelData

    tok = loaded.tokenizer
    return build_lexicon(
        ParallelData(workdir / "data", "train"), tok.src_vocab_size, tok.tgt_vocab_size, tok.fingerprint()
    )


@pytest.fixture(scope="module")
def src(workdir, loaded) -> torch.Tensor:
    """(batch, src_len) test + valid sources with EOS, right-padded, as the translator builds them."""
    lines = [
        line
        for split in ("test", "valid")
        for line in (workdir / "corpus" / f"{split}.en").read_text(encoding="utf-8").splitlines()
    ]
    ids = loaded.tokenizer.encode_src(lines)
    width = max(map(len, ids)) + 1
    return torch.tensor([x + [EOS] + [PAD] * (width - len(x) - 1) for x in ids])


# ----------------------------------------------------------------------------------------- the lexicon
def test_shortlists_cover_the_reference_translations(workdir, loaded, lexicon, src):
    """Word-for-word toy data: the subwords of each reference lie in its source's shortlist, from the translations
    alone (no frequent list, no copies); with 2 translations per source subword fewer are covered."""
    refs = [
        line
        for split in ("test", "valid")
        for line in (workdir / "corpus" / f"{split}.de").read_text(encoding="utf-8").splitlines()
    ]
    coverage = {}
    for per_source in (2, 10):
        ids = candidates(lexicon, src, per_source=per_source, frequent=0, copy_source=False)
        wanted = covered = 0
        for row, ref in zip(ids.tolist(), loaded.tokenizer.encode_tgt(refs)):
            wanted, covered = wanted + len(ref), covered + sum(t in set(row) for t in ref)
        coverage[per_source] = covered / wanted
    assert coverage[10] >= 0.97 and coverage[2] < coverage[10], coverage
    special = torch.tensor([PAD, UNK, BOS, EOS])
    assert not torch.isin(lexicon.translations, special).any() and not torch.isin(lexicon.frequent, special).any()


def test_frequent_subwords_are_ranked_by_count(workdir, loaded, lexicon):
    from mtkit.data.batches import ParallelData

    data = ParallelData(workdir / "data", "train")
    counts = Counter(t for i in range(len(data)) for t in data.tgt(i).tolist())
    for special in (PAD, UNK, BOS, EOS):
        counts.pop(special, None)
    ranked = [counts[t] for t in lexicon.frequent.tolist()]
    assert ranked == sorted(ranked, reverse=True)
    assert set(lexicon.frequent.tolist()) >= {t for t, c in counts.items() if c > 0}  # 100 ids: all seen ones
    assert lexicon.frequent[0].item() == counts.most_common(1)[0][0]


def test_candidates_equal_a_plain_set_computation(lexicon, src):
    per_source, frequent = 3, 5
    for copy_source in (True, False):
        ids = candidates(lexicon, src, per_source=per_source, frequent=frequent, copy_source=copy_source)
        for row, sentence in zip(ids.tolist(), src.tolist()):
            expected = set(lexicon.frequent[:frequent].tolist()) | {UNK}
            for s in sentence:
                expected |= {t for t in lexicon.translations[s, :per_source].tolist() if t >= 0}
                if copy_source:
                    expected.add(s)
            expected -= {PAD, BOS, EOS}
            kept = [t for t in row[1:] if t != PAD]
            assert row[0] == EOS and kept == sorted(expected)
            assert row[1 + len(kept) :] == [PAD] * (len(row) - 1 - len(kept))  # fillers only at the end


# --------------------------------------------------------------------------------------------- search
@dataclasses.dataclass
class MaskedState(State):
    inner: State
    allowed: torch.Tensor  # (rows, vocab) bool


class MaskedToCandidates(Seq2Seq):
    """Reference: the whole vocabulary scored, then everything outside the sentence's candidates masked and the
    rest renormalised; the search sees ordinary token-id columns."""

    def __init__(self, model, lexicon, **options):
        super().__init__()
        self.model, self.lexicon, self.options, self.max_positions = model, lexicon, options, model.max_positions

    def encode(self, src, src_mask):
        return self.model.encode(src, src_mask), src

    def init_state(self, memory, src_mask):
        memory, src = memory
        ids = candidates(self.lexicon, src, **self.options)
        allowed = torch.zeros(src.size(0), self.model.tgt_vocab_size, dtype=torch.bool).scatter_(1, ids, True)
        allowed[:, PAD] = False
        return MaskedState(self.model.init_state(memory, src_mask), allowed)

    def step(self, prev_tokens, state, need_attention=False):
        log_probs, inner, attention = self.model.step(prev_tokens, state.inner, need_attention)
        log_probs = log_probs.masked_fill(~state.allowed, float("-inf")).log_softmax(dim=1)
        return log_probs, MaskedState(inner, state.allowed), attention


def per_row_encoder_side(monkeypatch):
    """Make the Transformer gather its per-source fields per hypothesis row (the fallback path) at every step."""
    from mtkit.models.transformer import TransformerState

    original = TransformerState.encoder_side

    def per_row(self):
        state, _ = original(self)
        return dataclasses.replace(
            state, row_source=torch.arange(len(state.row_source)), **state._per_source(state.row_source)
        ), 1

    monkeypatch.setattr(TransformerState, "encoder_side", per_row)


def assert_same_hypotheses(found, reference, model, src, **search):
    """Hypotheses, scores and log-probs of ``found`` are ``reference``'s, but where the search (``search``'s options,
    as for search_margin) meets a near-tie on ``model``, the reference."""
    diverged = diverged_at_near_ties(model, src, found, reference, **search)
    for i, (hyps, refs) in enumerate(zip(found, reference)):
        if i not in diverged:
            assert [h.score for h in hyps] == pytest.approx([r.score for r in refs], abs=LOG_PROB_TOL)
            for h, r in zip(hyps, refs):
                assert h.token_log_probs == pytest.approx(r.token_log_probs, abs=LOG_PROB_TOL)


@pytest.mark.parametrize("rows", ["grouped", "per-row"])
@torch.inference_mode()
def test_shortlisted_search_equals_the_masked_reference(loaded, lexicon, src, rows, monkeypatch):
    options = dict(per_source=3, frequent=5, copy_source=True)
    shortlisted = Shortlisted(loaded.model, lexicon, **options)
    reference = MaskedToCandidates(loaded.model, lexicon, **options)
    limits = dict(max_len_a=1.5, max_len_b=5)
    kwargs = dict(beam_size=4, nbest=2, length_penalty=1.0, stopping="beam_full", **limits)
    expected_beam = beam_search(reference, src, **kwargs)
    expected_greedy = greedy(reference, src, **limits)
    if rows == "per-row":
        per_row_encoder_side(monkeypatch)
    beam = beam_search(shortlisted, src, **kwargs)
    assert_same_hypotheses(beam, expected_beam, reference, src, **kwargs)
    assert_same_hypotheses(
        greedy(shortlisted, src, **limits), expected_greedy, reference, src, beam_size=1, length_penalty=0.0, **limits
    )
    allowed = candidates(lexicon, src, **options)
    for row, hyps in enumerate(beam):
        assert set(t for h in hyps for t in h.tokens) <= set(allowed[row].tolist()) - {PAD, BOS, EOS}
    # the restriction bites: some sentence's whole-vocabulary translation uses a subword outside its shortlist
    full = beam_search(loaded.model, src, beam_size=4, length_penalty=1.0, stopping="beam_full", **limits)
    assert any(set(h[0].tokens) - set(allowed[row].tolist()) for row, h in enumerate(full))


@torch.inference_mode()
def test_a_shortlist_holding_every_subword_is_the_renormalised_model(loaded, lexicon, src):
    everything = dataclasses.replace(lexicon, frequent=torch.arange(4, loaded.model.tgt_vocab_size))
    options = dict(per_source=0, frequent=loaded.model.tgt_vocab_size, copy_source=False)
    kwargs = dict(beam_size=4, length_penalty=1.0, max_len_a=1.5, max_len_b=5, stopping="beam_full")
    reference = MaskedToCandidates(loaded.model, everything, **options)
    found = beam_search(Shortlisted(loaded.model, everything, **options), src, **kwargs)
    assert_same_hypotheses(found, beam_search(reference, src, **kwargs), reference, src, **kwargs)


@torch.inference_mode()
def test_int8_model_decodes_over_the_shortlist(workdir, lexicon, src):
    """int8 decoder layers; the shortlist's projection uses the dequantized int8 output weights. The reference is
    the same int8 model with a float projection holding those weights, masked to the candidates."""
    options = dict(per_source=3, frequent=5, copy_source=True)
    int8 = quantize_int8(load_checkpoint(workdir / "run").model.eval())
    fp32_weight = load_checkpoint(workdir / "run").model.tgt_embed.weight
    dequantized = int8._output_weight()
    step = fp32_weight.abs().amax(dim=1, keepdim=True) / WEIGHT_LEVELS  # per-channel int8 quantization step
    assert ((dequantized - fp32_weight).abs() <= step / 2 + 1e-6).all() and not torch.equal(dequantized, fp32_weight)
    reference_model = quantize_int8(load_checkpoint(workdir / "run").model.eval())
    reference_model.output = torch.nn.Linear(dequantized.size(1), dequantized.size(0), bias=False)
    reference_model.output.weight = torch.nn.Parameter(dequantized.clone())
    kwargs = dict(beam_size=4, length_penalty=1.0, max_len_a=1.5, max_len_b=5, stopping="beam_full")
    reference = MaskedToCandidates(reference_model, lexicon, **options)
    # the whole batch at once: int8 layers quantize each row with its own scale, so rows do not affect each other
    found = beam_search(Shortlisted(int8, lexicon, **options), src, **kwargs)
    assert_same_hypotheses(found, beam_search(reference, src, **kwargs), reference, src, **kwargs)


# ------------------------------------------------------------------------------------------------ CLI
def test_cli_builds_the_lexicon_once_and_keeps_the_line_count(workdir, run_cli, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(workdir / "run", run)
    lines = (workdir / "corpus" / "test.en").read_text(encoding="utf-8").splitlines()[:12] + ["", "   "]
    first = run_cli("translate", run, "--shortlist", "5", stdin="\n".join(lines) + "\n")
    assert first.code == 0, first.err
    assert (run / LEXICON_FILE).is_file() and "built the shortlist lexicon" in first.err
    out = first.out.split("\n")
    assert out.pop() == "" and len(out) == len(lines) and out[-2:] == ["", ""] and all(out[:12])
    again = run_cli("translate", run, "--shortlist", "5", stdin="\n".join(lines) + "\n")
    assert again.code == 0 and again.out == first.out and "built" not in again.err


def one_line_error(result, *needles):
    assert result.code == 2, (result.code, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mtkit: error: ") and "Traceback" not in result.err, result.err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def test_cli_refusals_are_one_line(workdir, run_cli, tmp_path, loaded):
    one_line_error(
        run_cli("translate", workdir / "rnn", "--shortlist", "5", stdin="a dog\n"), "Transformer", "--shortlist 0"
    )
    one_line_error(
        run_cli("translate", workdir / "run", "--checkpoint", workdir / "run", "--shortlist", "5", stdin="a dog\n"),
        "ensemble",
    )
    one_line_error(run_cli("translate", workdir / "run", "--shortlist", "101", stdin="a dog\n"), "shortlist")
    run = tmp_path / "run"
    shutil.copytree(workdir / "run", run)
    (run / LEXICON_FILE).unlink(missing_ok=True)
    data, hidden = workdir / "data", workdir / "data-moved"
    data.rename(hidden)
    try:
        one_line_error(run_cli("translate", run, "--shortlist", "5", stdin="a dog\n"), str(data), "--shortlist 0")
    finally:
        hidden.rename(data)
    (run / LEXICON_FILE).write_bytes(b"\x00not a lexicon")
    one_line_error(run_cli("translate", run, "--shortlist", "5", stdin="a dog\n"), LEXICON_FILE, "delete it")
    (run / LEXICON_FILE).unlink()
    lexicon = load_lexicon(run, data, loaded.tokenizer)  # rebuilt and saved again
    assert (run / LEXICON_FILE).is_file() and lexicon.translations.size(0) == loaded.tokenizer.src_vocab_size
