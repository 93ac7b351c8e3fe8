"""The Python API (``mtkit.load``) on the tiny Transformer of conftest.py's ``toy_run_workdir``.

- ``import mtkit`` imports no torch, and ``mtkit.load`` is there.
- ``load`` + ``translate`` give what ``mtkit translate`` prints for the same lines and options (text, jsonl with
  n-best scores, an ensemble, sampling, the CTranslate2 engine): the CLI streams through the same object, so the
  outputs are compared exactly.
- N lines in = N results out, in order, for empty, whitespace-only, unicode, huge and multi-line strings.
- Typed results: n-best lists best first, score == log_prob / length penalty, token log-probs and alignments
  of the right shapes; the CTranslate2 engine against the torch one (near-ties tolerated, conftest.py).
- Bad options raise ``MtkitError`` with the one line the CLI prints.
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

import mtkit
from conftest import cli, diverged_at_near_ties
from mtkit.checkpoint import load_checkpoint
from mtkit.decoding.search import length_penalty_of
from mtkit.models.base import EOS

pytestmark = pytest.mark.usefixtures("one_thread")

try:
    import ctranslate2  # noqa: F401

    HAVE_CT2 = True
except ImportError:
    HAVE_CT2 = False
needs_ct2 = pytest.mark.skipif(not HAVE_CT2, reason='ctranslate2 is not installed (pip install "mtkit[ct2]")')


@pytest.fixture(scope="module")
def lines(toy_run_workdir) -> list[str]:
    test = (toy_run_workdir / "corpus" / "test.en").read_text(encoding="utf-8").splitlines()
    return test[:12] + ["", "   \t "] + test[12:16]


@pytest.fixture(scope="module")
def rnn_run(toy_run_workdir, tmp_path_factory) -> Path:
    """A 2-update RNN on the toy run's prepared data."""
    root = tmp_path_factory.mktemp("api-rnn")
    tree = yaml.safe_load((toy_run_workdir / "config.yaml").read_text(encoding="utf-8"))
    tree["model"] = {"arch": "luong", "embed_dim": 16, "hidden_size": 16}
    tree["training"].update(run_dir=str(root / "rnn"), max_updates=2, validate_every=2)
    (root / "rnn.yaml").write_text(yaml.safe_dump(tree, sort_keys=False), encoding="utf-8")
    assert cli("train", root / "rnn.yaml") == 0
    return root / "rnn"


def cli_lines(run_cli, lines: list[str], *args) -> list[str]:
    result = run_cli("translate", *args, stdin="".join(line + "\n" for line in lines))
    assert result.code == 0, result.err
    out = result.out.split("\n")
    assert out.pop() == ""
    return out


# ---------------------------------------------------------------------------------------- import
def test_import_mtkit_imports_no_torch_and_offers_load():
    code = (
        "import sys, mtkit; "
        "assert callable(mtkit.load) and mtkit.MtkitError and mtkit.Translation and mtkit.Hypothesis; "
        "heavy = [m for m in ('torch', 'ctranslate2', 'matplotlib', 'sentencepiece') if m in sys.modules]; "
        "assert not heavy, f'import mtkit imported {heavy}'"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


# ------------------------------------------------------------------------------- equal to the CLI
def test_translate_equals_the_cli(model, run_dir, lines, run_cli):
    expected = cli_lines(run_cli, lines, run_dir)
    assert model.translate(lines) == expected
    assert model.translate(lines[0]) == expected[0]  # a str in, a str out
    assert mtkit.load(run_dir, beam_size=1).translate(lines) == cli_lines(run_cli, lines, run_dir, "-b", 1)


def test_nbest_scores_equal_the_cli_jsonl(model, run_dir, lines, run_cli):
    records = [json.loads(r) for r in cli_lines(run_cli, lines, run_dir, "--format", "jsonl", "--nbest", 3)]
    found = model.translate_batch(lines, nbest=3)  # nbest for this call only
    assert model.options.nbest == 1
    assert len(found) == len(records) == len(lines)
    for translation, record in zip(found, records):
        assert translation.source == record["source"]
        assert [h.text for h in translation.hypotheses] == [h["hypothesis"] for h in record["nbest"]]
        assert [h.score for h in translation.hypotheses] == [h["score"] for h in record["nbest"]]
        assert [h.log_prob for h in translation.hypotheses] == [h["log_prob"] for h in record["nbest"]]
        if translation.best is not None:
            assert list(translation.best.tokens) == record["tokens"]
            assert [round(x, 5) for x in translation.best.token_log_probs] == record["token_log_probs"]


def test_an_ensemble_and_sampling_equal_the_cli(run_dir, lines, run_cli):
    best = run_dir / "checkpoints" / "best.safetensors"
    ensemble = mtkit.load(run_dir, checkpoints=[best], beam_size=2)
    assert ensemble.translate(lines) == cli_lines(run_cli, lines, run_dir, "--checkpoint", best, "-b", 2)
    sampled = mtkit.load(run_dir, sampling=True, seed=3, top_k=5)
    expected = cli_lines(run_cli, lines, run_dir, "--algorithm", "sampling", "--seed", 3, "--top-k", 5)
    assert sampled.translate(lines) == expected


# ------------------------------------------------------------------------------ N in = N out
def test_n_lines_in_n_results_out_in_order(model, lines):
    odd = [
        "",
        " ",
        "\t\r ",
        "A dog\nruns in the park .",  # a line break inside a string is whitespace, as a space is
        "x" * 100_000,
        " ".join(lines) * 3,  # over the model's length limit
        "Ein Hund läuft ☃ 🐕 \u2028 \x00\x1b[31m",
        "A dog runs in the park .\r",
        b"a \xff cat",  # bytes: UTF-8, invalid bytes replaced
    ]
    before = model.truncated
    whole = model.translate_batch(odd, scores=False, split_sentences=False)
    assert model.truncated == before + 2 and len(whole[5].source_tokens) == model.max_src
    assert [t.text for t in whole[:3]] == ["", "", ""] and all(t.hypotheses for t in whole[3:])
    before = model.truncated
    found = model.translate_batch(odd, scores=False)  # sentences: the long line is cut into them, not truncated
    assert len(found) == len(odd)
    assert [t.source for t in found] == [*odd[:-1], "a \ufffd cat"]
    assert [t.hypotheses for t in found[:3]] == [(), (), ()] and [t.text for t in found[:3]] == ["", "", ""]
    assert all(t.hypotheses for t in found[3:])
    assert (
        found[3].source_tokens
        == found[7].source_tokens
        == model.translate_batch("A dog runs in the park .").source_tokens
    )
    assert model.truncated == before + 1 and len(found[5].sentences) > 2 * len(lines)
    texts = model.translate(iter(odd))  # any iterable
    assert texts == [t.text for t in found]
    assert model.translate([]) == [] and model.translate_batch([]) == []
    with pytest.raises(TypeError, match="line 2 is a NoneType"):
        model.translate(["a dog", None])


def test_more_lines_than_a_chunk_equal_the_cli_in_order(model, run_dir, lines, run_cli):
    many = [f"{lines[i % len(lines)]} {i % 7} ." for i in range(3 * model.options.chunk_size + 7)]
    found = model.translate_batch(many, scores=False)
    assert [t.source for t in found] == many
    assert [t.text for t in found] == cli_lines(run_cli, many, run_dir)


# ---------------------------------------------------------------------------------- typed results
def test_nbest_scores_and_alignments_are_typed_and_consistent(model, lines):
    alpha = model.options.length_penalty
    found = model.translate_batch(lines, nbest=3, alignments=True)
    for translation in found:
        assert isinstance(translation, mtkit.Translation)
        if not translation.source.split():
            assert translation.hypotheses == () and translation.best is None
            continue
        hyps = translation.hypotheses
        assert len(hyps) == 3 and translation.text == hyps[0].text
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        for h in hyps:
            assert isinstance(h, mtkit.Hypothesis) and all(isinstance(t, str) for t in h.tokens)
            assert len(h.token_log_probs) == len(h.tokens) + 1 and all(x <= 0 for x in h.token_log_probs)
            assert math.isclose(sum(h.token_log_probs), h.log_prob, abs_tol=1e-3)
            assert h.score == pytest.approx(h.log_prob / length_penalty_of(len(h.tokens) + 1, alpha), rel=1e-6)
            assert len(h.alignment) == len(h.tokens) + 1
            assert all(len(row) == len(translation.source_tokens) + 1 for row in h.alignment)
            assert all(math.isclose(sum(row), 1.0, abs_tol=1e-4) for row in h.alignment)
    with pytest.raises(dataclasses.FrozenInstanceError):
        found[0].hypotheses[0].text = "changed"
    plain = model.translate_batch(lines[0])  # a str in, one Translation out
    assert plain.text == found[0].text and len(plain.hypotheses) == 1 and plain.best.alignment is None
    bare = model.translate_batch(lines[0], scores=False).best
    assert (bare.score, bare.log_prob, bare.token_log_probs) == (None, None, None)


# ----------------------------------------------------------------------------------- CTranslate2
@needs_ct2
def test_ctranslate2_engine_equals_its_cli_and_the_torch_engine(run_dir, lines, run_cli):
    ct2_model = mtkit.load(run_dir, engine="ctranslate2", beam_size=1)
    assert ct2_model.translate(lines) == cli_lines(run_cli, lines, run_dir, "--engine", "ctranslate2", "-b", 1)
    torch_model = mtkit.load(run_dir, beam_size=1, dtype="float32")  # the float32 model CTranslate2 runs
    sentences = [line for line in lines if line.split()]
    found = ct2_model.translate_batch(sentences)
    expected = torch_model.translate_batch(sentences)
    loaded = load_checkpoint(run_dir)
    sources = [ids + [EOS] for ids in torch_model.engine.encode(sentences)]
    dec = loaded.config.decoding
    diverged = diverged_at_near_ties(
        loaded.model,
        sources,
        [t.hypotheses for t in found],
        [t.hypotheses for t in expected],
        beam_size=1,
        length_penalty=dec.length_penalty,
        max_len_a=dec.max_len_a,
        max_len_b=dec.max_len_b,
    )
    for i, (a, b) in enumerate(zip(found, expected)):
        if i not in diverged:  # the model's own scores (CTranslate2 rescores them), to rounding
            assert a.text == b.text
            assert a.best.score == pytest.approx(b.best.score, abs=2e-4)
            assert a.best.token_log_probs == pytest.approx(b.best.token_log_probs, abs=2e-4)


@needs_ct2
def test_ctranslate2_refuses_alignments_as_the_cli_does(run_dir, run_cli):
    result = run_cli("translate", run_dir, "--engine", "ctranslate2", "--alignments", stdin="a dog\n")
    message = result.err.strip()
    with pytest.raises(mtkit.MtkitError) as err:
        mtkit.load(run_dir, engine="ctranslate2", alignments=True)
    assert message == f"mtkit: error: {err.value}"
    ct2_model = mtkit.load(run_dir, engine="ctranslate2")
    with pytest.raises(mtkit.MtkitError) as err:
        ct2_model.translate_batch(["a dog"], alignments=True)
    assert message == f"mtkit: error: {err.value}"


# ---------------------------------------------------------------------------------- bad options
def test_bad_options_raise_the_cli_message(run_dir, rnn_run, tmp_path, run_cli):
    cases = [
        (dict(engine="tensorflow"), ("--engine", "tensorflow")),
        (dict(dtype="int4"), ("--dtype", "int4")),
        (dict(dtype="float16", device="cpu"), ("--dtype", "float16", "--device", "cpu")),
        (dict(beam_size=0), ("--beam-size", 0)),
        (dict(stopping="never"), ("--stopping", "never")),
        (dict(device="tpu"), ("--device", "tpu")),
        (dict(checkpoints=[tmp_path / "nowhere.safetensors"]), ("--checkpoint", tmp_path / "nowhere.safetensors")),
    ]
    if HAVE_CT2:
        cases.append((dict(engine="ctranslate2", checkpoints=[run_dir]), ("--engine", "ctranslate2", run_dir)))
        cases.append((dict(engine="ctranslate2", dtype="int4"), ("--engine", "ctranslate2", "--dtype", "int4")))
    checked = [(run_dir, kwargs, args) for kwargs, args in cases]
    checked.append((tmp_path / "missing-run", {}, ()))
    checked.append((rnn_run, dict(shortlist=5), ("--shortlist", 5)))
    for path, kwargs, args in checked:
        result = run_cli("translate", path, *args, stdin="a dog\n")
        assert result.code == 2 and len(result.err.strip().splitlines()) == 1, (args, result.err)
        with pytest.raises(mtkit.MtkitError) as err:
            mtkit.load(path, **kwargs)
        assert result.err.strip() == f"mtkit: error: {err.value}", kwargs


def test_a_bad_nbest_for_one_call_is_the_cli_message(model, run_dir, run_cli):
    result = run_cli("translate", run_dir, "--nbest", 0, stdin="a dog\n")
    with pytest.raises(mtkit.MtkitError) as err:
        model.translate_batch(["a dog"], nbest=0)
    assert result.err.strip() == f"mtkit: error: {err.value}"
    assert model.options.nbest == 1  # left as loaded
