"""The int8 products a decoding step runs, on other kernels than ``torch._int_mm``: one table per call.

    python benchmarks/results/2026-11-26-int8-kernels/int8_products.py [ROWS]

For each layer shape of configs/multi30k-transformer.yaml's decoder and output layer (in x out), at ROWS rows
(default 1,000: beam 5 x 200 sentences): microseconds per call (the first quartile of 30) of
- int_mm: mtkit's Int8Linear as it is (rows quantized, ``torch._int_mm``, scaled back in four passes);
- qlinear_u8: oneDNN's quantized linear on prepacked weights (``torch.ops.onednn.qlinear_pointwise``), the rows
  quantized as mtkit does and offset by 128 into uint8 (the sign bit flipped), the weight scales applied by the kernel, then the row scale
  and the bias; it also says whether its output equals Int8Linear's, bit for bit;
- dynamic: PyTorch's dynamic quantized linear (``quantized::linear_dynamic``, fbgemm), one activation scale per
  batch (not batch-invariant; for its speed only);
- float32: ``F.linear``.
Then the output layer followed by the log-softmax, as a decoding step runs it, through Int8Linear and qlinear_u8.
"""

import sys
import time
import warnings

import torch
import torch.nn.functional as F

from mtkit.memory import keep_freed_memory
from mtkit.models.int8 import Int8Linear, quantize_rows

warnings.filterwarnings("ignore")
torch.set_num_threads(2)
torch.set_grad_enabled(False)
keep_freed_memory()


def quartile_us(fn, n: int = 30) -> float:
    fn(), fn()
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[n // 4] * 1e6


class QLinearU8:
    def __init__(self, layer: Int8Linear):
        self.qweight = layer.qweight_t.t().contiguous()  # (out, in) int8
        self.packed = torch.ops.onednn.qlinear_prepack(self.qweight, None)
        self.scale, self.bias = layer.weight_scale, layer.bias
        self.zero = torch.zeros(layer.out_features, dtype=torch.long)

    def __call__(self, x):
        q, s = quantize_rows(x)
        u8 = q.view(torch.uint8).bitwise_xor(128)  # v + 128: the sign bit flipped
        out = torch.ops.onednn.qlinear_pointwise(
            u8, 1.0, 128, self.packed, self.scale, self.zero, None, 1.0, 0, torch.float32, "none", [], ""
        )
        out.mul_(s)
        return out if self.bias is None else out.add_(self.bias)


def layer_row(n_in: int, n_out: int, bias: bool, rows: int) -> str:
    dense = torch.nn.Linear(n_in, n_out, bias=bias)
    x = torch.randn(rows, n_in)
    layer = Int8Linear(dense)
    qlin = QLinearU8(layer)
    qw = torch._make_per_channel_quantized_tensor(
        layer.qweight_t.t().contiguous(), layer.weight_scale.double(), torch.zeros(n_out, dtype=torch.long), 0
    )
    packed = torch.ops.quantized.linear_prepack(qw, layer.bias)
    same = torch.equal(layer(x), qlin(x))
    return (
        f"{n_in}x{n_out:<6} {quartile_us(lambda: layer(x)):>8.0f} {quartile_us(lambda: qlin(x)):>10.0f} "
        f"{str(same):>9} {quartile_us(lambda: torch.ops.quantized.linear_dynamic(x, packed, False)):>8.0f} "
        f"{quartile_us(lambda: F.linear(x, dense.weight, dense.bias)):>8.0f}"
    )


def output_layer_row(layer: Int8Linear, qlin: QLinearU8, rows: int) -> str:
    h = torch.randn(rows, 256) * 3
    same = torch.equal(layer(h).log_softmax(-1), qlin(h).log_softmax(-1))
    a = quartile_us(lambda: layer(h).log_softmax(-1))
    b = quartile_us(lambda: qlin(h).log_softmax(-1))
    return (
        f"output layer + log-softmax, {rows} rows: Int8Linear {a:.0f}, qlinear_u8 {b:.0f} ({a / b:.2f}x), "
        f"same bits {same}"
    )


rows = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
print(f"{time.strftime('%Y-%m-%d %H:%M')} torch {torch.__version__}, kernels {torch.backends.cpu.get_cpu_capability()}")
print(f"{rows} rows; microseconds per call")
print(f"{'in x out':<10} {'int_mm':>8} {'qlinear_u8':>10} {'same bits':>9} {'dynamic':>8} {'float32':>8}")
torch.manual_seed(0)
for n_in, n_out, bias in [(256, 768, True), (256, 256, True), (256, 1024, True), (1024, 256, True), (256, 8000, False)]:
    print(layer_row(n_in, n_out, bias, rows))
output = Int8Linear(torch.nn.Linear(256, 8000, bias=False))
for n in (1000, 500, 200):
    print(output_layer_row(output, QLinearU8(output), n))
