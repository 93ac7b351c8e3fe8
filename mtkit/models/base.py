"""The interface every model implements; search and training use nothing else.

- ``encode(src, src_mask) -> memory``
- ``init_state(memory, src_mask) -> State``
- ``step(prev_tokens, state, need_attention=False) -> (log_probs, state, attention or None)``
- ``state.reorder(index)``: select / repeat batch rows (beam search, pruning finished sentences)
- ``state.vocabulary()``: None when the columns of ``log_probs`` are the target ids (the default); a model
  that scores a per-sentence subset (a shortlist) returns the (rows, columns) target id of each column of
  the step that returned the state, with EOS in column 0 and -inf log-probs on filler columns
- ``forward(src, tgt_in, keep=None) -> logits``: teacher forcing

Conventions: token ids are int64; ``src_mask`` is bool ``(batch, src_len)``, True on real tokens.
Every tensor held by a State is batch-first, so ``reorder`` is one ``index_select`` on dim 0 per tensor.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mtkit.tokenizer import BOS, EOS, PAD, UNK  # noqa: F401 (the model interface's special ids)

_LANE = 1 << 16  # the drop probability's resolution in ``dropout``


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """``F.dropout``, with a cheaper mask on the CPU.

    PyTorch's CPU dropout draws one Bernoulli number per element; at this project's model sizes that was 12% of
    a training update. Here one 64-bit random word gives the mask of four elements (four uniform 16-bit lanes),
    about 5x cheaper: an element is dropped with probability ``round(p * 65536) / 65536`` (p to within 1e-5)
    and the kept ones are scaled by the inverse of the exact keep probability, so the expectation is exact.
    GPUs keep PyTorch's fused kernel.
    """
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0:
        return F.dropout(x, p, True)
    dropped = round(p * _LANE)
    n = x.numel()
    bits = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(1 << 63), None)  # all 64 bits uniform
    keep = bits.view(torch.int16)[:n].view(x.shape) >= dropped - _LANE // 2  # (x.shape) bool
    return x * (keep * (_LANE / (_LANE - dropped))).to(x.dtype)


class Dropout(nn.Module):
    """``nn.Dropout`` through ``dropout`` above."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)


def _reorder(value: Any, index: Tensor) -> Any:
    if isinstance(value, State):
        return value.reorder(index)
    if isinstance(value, Tensor):
        return value.index_select(0, index)
    if isinstance(value, list):
        return [_reorder(v, index) for v in value]
    if isinstance(value, tuple):
        return tuple(_reorder(v, index) for v in value)
    if isinstance(value, dict):
        return {k: _reorder(v, index) for k, v in value.items()}
    return value  # ints, None, flags: shared by all rows


@dataclasses.dataclass
class State:
    """Decoder state. Subclasses declare batch-first tensor fields (or lists/tuples/dicts of them)."""

    def reorder(self, index: Tensor) -> "State":
        """Return the state for rows ``index`` (batch,) of this one; rows may repeat."""
        return dataclasses.replace(
            self, **{f.name: _reorder(getattr(self, f.name), index) for f in dataclasses.fields(self)}
        )

    def vocabulary(self) -> Optional[Tensor]:
        """(rows, columns) target id of each log_probs column of the last step, or None: columns are ids."""
        return None


class Seq2Seq(nn.Module):
    """Base class: subclasses implement the five methods below."""

    src_vocab_size: int
    tgt_vocab_size: int
    max_positions: int

    def encode(self, src: Tensor, src_mask: Tensor) -> Any:  # pragma: no cover - interface
        raise NotImplementedError

    def init_state(self, memory: Any, src_mask: Tensor) -> State:  # pragma: no cover - interface
        raise NotImplementedError

    def step(
        self, prev_tokens: Tensor, state: State, need_attention: bool = False
    ) -> tuple[Tensor, State, Optional[Tensor]]:  # pragma: no cover - interface
        """prev_tokens (batch,) -> log_probs (batch, tgt_vocab), new state, attention (batch, src_len) or None."""
        raise NotImplementedError

    def forward(self, src: Tensor, tgt_in: Tensor, keep: Optional[Tensor] = None,
                features: bool = False) -> Tensor:  # pragma: no cover
        """src (batch, src_len), tgt_in (batch, tgt_len) starting with BOS -> logits (batch, tgt_len, vocab).

        ``keep`` (batch, tgt_len) bool: compute logits only at those positions -> (tokens, vocab); training
        passes the non-pad target positions so no time is spent projecting padding onto the vocabulary.
        ``features``: return the inputs of the output projection instead, (..., d); the logits are then
        ``F.linear(features, *self.output_projection())``, which training fuses with the loss.
        """
        raise NotImplementedError

    def output_projection(self) -> tuple[Tensor, Optional[Tensor]]:  # pragma: no cover - interface
        """(weight (tgt_vocab, d), bias (tgt_vocab,) or None) of the final linear layer."""
        raise NotImplementedError

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())


def src_mask_of(src: Tensor) -> Tensor:
    """(batch, src_len) bool, True on real tokens."""
    return src.ne(PAD)
