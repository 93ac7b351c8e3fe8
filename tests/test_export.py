"""`mtkit export --format ctranslate2` and `mtkit translate --engine ctranslate2`, on a tiny Transformer trained
once for this module (a few seconds on the toy corpus, one thread).

- The export: CTranslate2's files plus the SentencePiece model and config; vocabularies are the SentencePiece
  pieces; quantized exports load; --force replaces only an earlier export; RNNs are refused in one line.
- The engine against the PyTorch engine in float32: greedy outputs equal token for token with the same scores;
  beam search equals the torch search over the same distribution (CTranslate2 renormalises over the tokens it may
  emit), and agrees with the torch engine itself on nearly every sentence; reported scores are the model's own;
  the a * source_length + b output limit holds (CTranslate2 has none by default). The two engines round
  differently (and differently on each CPU), so a sentence may part ways where the search meets a near-tie, and
  only there (conftest.py: first_divergence, search_margin).
- N lines in = N lines out, in order, for any input (a property test), and through the CLI.
- Without the ctranslate2 package both commands say how to install it.
Tests needing ctranslate2 skip when it is not installed (pip install "mtkit[ct2]").
"""

from __future__ import annotations

import io
import json
import math
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mtkit
from conftest import (
    EN_WORDS,
    LOG_PROB_TOL,
    NEAR_TIE,
    TINY_TRANSFORMER,
    assert_one_line_error,
    cli,
    diverged_at_near_ties,
    first_divergence,
    search_margin,
    without_curves,
    write_toy_splits,
)
from mtkit.checkpoint import load_checkpoint
from mtkit.decoding.search import length_penalty_of
from mtkit.inference.ct2_engine import Ct2Engine
from mtkit.inference.lines import read_lines
from mtkit.inference.options import Options
from mtkit.inference.torch_engine import TorchEngine
from mtkit.inference.translate import one_line, translate_stream
from mtkit.models.base import BOS, EOS, PAD

try:
    import ctranslate2  # noqa: F401

    HAVE_CT2 = True
except ImportError:
    HAVE_CT2 = False
needs_ct2 = pytest.mark.skipif(not HAVE_CT2, reason='ctranslate2 is not installed (pip install "mtkit[ct2]")')
MAX_POSITIONS = 128
# CTranslate2 never emits PAD or BOS by masking them before its softmax, so its beams are ranked by log-probs
# renormalised over the other tokens; the torch engine masks after the softmax (as fairseq and OpenNMT-py do). The
# two differ by log(1 - p(PAD) - p(BOS)) per step: tiny, but enough to flip a near-tie between two beams, after
# which the searches part ways. So CTranslate2's search is compared with the torch search over that same
# renormalised distribution (token for token, bar float rounding), and with the torch engine itself only in bulk.
# Beyond the best hypothesis, an n-best list may differ further down: CTranslate2 keeps the beam_size finished
# hypotheses it ranks best, where the torch search keeps every finished one until the GNMT ranking at the end.
# (Differences at a near-tie of the search, see conftest.py, are rounding and not counted here.)
MAX_NBEST_TAIL_DIFFERENCES = 1  # of 60 sentences
MIN_AGREEMENT_WITH_TORCH_ENGINE = 0.9  # share of sentences whose best hypothesis is the torch engine's


# ------------------------------------------------------------------------------------------- fixtures
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """Toy corpus, prepared data, a tiny Transformer trained for 150 updates (run/) and a 2-update RNN (rnn/)."""
    root = tmp_path_factory.mktemp("export")
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
        "model": {**TINY_TRANSFORMER, "max_positions": MAX_POSITIONS},
        "training": {"run_dir": str(root / "run"), "max_updates": 150, **training},
        "decoding": {"beam_size": 4, "batch_size": 16, "chunk_size": 50, "threads": 1, "device": "cpu"},
    }
    rnn = {
        **config,
        "model": {"arch": "bahdanau", "embed_dim": 16, "hidden_size": 16},
        "training": {"run_dir": str(root / "rnn"), "max_updates": 2, **training, "validate_every": 2},
    }
    for name, tree in (("config", config), ("rnn", rnn)):
        (root / f"{name}.yaml").write_text(yaml.safe_dump(without_curves(tree), sort_keys=False), encoding="utf-8")
    for args in (("prepare", root / "config.yaml"), ("train", root / "config.yaml"), ("train", root / "rnn.yaml")):
        assert cli(*args) == 0
    return root


@pytest.fixture(scope="module")
def run_dir(workdir) -> Path:
    return workdir / "run"


@pytest.fixture(scope="module")
def test_lines(workdir) -> list[str]:
    return [
        line
        for split in ("test", "valid")
        for line in (workdir / "corpus" / f"{split}.en").read_text(encoding="utf-8").splitlines()
    ]


@pytest.fixture(scope="module")
def loaded(run_dir):
    return load_checkpoint(run_dir)


@pytest.fixture(scope="module")
def exported(run_dir, workdir) -> Path:
    if not HAVE_CT2:
        pytest.skip('ctranslate2 is not installed (pip install "mtkit[ct2]")')
    assert cli("export", run_dir, "--output", workdir / "ct2") == 0
    return workdir / "ct2"


def engines(loaded, exported, **options) -> tuple[TorchEngine, Ct2Engine]:
    from mtkit.interop.ct2_export import read_export

    meta, tokenizer = read_export(exported)
    torch_engine = TorchEngine(loaded.model, loaded.tokenizer, Options(**options), torch.device("cpu"))
    ct2_options = Options(**options, engine="ctranslate2", device="cpu", dtype=None, threads=1, scores=True)
    ct2_engine = Ct2Engine(exported, tokenizer, ct2_options, max_positions=meta["max_positions"])
    return torch_engine, ct2_engine


def both(loaded, exported, lines: list[str], **options):
    torch_engine, ct2_engine = engines(loaded, exported, **options)
    ids = torch_engine.encode(lines)
    assert ct2_engine.encode(lines) == ids
    return torch_engine.translate_ids(ids), ct2_engine.translate_ids(ids), ids


# ----------------------------------------------------------------------------------------- the export
@needs_ct2
def test_export_writes_a_self_contained_ctranslate2_model(exported, loaded):
    files = {p.name for p in exported.iterdir()}
    assert {"model.bin", "config.json", "shared_vocabulary.json", "spm.model", "mtkit_export.json"} <= files
    assert not [p for p in exported.parent.iterdir() if p.name.startswith(".ct2.")]  # no temporary left
    ct2_config = json.loads((exported / "config.json").read_text())
    assert (ct2_config["unk_token"], ct2_config["bos_token"], ct2_config["eos_token"]) == ("<unk>", "<s>", "</s>")
    assert ct2_config["add_source_eos"] and not ct2_config["add_source_bos"]
    vocabulary = json.loads((exported / "shared_vocabulary.json").read_text())
    tok = loaded.tokenizer
    assert vocabulary == tok.tgt_pieces(range(tok.tgt_vocab_size))
    assert vocabulary[:4] == ["<pad>", "<unk>", "<s>", "</s>"]  # PAD UNK BOS EOS = 0 1 2 3
    meta = json.loads((exported / "mtkit_export.json").read_text())
    assert meta["quantization"] == "float32" and meta["max_positions"] == MAX_POSITIONS
    assert meta["tokenizer_fingerprint"] == tok.fingerprint()


@needs_ct2
def test_export_refuses_to_overwrite_without_force(exported, run_dir, workdir, run_cli):
    assert_one_line_error(run_cli("export", run_dir, "--output", exported), "already exists", "--force")
    not_an_export = run_cli("export", run_dir, "--output", workdir / "corpus", "--force")
    assert_one_line_error(not_an_export, "not an mtkit export")
    assert (workdir / "corpus" / "test.en").exists()  # never replaced
    wrong_format = run_cli("export", run_dir, "--output", workdir / "x", "--format", "onnx")
    assert_one_line_error(wrong_format, "--format 'onnx'", "ctranslate2")
    wrong_type = run_cli("export", run_dir, "--output", workdir / "x", "--quantization", "int4")
    assert_one_line_error(wrong_type, "--quantization 'int4'", "int8")
    assert not (workdir / "x").exists()


@needs_ct2
def test_quantized_export_replaces_with_force_and_translates(run_dir, exported, workdir, test_lines, run_cli):
    out = workdir / "ct2-int8"
    assert run_cli("export", run_dir, "--output", out, "--quantization", "int16").code == 0
    result = run_cli("export", run_dir, "--output", out, "--quantization", "int8", "--force")
    assert result.code == 0, result.err
    assert json.loads((out / "mtkit_export.json").read_text())["quantization"] == "int8"
    assert (out / "model.bin").stat().st_size < 0.6 * (exported / "model.bin").stat().st_size
    assert not [p for p in workdir.iterdir() if p.name.startswith(".ct2-int8.")]  # no temporary left
    result = run_cli("translate", out, stdin="\n".join(test_lines[:10]) + "\n")  # an export dir needs no --engine
    assert result.code == 0, result.err
    hyps = result.out.split("\n")
    assert hyps.pop() == "" and len(hyps) == 10 and sum(bool(h) for h in hyps) >= 8


def test_rnn_models_are_refused_in_one_line(workdir, run_cli):
    if HAVE_CT2:
        result = run_cli("export", workdir / "rnn", "--output", workdir / "rnn-ct2")
        assert_one_line_error(result, "bahdanau", "RNN", "--engine torch")
        assert not (workdir / "rnn-ct2").exists()
    result = run_cli("translate", workdir / "rnn", "--engine", "ctranslate2", stdin="a dog\n")
    assert_one_line_error(result, *(("RNN", "--engine torch") if HAVE_CT2 else ('pip install "mtkit[ct2]"',)))


def test_without_ctranslate2_both_commands_say_how_to_install(monkeypatch, tmp_path, run_cli):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # `import ctranslate2` now raises ImportError
    result = run_cli("export", tmp_path / "run", "--output", tmp_path / "out")
    assert_one_line_error(result, 'pip install "mtkit[ct2]"')
    result = run_cli("translate", tmp_path / "run", "--engine", "ctranslate2", stdin="a dog\n")
    assert_one_line_error(result, 'pip install "mtkit[ct2]"')


# ----------------------------------------------------------------------------- the engine against torch
@needs_ct2
@pytest.mark.parametrize("limits", [dict(), dict(max_len_a=0.5, max_len_b=1)], ids=["default-limit", "tight-limit"])
def test_greedy_equals_torch_token_for_token(loaded, exported, test_lines, limits):
    torch_out, ct2_out, ids = both(loaded, exported, test_lines, beam_size=1, **limits)
    _, ct2_engine = engines(loaded, exported, beam_size=1, **limits)
    for src, t, c in zip(ids, torch_out, ct2_out):
        assert len(c) == 1 and len(c[0].tokens) <= ct2_engine.max_length(len(src) + 1)
        # Both pick the most likely token (CTranslate2's renormalising shifts a step's log-probs by one constant,
        # which no argmax sees), so they can only part at a token within rounding of the best one.
        divergence = first_divergence(loaded.model, src + [EOS], c[0].tokens, t[0].tokens)
        if divergence is None:
            assert c[0].score == pytest.approx(t[0].score, abs=LOG_PROB_TOL)
            assert c[0].token_log_probs == pytest.approx(t[0].token_log_probs, abs=LOG_PROB_TOL)
        else:
            at, shortfall = divergence
            assert shortfall <= NEAR_TIE, (src, c[0].tokens, t[0].tokens, shortfall)
            assert c[0].token_log_probs[:at] == pytest.approx(t[0].token_log_probs[:at], abs=LOG_PROB_TOL)
    if limits:  # the tight limit binds: some outputs are cut at it (and end with the forced EOS's score)
        assert any(len(t[0].tokens) == ct2_engine.max_length(len(s) + 1) for s, t in zip(ids, torch_out))


class Renormalised(torch.nn.Module):
    """The model with PAD and BOS removed before normalising, as CTranslate2's suppress_sequences does."""

    def __init__(self, model):
        super().__init__()
        self.model, self.max_positions = model, model.max_positions

    def encode(self, src, src_mask):
        return self.model.encode(src, src_mask)

    def encode_parts(self, src, src_mask, sizes):
        return self.model.encode_parts(src, src_mask, sizes)

    def init_state(self, memory, src_mask):
        return self.model.init_state(memory, src_mask)

    def step(self, prev_tokens, state, need_attention=False):
        log_probs, state, attention = self.model.step(prev_tokens, state, need_attention)
        banned = torch.tensor([PAD, BOS])
        return log_probs.float().index_fill(1, banned, float("-inf")).log_softmax(dim=1), state, attention


def teacher_forced_log_probs(model, src_ids: list[int], tokens: list[int]) -> list[float]:
    """The model's own log-prob of each target token and of the final EOS."""
    src = torch.tensor([src_ids + [EOS]])
    with torch.inference_mode():
        log_probs = model(src, torch.tensor([[BOS] + tokens])).float().log_softmax(dim=-1)[0]
    return log_probs.gather(1, torch.tensor([tokens + [EOS]]).T).squeeze(1).tolist()


@needs_ct2
@pytest.mark.parametrize(
    "options",
    [
        dict(beam_size=4),
        dict(beam_size=5, nbest=3, length_penalty=0.6),
        dict(beam_size=4, length_penalty=0.0, max_len_a=0.5, max_len_b=1),
    ],
    ids=["beam4", "beam5-nbest3", "beam4-no-penalty-tight-limit"],
)
def test_beam_equals_torch_searching_the_same_distribution(loaded, exported, test_lines, options):
    torch_out, ct2_out, ids = both(loaded, exported, test_lines, **options)
    model, opt = Renormalised(loaded.model), Options(**options)
    reference = TorchEngine(model, loaded.tokenizer, opt, torch.device("cpu")).translate_ids(ids)
    sources = [src + [EOS] for src in ids]
    search = dict(
        beam_size=max(opt.beam_size, opt.nbest),
        nbest=opt.nbest,
        length_penalty=opt.length_penalty,
        max_len_a=opt.max_len_a,
        max_len_b=opt.max_len_b,
        stopping=opt.stopping,
    )
    # the best hypotheses: token for token, but where the search meets a near-tie
    diverged_at_near_ties(model, sources, [c[:1] for c in ct2_out], [r[:1] for r in reference], **search)
    differ = [i for i, (c, r) in enumerate(zip(ct2_out, reference)) if [h.tokens for h in c] != [h.tokens for h in r]]
    tails = [i for i in differ if search_margin(model, sources[i], **search) > NEAR_TIE]  # not rounding: a tail
    assert len(tails) <= MAX_NBEST_TAIL_DIFFERENCES, tails
    alpha = Options(**options).length_penalty
    agree = sum(c[0].tokens == t[0].tokens for c, t in zip(ct2_out, torch_out))
    assert agree >= MIN_AGREEMENT_WITH_TORCH_ENGINE * len(ids), (agree, len(ids))
    for src, t, c in zip(ids, torch_out, ct2_out):
        assert len(c) == len(t) == options.get("nbest", 1)
        assert [h.score for h in c] == sorted((h.score for h in c), reverse=True)
        for h in c:  # the reported numbers are the model's own (options.scores), whichever search found h
            assert h.token_log_probs == pytest.approx(teacher_forced_log_probs(loaded.model, src, h.tokens), abs=1e-4)
            assert h.score == pytest.approx(h.log_prob / length_penalty_of(len(h.tokens) + 1, alpha))
        if [h.tokens for h in c] == [h.tokens for h in t]:
            assert [h.score for h in c] == pytest.approx([h.score for h in t], abs=1e-4)


@needs_ct2
@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.parametrize("positions", ["sinusoidal", "learned", "relative", "rope"])
@pytest.mark.compares
def test_every_position_type_and_norm_order_exports_exactly(loaded, positions, norm, tmp_path):
    """For each layout: CTranslate2's teacher-forced log-probs (score_batch) equal the model's own."""
    assert_exports_exactly(loaded.tokenizer, tmp_path, norm=norm, positions=positions, max_relative_distance=4)


@needs_ct2
@pytest.mark.parametrize("quantization", [None, "int8"])
@pytest.mark.compares
def test_deep_encoder_shallow_narrow_decoder_exports_exactly(loaded, quantization, tmp_path):
    """A student's shape: 3 encoder layers, 1 decoder layer with a narrower feed-forward network (decoder_ffn_dim);
    int8 (rounded weights) within a looser tolerance."""
    assert_exports_exactly(
        loaded.tokenizer,
        tmp_path,
        quantization=quantization,
        encoder_layers=3,
        decoder_layers=1,
        decoder_ffn_dim=16,
    )


def assert_exports_exactly(tok, folder: Path, quantization=None, **model) -> None:
    """A fresh Transformer of the ``model`` keys (on a 32-wide base), exported: CTranslate2's teacher-forced
    log-probs (score_batch) equal the model's own (float32; int8 within 0.3 per token on average)."""
    import ctranslate2

    from mtkit.config import TransformerConfig
    from mtkit.interop.ct2_export import build_spec, save_spec
    from mtkit.models import build_model

    torch.manual_seed(0)
    base = dict(d_model=32, heads=2, encoder_layers=2, decoder_layers=2, ffn_dim=64, max_positions=64, dropout=0.0)
    cfg = TransformerConfig(**{**base, **model})
    model = build_model(cfg, tok.src_vocab_size, tok.tgt_vocab_size, True).eval()
    with torch.no_grad():  # fresh biases are 0 and norms 1: perturb them so that each is checked too
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    rng = random.Random(0)
    sources = [[rng.randrange(4, tok.src_vocab_size) for _ in range(rng.randint(1, 20))] for _ in range(8)]
    targets = [[rng.randrange(4, tok.tgt_vocab_size) for _ in range(rng.randint(1, 20))] for _ in range(8)]
    expected = [teacher_forced_log_probs(model, src, tgt) for src, tgt in zip(sources, targets)]
    save_spec(build_spec(model, tok), folder / "ct2", quantization)  # quantizing may reuse the weights' memory
    engine = ctranslate2.Translator(str(folder / "ct2"), device="cpu", intra_threads=1)
    scored = engine.score_batch(
        [tok.src_pieces(s) for s in sources], [tok.tgt_pieces(t) for t in targets], max_input_length=0
    )
    if quantization is None:
        for log_probs, result in zip(expected, scored):
            assert list(result.log_probs) == pytest.approx(log_probs, abs=1e-4)
        return
    # int8: CTranslate2's int8 products round differently per CPU: the mean error per token of this 32-wide model
    # is 0.011 with AVX-512 VNNI and 0.23 (max 1.07) held to AVX2 (2026-11-24, AMD EPYC); the float32 case above
    # is what holds the layout exactly
    errors = [abs(a - b) for log_probs, result in zip(expected, scored) for a, b in zip(result.log_probs, log_probs)]
    assert len(errors) == sum(len(t) + 1 for t in targets)
    assert sum(errors) / len(errors) < 0.3


def test_an_ssru_decoder_is_refused_by_name_at_export(workdir, run_cli):
    """CTranslate2 and Marian have no recurrent decoder layer: both exports, and CTranslate2 on the fly, refuse
    model.decoder_self by name; the torch engine translates the model."""
    tree = yaml.safe_load((workdir / "config.yaml").read_text(encoding="utf-8"))
    tree["model"] = {**tree["model"], "decoder_self": "ssru"}
    tree["training"] = {**tree["training"], "run_dir": str(workdir / "ssru"), "max_updates": 2, "validate_every": 2}
    (workdir / "ssru.yaml").write_text(yaml.safe_dump(without_curves(tree), sort_keys=False), encoding="utf-8")
    assert run_cli("train", workdir / "ssru.yaml").code == 0
    for fmt in ("ctranslate2", "hf") if HAVE_CT2 else ("hf",):
        result = run_cli("export", workdir / "ssru", "--output", workdir / f"ssru-{fmt}", "--format", fmt)
        assert_one_line_error(result, "model.decoder_self", "ssru")
        assert not (workdir / f"ssru-{fmt}").exists()
    if HAVE_CT2:
        on_the_fly = run_cli("translate", workdir / "ssru", "--engine", "ctranslate2", stdin="a dog\n")
        assert_one_line_error(on_the_fly, "model.decoder_self", "--engine torch")
    result = run_cli("translate", workdir / "ssru", "--max-len-b", "3", stdin="a dog\nthe cat\n")
    assert result.code == 0 and len(result.out.split("\n")) == 3, result.err


@needs_ct2
def test_translate_cli_converts_a_run_dir_on_the_fly(loaded, run_dir, exported, test_lines, run_cli):
    lines = test_lines[:20]
    stdin = "\n".join(lines) + "\n\n   \n"
    outputs = {}
    for name, args in {
        "torch": (run_dir, "--dtype", "float32"),  # the float32 model CTranslate2 runs
        "ct2-run": (run_dir, "--engine", "ctranslate2"),
        "ct2-export": (exported, "--engine", "ctranslate2"),
    }.items():
        result = run_cli("translate", *args, "--beam-size", "2", "--nbest", "2", stdin=stdin)
        assert result.code == 0, result.err
        outputs[name] = result.out.split("\n")
        assert len(outputs[name]) == 2 * 22 + 1 and outputs[name][-5:] == [""] * 5  # 2 lines each, blank ones too
    # converted on the fly, the run dir is the export: the same engine on the same weights prints the same bytes
    assert outputs["ct2-run"] == outputs["ct2-export"]
    printed = {
        name: [[line.split("\t") for line in out[2 * i : 2 * i + 2] if line] for i in range(len(lines))]
        for name, out in outputs.items()
    }  # per sentence: [text, score] of each hypothesis
    # ... and it prints the model's 2-best lists: those of the torch search over the distribution CTranslate2
    # searches (see test_beam_equals_torch_searching_the_same_distribution), with the run's options and --nbest 2
    dec = loaded.config.decoding
    opt = Options(
        beam_size=2,
        nbest=2,
        length_penalty=dec.length_penalty,
        max_len_a=dec.max_len_a,
        max_len_b=dec.max_len_b,
        stopping=dec.stopping,
        batch_size=dec.batch_size,
    )
    model, tok = Renormalised(loaded.model), loaded.tokenizer
    renormalised = TorchEngine(model, tok, opt, torch.device("cpu"))
    ids = renormalised.encode(lines)
    search = dict(
        beam_size=2,
        nbest=2,
        length_penalty=opt.length_penalty,
        max_len_a=opt.max_len_a,
        max_len_b=opt.max_len_b,
        stopping=opt.stopping,
    )
    near_ties = tails = 0
    for src, hyps, refs in zip(ids, printed["ct2-run"], renormalised.translate_ids(ids)):
        if [text for text, _ in hyps] == tok.decode_tgt([r.tokens for r in refs]):
            for (_, score), r in zip(hyps, refs):  # the model's own scores (not renormalised), to 4 decimals
                own = math.fsum(teacher_forced_log_probs(loaded.model, src, r.tokens))
                assert float(score) == pytest.approx(
                    own / length_penalty_of(len(r.tokens) + 1, opt.length_penalty), abs=2e-4
                )
        elif search_margin(model, src + [EOS], **search) <= NEAR_TIE:
            near_ties += 1
        else:  # not rounding: only the tail may differ
            assert hyps[0][0] == tok.decode_tgt([refs[0].tokens])[0], (hyps, refs)
            tails += 1
    assert tails <= MAX_NBEST_TAIL_DIFFERENCES and near_ties < len(lines) / 2, (tails, near_ties)
    # ... and on nearly every sentence the torch engine's own best hypothesis, with the same scores where the same
    agree = 0
    for a, b in zip(printed["torch"], printed["ct2-run"]):
        agree += a[0][0] == b[0][0]
        for (text_a, score_a), (text_b, score_b) in zip(a, b):
            if text_a == text_b:
                assert float(score_a) == pytest.approx(float(score_b), abs=2e-4)
    assert agree >= MIN_AGREEMENT_WITH_TORCH_ENGINE * len(lines), agree


@needs_ct2
def test_a_failing_ctranslate2_call_is_one_line(exported, run_cli, monkeypatch):
    """What a GPU without the CUDA libraries CTranslate2 was built for gives (seen on an H100 with CUDA 13)."""
    import ctranslate2

    def missing_library(self, *args, **kwargs):
        raise RuntimeError("Library libcublas.so.12 is not found or cannot be loaded")

    monkeypatch.setattr(ctranslate2.Translator, "translate_batch", missing_library)
    result = run_cli("translate", exported, stdin="a dog\n")
    assert_one_line_error(result, "libcublas.so.12", "cpu as", "--device cpu")


@needs_ct2
def test_options_the_engine_cannot_honour_are_refused(run_dir, exported, run_cli):
    for args, needles in (
        ((exported, run_dir), ("ensembles", "--engine torch")),
        ((exported, "--alignments", "--format", "jsonl"), ("--alignments", "--engine torch")),
        ((exported, "--dtype", "int4"), ("--dtype 'int4'",)),
    ):
        assert_one_line_error(run_cli("translate", *args, stdin="a dog\n"), *needles)
    assert_one_line_error(
        run_cli("translate", run_dir, "--search", "ctranslate2", stdin="a dog\n"), "--search ctranslate2", "--engine"
    )
    assert_one_line_error(run_cli("translate", exported, "--search", "fast", stdin="a dog\n"), "search")


@needs_ct2
@pytest.mark.parametrize("nbest", [1, 2])
def test_search_ctranslate2_is_ctranslate2s_own_beam_search(loaded, exported, test_lines, nbest):
    """--search ctranslate2: the hypotheses, their order and their scores are those of one translate_batch call
    with the same beam, length penalty and the batch's longest limit, each cut at its own limit; log-probs are
    the model's own (teacher-forced) when shown."""
    import ctranslate2

    from mtkit.inference.engine import batches
    from mtkit.interop.ct2_export import read_export

    meta, tokenizer = read_export(exported)
    options = Options(
        engine="ctranslate2",
        search="ctranslate2",
        beam_size=4,
        nbest=nbest,
        length_penalty=0.6,
        batch_size=1000,
        device="cpu",
        dtype=None,
        threads=1,
        scores=True,
    )
    engine = Ct2Engine(exported, tokenizer, options, max_positions=meta["max_positions"])
    ids = engine.encode(test_lines)
    found = engine.translate_ids(ids)
    limits = [engine.max_length(len(x) + 1) for x in ids]
    translator = ctranslate2.Translator(str(exported), device="cpu", intra_threads=1)
    order = next(batches(ids, options))  # one batch of them all, shortest first, as the engine sends it
    assert sorted(order) == list(range(len(ids)))
    direct = translator.translate_batch(
        [[engine.src_vocab[t] for t in ids[i]] for i in order],
        max_batch_size=1000,
        beam_size=4,
        num_hypotheses=nbest,
        length_penalty=0.6,
        max_decoding_length=max(limits),
        min_decoding_length=0,
        max_input_length=0,
        return_scores=True,
        suppress_sequences=engine.banned,
    )
    for i, result in zip(order, direct):
        want = [[engine.tgt_ids[p] for p in pieces[: limits[i]]] for pieces in result.hypotheses]
        assert [h.tokens for h in found[i]] == want
        assert [h.score for h in found[i]] == result.scores
        for h in found[i]:  # the model's own numbers, from a teacher-forced pass
            assert len(h.token_log_probs) == len(h.tokens) + 1 and h.log_prob == pytest.approx(sum(h.token_log_probs))


# ------------------------------------------------------------------------ N lines in = N lines out
def _encoded(text: str) -> bytes:
    return text.encode("utf-8")


_line = st.one_of(
    st.lists(st.sampled_from(EN_WORDS), min_size=1, max_size=12).map(" ".join).map(_encoded),
    st.text(st.characters(exclude_characters="\n", exclude_categories=("Cs",)), max_size=40).map(_encoded),
    st.text(st.sampled_from(" \t\r\x0b\x0c\x1c\x85\xa0\u2028\u2029\u3000"), max_size=6).map(_encoded),
    st.builds(lambda word, n: _encoded(f"{word} " * n), st.sampled_from(EN_WORDS), st.integers(100, 400)),
    st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")),
    st.just(b""),
)


@needs_ct2
@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture],
)
@given(lines=st.lists(_line, max_size=9), final_newline=st.booleans())
def test_n_lines_in_n_lines_out_in_order(loaded, exported, lines, final_newline):
    data = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    parts = data.split(b"\n")
    if parts[-1] == b"":
        parts.pop()
    expected = [p.decode("utf-8", errors="replace").rstrip("\r") for p in parts]
    _, translator = engines(loaded, exported, beam_size=2, chunk_size=3, batch_size=2, max_len_a=0.2, max_len_b=3)

    jsonl = io.StringIO()
    written = translate_stream(translator, read_lines(io.BytesIO(data)), jsonl, fmt="jsonl")
    records = [json.loads(line) for line in jsonl.getvalue().split("\n")[:-1]]
    assert written == len(records) == len(expected) == jsonl.getvalue().count("\n")
    assert [r["source"] for r in records] == expected  # in input order
    for source, record in zip(expected, records):
        if not source.split():
            assert record["hypothesis"] == "" and record["nbest"] == [] and record["score"] is None
    text = io.StringIO()
    translate_stream(translator, read_lines(io.BytesIO(data)), text)
    out_lines = text.getvalue().split("\n")
    assert out_lines.pop() == ""
    assert out_lines == [one_line(r["hypothesis"]) for r in records]  # a line break kept from the source: a space


@needs_ct2
def test_translating_an_export_imports_neither_torch_nor_the_schema_nor_typer(exported, test_lines):
    """The command line translating an export dir, in a fresh interpreter: the translations come out, and neither
    torch (a second or more of start-up) nor pydantic, the config schema, YAML, Typer or Rich (together 0.15 s) is
    imported: the whole start-up is CTranslate2's and SentencePiece's plus mtkit's own light modules."""
    heavy = ("torch", "pydantic", "mtkit.config", "yaml", "typer", "rich")
    code = (
        "import atexit, sys\n"
        f"atexit.register(lambda: print('imported:', [m for m in {heavy!r} if m in sys.modules], file=sys.stderr))\n"
        "from mtkit.cli import main\n"
        f"sys.exit(main(['translate', {str(exported)!r}, '--engine', 'ctranslate2', '-b', '2', '--threads', '1']))\n"
    )
    lines = test_lines[:5]
    done = subprocess.run(
        [sys.executable, "-c", code], input="\n".join(lines) + "\n", capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.splitlines()) == len(lines) and all(done.stdout.splitlines()), done.stdout
    assert "imported: []" in done.stderr, done.stderr


@needs_ct2
def test_an_export_without_its_runtime_facts_reads_them_from_its_config(exported, test_lines, tmp_path):
    """Exports record the resolved decoding section and languages ("runtime" in mtkit_export.json) so that
    loading one needs no schema; one written before that is read through its embedded config, to the same
    options and the same translations."""
    older = tmp_path / "older"
    shutil.copytree(exported, older)
    meta = json.loads((older / "mtkit_export.json").read_text())
    runtime = meta.pop("runtime")
    assert runtime["decoding"]["beam_size"] == 4 and runtime["languages"] == ["en", "de"] and runtime["targets"] == []
    (older / "mtkit_export.json").write_text(json.dumps(meta), encoding="utf-8")
    new, old = mtkit.load(exported, threads=1), mtkit.load(older, threads=1)
    assert new.options == old.options and new.options.beam_size == 4
    assert (
        (new.engine.languages, new.engine.targets) == (old.engine.languages, old.engine.targets) == (("en", "de"), ())
    )
    assert new.translate(test_lines[:20]) == old.translate(test_lines[:20])


@needs_ct2
@pytest.mark.compares
def test_greedy_decodes_without_the_ban_and_again_with_it_where_an_output_holds_pad_or_bos(exported, test_lines):
    """Unscored greedy decoding asks CTranslate2 for no suppressed sequences (they cost it 3%); a sentence whose
    output holds PAD or BOS is decoded again with them banned, so the outputs are those of banning throughout."""
    from types import SimpleNamespace

    model = mtkit.load(exported, beam_size=1, threads=1)
    expected = model.translate(test_lines[:6])
    real, calls = model.engine.translator, []

    class Spoiler:
        """The real translator, but the first sentence of an unbanned call comes back with a PAD in it."""

        def __getattr__(self, name):  # score_batch: a beam's candidate cut at its limit is rescored
            return getattr(real, name)

        def translate_batch(self, sources, prefixes=None, **kwargs):
            calls.append((len(sources), kwargs["suppress_sequences"]))
            out = real.translate_batch(sources, prefixes, **kwargs)
            if kwargs["suppress_sequences"] is None:
                out = [SimpleNamespace(hypotheses=[["<pad>", *out[0].hypotheses[0]]], scores=[]), *out[1:]]
            return out

    model.engine.translator = Spoiler()
    assert model.translate(test_lines[:6]) == expected
    banned = model.engine.banned
    assert [seq[0] for seq in banned] == ["<pad>", "<s>"]
    unbanned = [n for n, suppress in calls if suppress is None]
    assert sum(unbanned) == len([line for line in test_lines[:6] if line.strip()])
    assert [(n, suppress) for n, suppress in calls if suppress is not None] == [(1, banned)] * len(unbanned)
    beam = mtkit.load(exported, beam_size=2, threads=1)  # beam search (and scores) keep the ban in every call
    beam.engine.translator, calls[:] = Spoiler(), []
    beam.translate(test_lines[:6])
    assert calls and all(suppress == banned for _, suppress in calls)
