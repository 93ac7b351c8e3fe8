"""The Transformer's decoding state (``TransformerState``) and its self-attention caches.

The self-attention keys and values are kept time-major in buffers with room to grow.

A cache is one float tensor (capacity, rows, d_model): position ``p`` of hypothesis ``r`` at ``[p, r]``, positions
``0 .. filled - 1`` written. Time-major, a step's keys are one contiguous block written in place (no copy of the
positions before it, as concatenating them would make), and following the beams copies whole positions of
d_model floats into a fresh buffer, one contiguous run per position; attention reads the buffer through a strided
view, which the batched matrix products take without a copy. docs/benchmarks.md (section 20) has its measurements.

A buffer is shared by the state that wrote a position and the state before it (which never reads that position),
so a state must not be stepped twice unless it is copied first: ``TransformerState`` keeps that rule.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
from torch import Tensor

from mtkit.models.base import State

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


@dataclasses.dataclass
class TransformerState(State):
    """Decoder state. Rows are hypotheses; the encoder side is kept once per source sentence.

    ``row_source[r]`` says which row of mem_k/mem_v/src_mask hypothesis ``r`` reads, so ``reorder`` (beam search
    following its beams) only moves the self-attention cache and that index, never the encoder keys and values.
    A step writes its position into the caches in place, so a state stepped a second time copies them first."""

    self_k: list  # per layer: the keys in a cache (capacity, rows, d_model); an SSRU's state c_t (rows, 1, d_model)
    self_v: list
    mem_k: list  # per layer the keys transposed, (sources, heads, head_dim, src_len), computed once
    mem_v: list
    src_mask: Tensor  # (sources, src_len)
    row_source: Tensor  # (rows,) int64
    step: int  # number of target positions already decoded
    cached: tuple  # per layer: True where self_k/self_v are caches, False for an SSRU's state
    stepped: list = dataclasses.field(default_factory=lambda: [False])  # [True] once a step wrote into the caches
    group: Optional[int] = None  # ``encoder_side``'s group, known until the rows are reordered

    def map_caches(self, on_cache, on_state) -> dict:
        """self_k and self_v with ``on_cache`` applied to the caches and ``on_state`` to the SSRU states."""
        return {
            name: [on_cache(x) if cached else on_state(x) for x, cached in zip(getattr(self, name), self.cached)]
            for name in ("self_k", "self_v")
        }

    def reorder(self, index: Tensor) -> "TransformerState":
        return dataclasses.replace(
            self,
            **self.map_caches(lambda c: reorder(c, self.step, index), lambda x: x.index_select(0, index)),
            row_source=self.row_source.index_select(0, index),
            stepped=[False],
            group=None,
        )

    def _per_source(self, index: Tensor) -> dict:
        """The per-source fields for sources ``index``."""
        return dict(
            mem_k=[k.index_select(0, index) for k in self.mem_k],
            mem_v=[v.index_select(0, index) for v in self.mem_v],
            src_mask=self.src_mask.index_select(0, index),
        )

    def encoder_side(self) -> tuple["TransformerState", int]:
        """This state with its per-source fields ready for one step, and ``group``.

        Drops the sources no hypothesis reads any more (finished sentences). If every source has the same number of
        consecutive rows (beam search, greedy), ``group`` is that number; else the fields are gathered per row (1).
        A state no reorder has touched since the last step keeps its rows, and its group."""
        if self.group is not None:
            return self, self.group
        state = self
        used, inverse = torch.unique(self.row_source, sorted=True, return_inverse=True)
        if used.numel() < self.src_mask.size(0):
            state = dataclasses.replace(self, row_source=inverse, **self._per_source(used))
        sources, rows = state.src_mask.size(0), state.row_source.numel()
        group = rows // sources
        if rows == sources * group and torch.equal(
            state.row_source, torch.arange(sources, device=state.row_source.device).repeat_interleave(group)
        ):
            return state, group
        # arbitrary order: one row per hypothesis
        return dataclasses.replace(
            state, row_source=torch.arange(rows, device=state.row_source.device), **state._per_source(state.row_source)
        ), 1
