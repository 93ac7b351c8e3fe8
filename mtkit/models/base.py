"""The interface every model implements; search and training use nothing else.

- ``encode(src, src_mask) -> memory``; ``encode_parts(src, src_mask, sizes)``: the same memory for a batch joined
  from smaller ones, each encoded on its own (a default is given)
- ``init_state(memory, src_mask) -> State``
- ``step_features(prev_tokens, state, need_attention=False) -> (hidden, state, attention or None)``: one position,
  the decoder's output before the output layer, (rows, d)
- ``step(...) -> (log_probs, state, attention or None)``: ``step_features``, then ``project`` and a log-softmax
- ``state.reorder(index)``: select / repeat batch rows (beam search, pruning finished sentences)
- ``features(src, tgt_in, keep=None) -> hidden``: teacher forcing up to the output layer
- ``project(hidden, ids=None) -> logits``: the output layer, over the whole target vocabulary or only the target
  ids ``ids`` (columns, in that order); training fuses it with the loss, a shortlist scores a subset with it
- ``forward(src, tgt_in) -> logits``: ``project(features(src, tgt_in))``, always (batch, tgt_len, vocab)

Conventions: token ids are int64; ``src_mask`` is bool ``(batch, src_len)``, True on real tokens.
Every tensor held by a State is batch-first, so ``reorder`` is one ``index_select`` on dim 0 per tensor.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mtkit.tokenizer import BOS, EOS, PAD, UNK  # noqa: F401 (the model interface's special ids)

_LANE = 1 << 16  # the drop probability's resolution in ``dropout``


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """Zero each element of ``x`` with probability ``p`` and scale the others so the expectation is unchanged.

    On the CPU an element is dropped with probability ``round(p * 65536) / 65536``, within 1e-5 of ``p``.
    The kept elements are scaled by the inverse of that exact keep probability. On a GPU, and inside
    ``torch.compile`` (where the in-place random fill would break the graph), PyTorch's own dropout.

    Args:
        x: any shape, any floating dtype.
        p: the drop probability, in [0, 1].
        training: False returns ``x`` unchanged.

    Returns:
        A tensor of the shape and dtype of ``x``.
    """
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0 or torch.compiler.is_compiling():
        return F.dropout(x, p, True)  # GPUs keep PyTorch's fused kernel; a compiled graph, its own random ops
    dropped = round(p * _LANE)
    n = x.numel()
    # one 64-bit random word masks four elements (four uniform 16-bit lanes): far cheaper than PyTorch's one
    # Bernoulli draw per element (docs/benchmarks.md, section 5)
    bits = torch.empty((n + 3) // 4, dtype=torch.int64).random_(-(1 << 63), None)  # all 64 bits uniform
    keep = bits.view(torch.int16)[:n].view(x.shape) >= dropped - _LANE // 2  # (x.shape) bool
    return x * (keep * (_LANE / (_LANE - dropped))).to(x.dtype)


class Dropout(nn.Module):
    """``nn.Dropout`` through ``dropout`` above.

    Args:
        p: the drop probability, in [0, 1].
    """

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        """x of any shape -> the same shape and dtype; unchanged in eval mode."""
        return dropout(x, self.p, self.training)


def at_positions(x: Tensor, keep: Tensor) -> Tensor:
    """The rows of ``x`` (batch, len, ...) that training's ``keep`` names, as (tokens, ...).

    ``keep`` is a (batch, len) bool mask, or the (tokens,) int64 flat positions of its True entries (row-major,
    the order a boolean index gives): the same rows, gathered without an output size that depends on the data.
    """
    if keep.dtype == torch.bool:
        return x[keep]
    return x.flatten(0, 1).index_select(0, keep)


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
        """The state of rows ``index`` of this one (beam search, pruning finished sentences).

        Args:
            index: (new_batch,) int64 row numbers into this state's batch; rows may repeat.

        Returns:
            A new state of the same class: every tensor field (also inside lists, tuples, dicts and nested
            states) indexed on dim 0, other values shared.
        """
        return dataclasses.replace(
            self, **{f.name: _reorder(getattr(self, f.name), index) for f in dataclasses.fields(self)}
        )


class Seq2Seq(nn.Module):
    """Base class of the models: subclasses implement encode, init_state, step_features, features, project,
    output_rows and output_projection, and set src_vocab_size, tgt_vocab_size and max_positions; ``step`` and
    ``forward`` follow from them."""

    src_vocab_size: int
    tgt_vocab_size: int
    max_positions: int

    def encode(self, src: Tensor, src_mask: Tensor) -> Any:  # pragma: no cover - interface
        """Run the encoder.

        Args:
            src: (batch, src_len) source ids, right-padded with PAD.
            src_mask: (batch, src_len) bool, True on real tokens.

        Returns:
            The encoder memory in the model's own form (a tensor or a tuple of them), batch-first.
        """
        raise NotImplementedError

    def encode_parts(self, src: Tensor, src_mask: Tensor, sizes: Sequence[int]) -> Any:
        """``encode`` of a batch made of consecutive parts, each part as if encoded alone: cut to its own longest
        source, so that a short part pays for neither a long part's padding nor, in self-attention, its square.
        Decoding joins several length-sorted batches this way: the encoder wants short, even batches, the decoder
        steps many hypotheses at once.

        Args:
            src: (batch, src_len) source ids, right-padded with PAD.
            src_mask: (batch, src_len) bool, True on real tokens.
            sizes: the parts' row counts, in order, summing to batch.

        Returns:
            What ``encode(src, src_mask)`` returns, in the same form. This default encodes the whole batch at
            once, which is right for encoders whose cost padding does not raise (the RNNs pack their sequences);
            the Transformer encodes part by part.
        """
        if sum(sizes) != src.size(0):
            raise ValueError(f"parts of {list(sizes)} rows do not make a batch of {src.size(0)}")
        return self.encode(src, src_mask)

    def init_state(self, memory: Any, src_mask: Tensor) -> State:  # pragma: no cover - interface
        """The decoder state before the first target position.

        Args:
            memory: what ``encode`` returned.
            src_mask: (batch, src_len) bool, True on real tokens.

        Returns:
            The state, one row per source sentence.
        """
        raise NotImplementedError

    def step_features(
        self, prev_tokens: Tensor, state: State, need_attention: bool = False
    ) -> tuple[Tensor, State, Optional[Tensor]]:  # pragma: no cover - interface
        """Decode one target position, up to the output layer.

        Args:
            prev_tokens: (batch,) the previous target ids (BOS at the first position).
            state: the state after the previous position (``init_state``'s at the first).
            need_attention: also return the attention over the source.

        Returns:
            (hidden, state, attention): hidden (batch, d), the input of the output layer; the new state; the
            attention weights (batch, src_len), or None unless ``need_attention``.
        """
        raise NotImplementedError

    def step(
        self, prev_tokens: Tensor, state: State, need_attention: bool = False
    ) -> tuple[Tensor, State, Optional[Tensor]]:
        """Decode one target position: ``step_features``, then ``project`` and a log-softmax in float32.

        Args:
            prev_tokens: (batch,) the previous target ids (BOS at the first position).
            state: the state after the previous position.
            need_attention: also return the attention over the source.

        Returns:
            (log_probs, state, attention): log_probs (batch, tgt_vocab) float32; the new state; the attention
            weights (batch, src_len), or None unless ``need_attention``.
        """
        hidden, state, attention = self.step_features(prev_tokens, state, need_attention)
        return self.project(hidden).float().log_softmax(dim=-1), state, attention

    def features(self, src: Tensor, tgt_in: Tensor, keep: Optional[Tensor] = None) -> Tensor:  # pragma: no cover
        """Teacher forcing up to the output layer.

        Args:
            src: (batch, src_len) source ids.
            tgt_in: (batch, tgt_len) target ids, starting with BOS.
            keep: (batch, tgt_len) bool: return only these positions (training passes the non-pad target
                positions, so the output layer and the loss skip padding; the decoder still runs over it); or the
                (tokens,) int64 flat positions of its True entries (``at_positions``).

        Returns:
            The inputs of the output layer: (batch, tgt_len, d), or (tokens, d) with ``keep``.
        """
        raise NotImplementedError

    def project(self, hidden: Tensor, ids: Optional[Tensor] = None) -> Tensor:  # pragma: no cover - interface
        """The output layer.

        Args:
            hidden: (..., d), from ``features`` or ``step_features``.
            ids: (columns,) target ids: score only these, in this order (a shortlist).

        Returns:
            Logits (..., tgt_vocab), or (..., columns) with ``ids``.
        """
        raise NotImplementedError

    def output_rows(self, ids: Tensor) -> tuple[Tensor, Optional[Tensor]]:  # pragma: no cover - interface
        """The output layer's rows for some target ids; ``project(hidden, ids)`` multiplies by them.

        Args:
            ids: (columns,) target ids.

        Returns:
            (weight (columns, d), bias (columns,) or None), floating point (an int8 layer's dequantized).
        """
        raise NotImplementedError

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing: ``project(features(src, tgt_in))``.

        Args:
            src: (batch, src_len) source ids.
            tgt_in: (batch, tgt_len) target ids, starting with BOS.

        Returns:
            Logits (batch, tgt_len, tgt_vocab).
        """
        return self.project(self.features(src, tgt_in))

    def output_projection(self) -> tuple[Tensor, Optional[Tensor]]:  # pragma: no cover - interface
        """The parameters of ``project`` over the whole vocabulary, which the fused training loss multiplies itself.

        Returns:
            (weight (tgt_vocab, d), bias (tgt_vocab,) or None).
        """
        raise NotImplementedError

    def num_parameters(self) -> int:
        """The number of parameter elements; a tensor shared by several modules (tied embeddings) counts once."""
        return sum(p.numel() for p in self.parameters())


def weight_rows(linear: nn.Module, ids: Tensor) -> tuple[Tensor, Optional[Tensor]]:
    """Some rows of a linear layer's weight and bias.

    Args:
        linear: an ``nn.Linear``, an ``Int8Linear`` or a dynamically quantized linear (whose weight is dequantized).
        ids: (columns,) output channels.

    Returns:
        (weight[ids] (columns, in_features), bias[ids] (columns,) or None), floating point.
    """
    weight, bias = linear.weight, linear.bias
    weight = weight().dequantize() if callable(weight) else weight
    bias = bias() if callable(bias) else bias
    return weight.index_select(0, ids), (None if bias is None else bias.index_select(0, ids))


def src_mask_of(src: Tensor) -> Tensor:
    """The source mask of ``src`` (batch, src_len): bool (batch, src_len), True on real (non-PAD) tokens."""
    return src.ne(PAD)
