"""``dtype: auto`` on the CPU (mtkit/inference/kernels.py): the shapes it times, the threshold, the cache, the override
and what ``--verbose`` says."""

from __future__ import annotations

import json

import pytest
import torch
from test_transformer import tiny

import mtkit
from mtkit.errors import MtkitError
from mtkit.inference import kernels
from mtkit.models.int8 import Int8Linear


@pytest.fixture
def measured(monkeypatch, tmp_path):
    """Measure for real (no MTKIT_AUTO_DTYPE), caching under tmp_path; returns the cache file."""
    monkeypatch.delenv("MTKIT_AUTO_DTYPE", raising=False)
    monkeypatch.setenv("MTKIT_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / kernels.CACHE_FILE


def fake_timings(monkeypatch, float_ms: float, int8_ms: float) -> list:
    calls = []

    def measure(shapes):
        calls.append(shapes)
        return float_ms, int8_ms

    monkeypatch.setattr(kernels, "measure", measure)
    return calls


def test_the_step_shapes_are_the_decoder_products_and_a_tied_output_projection():
    model = tiny(tie_embeddings=True)
    shapes = kernels.step_shapes(model)
    d, vocab = model.cfg.d_model, model.tgt_vocab_size
    assert (d, vocab, False) in shapes  # the tied projection: the embedding matrix, no bias
    assert (d, 3 * d, True) in shapes  # the decoder's self-attention
    layers = model.cfg.decoder_layers
    assert len(shapes) == layers * 7 + 1  # qkv, out, cross q, kv, out, fc1, fc2 per layer; not the encoder's
    untied = kernels.step_shapes(tiny(tie_embeddings=False))
    assert untied.count((d, vocab, False)) == 1  # an own output layer counts once


@pytest.mark.parametrize(
    ("float_ms", "int8_ms", "dtype"), [(3.0, 1.0, "int8"), (1.2, 1.0, "int8"), (1.1, 1.0, "float32")]
)
def test_int8_is_chosen_when_it_gains_the_threshold(monkeypatch, measured, float_ms, int8_ms, dtype):
    fake_timings(monkeypatch, float_ms, int8_ms)
    choice = kernels.choose_cpu_dtype(tiny())
    assert choice.dtype == dtype and not choice.cached
    assert f"-> {dtype}" in choice.reason() and "measured now" in choice.reason()


def test_the_answer_is_cached_per_machine_and_shapes(monkeypatch, measured):
    calls = fake_timings(monkeypatch, 3.0, 1.0)
    first = kernels.choose_cpu_dtype(tiny())
    again = kernels.choose_cpu_dtype(tiny())
    assert len(calls) == 1 and again.cached and again.dtype == first.dtype == "int8"
    entry = next(iter(json.loads(measured.read_text()).values()))
    assert entry["dtype"] == "int8" and entry["float32_ms"] == 3.0
    kernels.choose_cpu_dtype(tiny(d_model=64))  # other shapes: measured again
    assert len(calls) == 2
    monkeypatch.setattr(torch, "get_num_threads", lambda: 7)  # another thread count: measured again
    kernels.choose_cpu_dtype(tiny())
    assert len(calls) == 3 and len(json.loads(measured.read_text())) == 3


def test_a_damaged_cache_is_measured_over_and_off_writes_nothing(monkeypatch, measured, tmp_path):
    calls = fake_timings(monkeypatch, 3.0, 1.0)
    measured.parent.mkdir(parents=True)
    measured.write_text("{not json")
    assert kernels.choose_cpu_dtype(tiny()).dtype == "int8" and len(calls) == 1
    assert json.loads(measured.read_text())  # rewritten whole
    monkeypatch.setenv("MTKIT_CACHE_DIR", "off")
    kernels.choose_cpu_dtype(tiny())
    kernels.choose_cpu_dtype(tiny())
    assert len(calls) == 3


def test_the_override_skips_the_measurement_and_a_bad_one_is_refused(monkeypatch, measured):
    calls = fake_timings(monkeypatch, 3.0, 1.0)
    monkeypatch.setenv("MTKIT_AUTO_DTYPE", "float32")
    choice = kernels.choose_cpu_dtype(tiny())
    assert choice.dtype == "float32" and not calls and "MTKIT_AUTO_DTYPE" in choice.reason()
    monkeypatch.setenv("MTKIT_AUTO_DTYPE", "fp8")
    with pytest.raises(MtkitError, match="MTKIT_AUTO_DTYPE must be int8 or float32"):
        kernels.choose_cpu_dtype(tiny())


def test_a_real_measurement_times_both_kinds(measured):
    float_ms, int8_ms = kernels.measure(kernels.step_shapes(tiny()))
    assert float_ms > 0 and int8_ms > 0


x86 = torch.backends.quantized.engine in ("x86", "fbgemm")


@pytest.mark.skipif(not x86, reason="dtype auto measures only where the x86 int8 kernels exist")
@pytest.mark.parametrize(("float_ms", "dtype"), [(3.0, "int8"), (1.0, "float32")])
def test_load_follows_the_choice_and_says_why(monkeypatch, measured, toy_run_workdir, float_ms, dtype):
    fake_timings(monkeypatch, float_ms, 1.0)
    model = mtkit.load(toy_run_workdir / "run")  # the run's decoding.dtype is the default, auto
    int8_layers = [m for m in model.engine.model.modules() if isinstance(m, Int8Linear)]
    assert bool(int8_layers) == (dtype == "int8")
    assert model.engine.dtype_name == dtype
    assert model.engine.describe().startswith(f"torch on cpu, {torch.get_num_threads()} threads, {dtype}; dtype auto")
    explicit = mtkit.load(toy_run_workdir / "run", dtype="float32")
    assert explicit.engine.dtype_name == "float32" and explicit.engine.describe().endswith("dtype float32")


def test_translate_verbose_says_what_computes_on_stderr(monkeypatch, measured, toy_run_workdir, run_cli):
    fake_timings(monkeypatch, 3.0, 1.0)
    result = run_cli("translate", toy_run_workdir / "run", "--verbose", stdin="a man runs\n")
    assert result.code == 0 and len(result.out.splitlines()) == 1
    expected = "int8" if x86 else "float32"
    assert result.err.startswith(f"mtkit: torch on cpu, {torch.get_num_threads()} threads, {expected}; dtype auto")
    quiet = run_cli("translate", toy_run_workdir / "run", stdin="a man runs\n")
    assert quiet.out == result.out and "dtype auto" not in quiet.err
