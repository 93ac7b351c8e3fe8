"""int8 inference on the CPU: every linear layer with int8 weights and int8 activations, one scale per row.

``Int8Linear`` keeps its weight as int8, one scale per output channel (symmetric: the largest magnitude maps to 63,
see ``WEIGHT_LEVELS``), and quantizes each input row on the fly with its own scale (to 127); the product is an
exact int8 x int8 -> int32 matrix product (``torch._int_mm``, oneDNN's kernels), scaled back to float32 per row and
channel. As each row is quantized on its own and integer sums do not depend on their order, a sentence's output is
the same whatever other sentences share its batch: translations stay batch-invariant, which PyTorch's dynamic
quantization (one activation scale per batch) does not give. docs/benchmarks.md (section 2) has its speed.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from mtkit.models.base import Seq2Seq

ACTIVATION_LEVELS = 127
# Weights keep 7 bits: on a CPU without AVX-512 VNNI the int8 kernel sums pairs of (activation + 128) x weight
# products in 16 bits, which saturate unless |weight| <= 63 (255 x 63 x 2 < 32,768); with 63 levels the integer
# product is exact on every x86 CPU, so int8 outputs are the same on AVX2 and AVX-512 machines.
WEIGHT_LEVELS = 63


def quantize_rows(x: Tensor, levels: int = ACTIVATION_LEVELS) -> tuple[Tensor, Tensor]:
    """Symmetric int8 quantization of each row on its own: a row's largest magnitude maps to ``levels``.

    Args:
        x: (rows, n) floating point.
        levels: the largest quantized magnitude, at most 127.

    Returns:
        (values, scales): values (rows, n) int8 in [-levels, levels], scales (rows, 1) in the dtype of ``x``, so
        that x is about values * scales.
    """
    scale = x.abs().amax(dim=1, keepdim=True).clamp_(min=1e-12).div_(levels)  # (rows, 1)
    # |x| / scale <= levels already (the largest magnitude maps to levels): no clamp, one op less per layer
    return (x / scale).round_().to(torch.int8), scale


class Int8Linear(nn.Module):
    """A linear layer with int8 weights and per-row int8 activations (see the module docstring).

    Args:
        linear: the float layer whose weight (quantized) and bias (kept in float32) this one takes.
    """

    def __init__(self, linear: nn.Linear):
        super().__init__()
        weight = linear.weight.detach().float()  # (out, in)
        self.in_features, self.out_features = linear.in_features, linear.out_features
        q, scale = quantize_rows(weight, WEIGHT_LEVELS)
        self.register_buffer("qweight_t", q.t().contiguous())  # (in, out): the layout the product takes
        self.register_buffer("weight_scale", scale.view(-1))  # (out,)
        bias = None if linear.bias is None else linear.bias.detach().float().clone()
        self.register_buffer("bias", bias)

    @property
    def weight(self) -> Tensor:
        """The float32 weight the int8 one stands for, (out, in) (a shortlist multiplies its rows itself)."""
        return self.qweight_t.t().float() * self.weight_scale[:, None]

    def forward(self, x: Tensor) -> Tensor:
        """x (..., in_features), any floating dtype -> (..., out_features) float32."""
        shape = x.shape
        rows = x.reshape(-1, self.in_features)
        if rows.dtype != torch.float32:
            rows = rows.float()
        if rows.size(0) == 0:
            out = rows.new_zeros(0, self.out_features)
        else:
            q, scale = quantize_rows(rows)
            # int32 -> float32 first, then scaled in place: a mixed-dtype product would cast into a temporary first
            out = torch._int_mm(q, self.qweight_t).float().mul_(self.weight_scale).mul_(scale)  # (rows, out)
        if self.bias is not None:
            out.add_(self.bias)
        return out.view(*shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        """The sizes and whether there is a bias, for ``repr``."""
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


def quantize_int8(model: Seq2Seq) -> Seq2Seq:
    """Make every ``nn.Linear`` of ``model`` an ``Int8Linear``, in place, for inference on the CPU.

    The attention projections become int8 with the other linear layers; a Transformer's tied output projection
    gets its own int8 copy first. Embeddings, the attention arithmetic, recurrent cells (nn.GRU, nn.LSTM) and
    layer norms keep their float weights.

    Args:
        model: the model to convert.

    Returns:
        ``model`` itself.
    """
    from mtkit.models.transformer import Transformer

    if isinstance(model, Transformer) and model.output is None:  # untie: the projection gets its own int8 copy
        model.output = nn.Linear(model.tgt_embed.weight.size(1), model.tgt_vocab_size, bias=False)
        model.output.weight = nn.Parameter(model.tgt_embed.weight.detach().clone())
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear:
                setattr(parent, name, Int8Linear(child))
    return model
