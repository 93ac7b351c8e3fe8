"""Position schemes of the Transformer that live outside its attention arithmetic.

- ``sinusoidal_table``: the fixed absolute encodings of Vaswani et al. (2017), added to the embeddings;
- ``Rotary``: rotary position embedding (RoPE, Su et al. 2021), applied to queries and keys;
- ``ALiBi``: attention with linear biases (Press et al. 2022): no position enters the embeddings; each head adds
  ``-slope * |i - j|`` to the (scaled) score of query position i against key position j. In the encoder the bias
  is symmetric in distance; in the decoder the causal mask hides j > i, so what remains is ``-slope * (i - j)``.

(Shaw et al.'s relative positions are learned per distance inside the attention: transformer.MultiHeadAttention.)
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def sinusoidal_table(length: int, dim: int, layout: str = "interleaved", offset: int = 0) -> Tensor:
    """The fixed sinusoidal position encodings of Vaswani et al. (2017), rows ``offset`` to ``offset + length``.

    Args:
        length: the number of positions.
        dim: the number of channels.
        layout: ``"halves"``: the sines of all frequencies in the first half of the channels, the cosines in the
            second (Marian's table, computed in float64 as Marian's converter does); ``"fairseq"``: halves too, with
            fairseq's frequencies ``10000 ** (-i / (dim / 2 - 1))`` and a zero last channel where ``dim`` is odd
            (M2M-100's and NLLB-200's table, computed in float32 as they do); any other value: sin on even, cos on
            odd channels, as in the paper.
        offset: the row of the first position (``model.position_offset``: fairseq's positions start past the
            padding id).

    Returns:
        (length, dim) float32.
    """
    if offset:
        return sinusoidal_table(length + offset, dim, layout)[offset:]
    if layout == "fairseq":
        half = dim // 2
        step = math.log(10000.0) / max(half - 1, 1)
        inv_freq = torch.exp(torch.arange(half, dtype=torch.float32) * -step)
        angles = torch.arange(length, dtype=torch.float32)[:, None] * inv_freq[None, :]  # (length, half)
        table = torch.cat([angles.sin(), angles.cos()], dim=1)
        return torch.cat([table, torch.zeros(length, dim - 2 * half)], dim=1)
    if layout == "halves":
        position = torch.arange(length, dtype=torch.float64)[:, None]
        angles = position / 10000 ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)  # (length, ceil(dim/2))
        return torch.cat([angles.sin(), angles[:, : dim // 2].cos()], dim=1).float()
    position = torch.arange(length, dtype=torch.float32)[:, None]
    inv_freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(length, dim)
    table[:, 0::2] = torch.sin(position * inv_freq)
    table[:, 1::2] = torch.cos(position * inv_freq[: dim // 2])
    return table


class Rotary(nn.Module):
    """Rotary position embedding: rotates channel pairs (i, i + head_dim/2) by angle pos * theta_i.

    Args:
        head_dim: the channels of one head (even).
        max_positions: the positions the precomputed angles cover.
    """

    def __init__(self, head_dim: int, max_positions: int):
        super().__init__()
        inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        angles = torch.arange(max_positions, dtype=torch.float32)[:, None] * inv_freq[None, :]
        self.register_buffer("cos", angles.cos(), persistent=False)  # (max_positions, head_dim/2)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: Tensor, start: int = 0) -> Tensor:
        """Rotate queries or keys by their positions.

        Args:
            x: (batch, heads, length, head_dim) at positions start .. start + length - 1.
            start: the position of the first; start + length must not exceed ``max_positions``.

        Returns:
            The rotated x, its shape and dtype.
        """
        length = x.size(-2)
        cos = self.cos[start : start + length].to(x.dtype)
        sin = self.sin[start : start + length].to(x.dtype)
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


def alibi_slopes(heads: int) -> list[float]:
    """The head slopes of Press et al. (2022).

    For n heads, n a power of 2: the geometric sequence 2^(-8/n * i), i = 1..n (8 heads: 1/2, 1/4, ..., 1/256).
    Otherwise, with m the largest power of 2 below n: the m slopes of m heads, then every other slope of 2m heads
    (those that the m-head sequence lacks) up to n in all.

    Args:
        heads: the number of heads.

    Returns:
        One slope per head.

    Raises:
        ValueError: ``heads`` < 1.
    """
    if heads < 1:
        raise ValueError(f"ALiBi needs at least one head (got {heads})")
    m = 2 ** math.floor(math.log2(heads))
    slopes = [2.0 ** (-8.0 / m * i) for i in range(1, m + 1)]
    if m < heads:
        slopes += alibi_slopes(2 * m)[0::2][: heads - m]
    return slopes


class ALiBi(nn.Module):
    """Per-head linear distance biases, shared by the self-attention layers of one model (no parameters).

    Args:
        heads: the number of attention heads.
    """

    def __init__(self, heads: int):
        super().__init__()
        self.register_buffer("slopes", torch.tensor(alibi_slopes(heads), dtype=torch.float32), persistent=False)

    def forward(self, q_start: int, tq: int, tk: int) -> Tensor:
        """The biases of queries at positions q_start .. q_start + tq - 1 against keys at 0 .. tk - 1.

        Future keys (j > i) get a bias too; a causal attention masks them anyway.

        Args:
            q_start: the position of the first query.
            tq: the number of queries.
            tk: the number of keys.

        Returns:
            (heads, tq, tk) float32: -slope * |i - j|.
        """
        device = self.slopes.device
        q_pos = torch.arange(q_start, q_start + tq, device=device)
        k_pos = torch.arange(tk, device=device)
        distance = (q_pos[:, None] - k_pos[None, :]).abs().to(torch.float32)  # (tq, tk)
        return -self.slopes.float()[:, None, None] * distance
