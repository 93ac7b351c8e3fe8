"""int8 decoding (mtkit/models/int8.py): per-row int8 activations against float32, batch invariance bit for bit,
every linear layer replaced, and ``dtype: auto`` taking int8 where the x86 kernels exist (tests/test_kernels.py has
how it measures whether int8 pays)."""

from __future__ import annotations

import pytest
import torch
from test_transformer import STUDENTS, batch, tiny
from torch import nn

import mtkit
from conftest import toy_pairs
from mtkit.inference.loading import int8_kernels
from mtkit.models.int8 import Int8Linear, quantize_int8, quantize_rows

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.compares]  # int8 against float32


def linear_pair(n_in=48, n_out=40, bias=True, seed=0) -> tuple[nn.Linear, Int8Linear]:
    torch.manual_seed(seed)
    lin = nn.Linear(n_in, n_out, bias=bias).requires_grad_(False)
    return lin, Int8Linear(lin)


def test_rows_are_quantized_symmetrically_to_127_levels():
    x = torch.tensor([[1.0, -2.0, 0.5], [0.0, 0.0, 0.0], [3.0, 3.0, -3.0]])
    q, scale = quantize_rows(x)
    assert q.dtype == torch.int8 and scale.shape == (3, 1)
    assert q[0].tolist() == [64, -127, 32] and q[2].tolist() == [127, 127, -127]
    assert q[1].tolist() == [0, 0, 0]  # an all-zero row stays zero (no division by zero)
    assert torch.allclose(q.float() * scale, x, atol=float(scale.max()) / 2)


@pytest.mark.parametrize("bias", [True, False])
def test_int8_linear_is_close_to_float32(bias):
    """Also on a CPU without AVX-512 VNNI (CI reruns this file with AVX2 kernels), where full-range int8 weights
    would saturate the kernel's 16-bit pair sums."""
    lin, q = linear_pair(bias=bias)
    x = torch.randn(64, 48)
    want, got = lin(x), q(x)
    assert got.dtype == torch.float32 and got.shape == want.shape
    # two 8-bit roundings: the error is a small fraction of the outputs' spread
    assert (got - want).abs().max() < 0.03 * want.abs().max()
    assert torch.allclose(q.weight, lin.weight, atol=float(lin.weight.abs().max()) / 126 + 1e-7)


def test_int8_linear_rows_do_not_depend_on_the_batch():
    """Each row has its own scale and integer sums are exact: a row's output is the same bits whatever rows share its
    batch (PyTorch's dynamic quantization, one scale per batch, changes them)."""
    _, q = linear_pair(n_in=256, n_out=96)
    x = torch.randn(33, 256)
    x[7] *= 50  # a row far larger than the others would move a per-batch scale
    batched = q(x)
    for i in range(x.size(0)):
        assert torch.equal(q(x[i : i + 1])[0], batched[i]), i
    assert torch.equal(q(x[5:20]), batched[5:20])


def test_int8_linear_takes_any_leading_shape_and_no_rows():
    _, q = linear_pair()
    x = torch.randn(3, 5, 48)
    assert torch.equal(q(x), q(x.reshape(15, 48)).view(3, 5, 40))
    assert q(torch.zeros(0, 48)).shape == (0, 40) and q(torch.zeros(2, 0, 48)).shape == (2, 0, 40)


def test_quantize_int8_replaces_every_linear_and_unties_the_projection():
    model = tiny().eval()
    assert model.output is None  # tied
    src = torch.randint(4, 24, (3, 7))
    tgt = torch.randint(4, 24, (3, 5))
    with torch.inference_mode():
        want = model(src, tgt).log_softmax(-1)
        got = quantize_int8(model)(src, tgt).log_softmax(-1)
    assert not [m for m in model.modules() if type(m) is nn.Linear]
    assert isinstance(model.output, Int8Linear) and model.tgt_embed.weight.dtype == torch.float32
    assert (got - want).abs().max() < 0.1  # a random model: log-probs near -log(vocab), a few hundredths apart


@pytest.mark.parametrize("student", list(STUDENTS))
def test_student_decoders_quantize_and_decode_with_their_cache(student):
    """A deep encoder with a shallow, narrow decoder and an SSRU decoder: every linear layer (the SSRU's gate and
    input projection too) becomes int8; its cached steps give its own full forward's log-probs."""
    model = tiny(**STUDENTS[student]).eval()
    src, tgt = batch()
    with torch.inference_mode():
        want = model(src, tgt).log_softmax(-1)
        quantize_int8(model)
        got = model(src, tgt).log_softmax(-1)
        mask = src.ne(0)
        state = model.init_state(model.encode(src, mask), mask)
        steps = []
        for t in range(tgt.size(1)):
            log_probs, state, _ = model.step(tgt[:, t], state)
            steps.append(log_probs)
    assert not [m for m in model.modules() if type(m) is nn.Linear]
    assert (got - want).abs().max() < 0.1
    torch.testing.assert_close(torch.stack(steps, 1), got, atol=1e-5, rtol=1e-5)


def test_auto_dtype_is_int8_on_an_x86_cpu_and_float32_elsewhere(toy_run_workdir):
    x86 = torch.backends.quantized.engine in ("x86", "fbgemm")
    assert int8_kernels(torch.device("cpu")) == x86
    assert not int8_kernels(torch.device("cuda"))
    run = toy_run_workdir / "run"
    default = mtkit.load(run)  # the run's decoding.dtype is the default, auto (int8 here: tests set MTKIT_AUTO_DTYPE)
    layers = [m for m in default.engine.model.modules() if isinstance(m, Int8Linear)]
    assert bool(layers) == x86
    float32 = mtkit.load(run, dtype="float32")
    assert not [m for m in float32.engine.model.modules() if isinstance(m, Int8Linear)]
    lines = [src for src, _ in toy_pairs(12, seed=5)]
    # one by one against batched: the int8 products are the same bits (above), but attention and norms in float32
    # may differ by a few ulps between batch shapes and move an activation across a rounding step, which at a near
    # tie of this toy model can change a sentence (3 in 1,000 on the demo model, docs/benchmarks.md section 9)
    same = sum(default.translate(line) == out for line, out in zip(lines, default.translate(lines)))
    assert same >= len(lines) - 2, same
