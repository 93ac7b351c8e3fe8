"""The decoder's self-attention keys and values while decoding, kept time-major in buffers with room to grow.

A cache is one float tensor (capacity, rows, d_model): position ``p`` of hypothesis ``r`` at ``[p, r]``, positions
``0 .. filled - 1`` written. Time-major, a step's keys are one contiguous block written in place (no copy of the
positions before it, as concatenating them would make), and following the beams copies whole positions of
d_model floats into a fresh buffer, one contiguous run per position; attention reads the buffer through a strided
view, which the batched matrix products take without a copy. docs/benchmarks.md (section 17) has what it saves.

A buffer is shared by the state that wrote a position and the state before it (which never reads that position),
so a state must not be stepped twice unless it is copied first: ``TransformerState`` keeps that rule.
"""

from __future__ import annotations

import torch
from torch import Tensor

INITIAL_CAPACITY = 16  # positions a new cache holds; it doubles when full


def new_cache(like: Tensor, rows: int, d_model: int) -> Tensor:
    """An empty cache (``INITIAL_CAPACITY``, rows, d_model) of the dtype and device of ``like``."""
    return like.new_empty(INITIAL_CAPACITY, rows, d_model)


def with_room(cache: Tensor, filled: int, copy: bool = False) -> Tensor:
    """``cache`` if position ``filled`` fits (and no ``copy`` is asked for), else a new buffer holding its ``filled``
    positions, of twice the capacity when full."""
    if filled < cache.size(0) and not copy:
        return cache
    capacity = cache.size(0) if filled < cache.size(0) else max(2 * cache.size(0), filled + 1)
    out = cache.new_empty(capacity, *cache.shape[1:])
    out[:filled] = cache[:filled]
    return out


def write(cache: Tensor, position: int, heads: Tensor) -> Tensor:
    """Write one position and return the cache up to it as attention reads it.

    Args:
        cache: (capacity, rows, d_model) with room for ``position``.
        position: the position written (all before it filled).
        heads: (rows, heads, 1, head_dim) the keys or values of ``position``.

    Returns:
        (rows, heads, position + 1, head_dim), a view of ``cache``.
    """
    rows, h, _, hd = heads.shape
    cache[position].view(rows, h, hd).copy_(heads[:, :, 0])
    return cache[: position + 1].view(position + 1, rows, h, hd).permute(1, 2, 0, 3)


def reorder(cache: Tensor, filled: int, index: Tensor) -> Tensor:
    """The cache of rows ``index`` (rows may repeat), in a new buffer of the same capacity.

    Args:
        cache: (capacity, rows, d_model).
        filled: the positions written.
        index: (new_rows,) int64 row numbers.
    """
    capacity, rows, d = cache.shape
    out = cache.new_empty(capacity, index.numel(), d)
    if filled and index.numel():
        positions = torch.arange(filled, device=index.device, dtype=index.dtype)
        flat = (index[None, :] + rows * positions[:, None]).view(-1)  # (filled * new_rows,) rows of the 2-d view
        src = cache.view(capacity * rows, d)[: filled * rows]
        torch.index_select(src, 0, flat, out=out.view(-1, d)[: filled * index.numel()])
    return out
