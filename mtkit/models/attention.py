"""Attention scores for the RNN encoder-decoders, usable on their own.

``AttentionScore(kind, query_dim, key_dim)`` turns a decoder query and the encoder keys into attention
weights over the source positions:

- ``additive``   v^T tanh(W_q q + W_k k)          (Bahdanau et al. 2015; Luong's "concat")
- ``dot``        q^T k                            (needs query_dim == key_dim)
- ``general``    q^T W k                          (Luong et al. 2015)
- ``location``   softmax(W_a q), from the query alone (Luong et al. 2015); W_a maps to ``max_positions``
                 scores of which the first src_len are used.

The key-side projection of ``additive`` and ``general`` does not depend on the query, so
``precompute(keys)`` computes it once per sentence; pass the result back as ``projected`` at each step.

Queries may carry an optional time axis: ``(batch, q_dim)`` gives weights ``(batch, src_len)``,
``(batch, tgt_len, q_dim)`` gives ``(batch, tgt_len, src_len)``, so a decoder that knows all its
queries at once (Luong without input feeding) scores them in one batched call.

``gaussian_window`` is the position part of Luong's local-p attention.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn

SCORE_KINDS = ("additive", "dot", "general", "location")


def masked_softmax(scores: Tensor, mask: Tensor) -> Tensor:
    """Softmax over the last axis where ``mask`` is True; exactly 0 elsewhere.

    A row with no True entry gives all zeros (never NaN).

    Args:
        scores: (..., n) unnormalised scores.
        mask: bool, broadcastable to ``scores``: True where a score counts.

    Returns:
        The weights, the shape of ``scores``.
    """
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1).masked_fill(~mask, 0.0)


class AttentionScore(nn.Module):
    """Scores one query per row against every key and normalises them over the real source tokens.

    Args:
        kind: one of ``SCORE_KINDS`` (see the module docstring).
        query_dim: the size of a query.
        key_dim: the size of a key.
        hidden: the size of ``additive``'s hidden layer (default: query_dim); the other kinds ignore it.
        max_positions: the source positions ``location`` can score.

    Raises:
        ValueError: an unknown ``kind``, or ``dot`` with query_dim != key_dim.
    """

    def __init__(
        self,
        kind: str,
        query_dim: int,
        key_dim: int,
        hidden: Optional[int] = None,
        max_positions: int = 1024,
    ):
        super().__init__()
        if kind not in SCORE_KINDS:
            raise ValueError(f"unknown attention score {kind!r}; expected one of {', '.join(SCORE_KINDS)}")
        if kind == "dot" and query_dim != key_dim:
            raise ValueError(f"{kind} attention needs query_dim == key_dim (got {query_dim} and {key_dim})")
        self.kind = kind
        self.query_dim = query_dim
        self.key_dim = key_dim
        self.max_positions = max_positions
        if kind == "additive":
            hidden = hidden or query_dim
            self.key_proj = nn.Linear(key_dim, hidden)  # W_k (and the one bias the sum needs)
            self.query_proj = nn.Linear(query_dim, hidden, bias=False)  # W_q
            self.v = nn.Linear(hidden, 1, bias=False)  # v^T
        elif kind == "general":
            self.key_proj = nn.Linear(key_dim, query_dim, bias=False)  # W: q^T (W k)
        elif kind == "location":
            self.position_proj = nn.Linear(query_dim, max_positions)  # W_a

    @property
    def uses_projection(self) -> bool:
        """Whether this kind projects the keys (additive, general), so ``precompute`` is worth calling once."""
        return self.kind in ("additive", "general")

    def precompute(self, keys: Tensor) -> Optional[Tensor]:
        """The key projection, computed once per sentence.

        Args:
            keys: (batch, src_len, key_dim).

        Returns:
            (batch, src_len, hidden) for additive, (batch, src_len, query_dim) for general, None for the others.
        """
        if self.uses_projection:
            return self.key_proj(keys)  # (batch, src_len, hidden or query_dim)
        return None

    def scores(self, query: Tensor, keys: Tensor, projected: Optional[Tensor] = None) -> Tensor:
        """Unnormalised scores of every query against every key.

        Args:
            query: (batch, tgt_len, query_dim).
            keys: (batch, src_len, key_dim).
            projected: ``precompute(keys)``, if already known.

        Returns:
            (batch, tgt_len, src_len).

        Raises:
            ValueError: ``location`` with a source longer than ``max_positions``.
        """
        if projected is None and self.uses_projection:
            projected = self.precompute(keys)
        src_len = keys.size(1)
        if self.kind == "additive":
            q = self.query_proj(query)  # (batch, tgt_len, hidden)
            energy = torch.tanh(q.unsqueeze(2) + projected.unsqueeze(1))  # (batch, tgt_len, src_len, hidden)
            return self.v(energy).squeeze(-1)  # (batch, tgt_len, src_len)
        if self.kind == "general":
            return torch.bmm(query, projected.transpose(1, 2))  # (batch, tgt_len, src_len)
        if self.kind == "dot":
            return torch.bmm(query, keys.transpose(1, 2))  # (batch, tgt_len, src_len)
        # location
        if src_len > self.max_positions:
            raise ValueError(
                f"location attention: source length {src_len} exceeds max_positions {self.max_positions}; "
                "raise model.max_positions or shorten the input"
            )
        return self.position_proj(query)[..., :src_len]  # (batch, tgt_len, src_len)

    def forward(self, query: Tensor, keys: Tensor, mask: Tensor, projected: Optional[Tensor] = None) -> Tensor:
        """Attention weights over the source positions.

        Args:
            query: (batch, query_dim), or (batch, tgt_len, query_dim) for several positions in one call.
            keys: (batch, src_len, key_dim).
            mask: (batch, src_len) or (batch, tgt_len, src_len) bool, True on tokens that may be attended.
            projected: ``precompute(keys)``, if already known.

        Returns:
            (batch, src_len) for a 2-d query, else (batch, tgt_len, src_len): 0 where masked, each row summing
            to 1 (all 0 where nothing may be attended).

        Raises:
            ValueError: ``location`` with a source longer than ``max_positions``.
        """
        single = query.dim() == 2
        if single:
            query = query.unsqueeze(1)  # (batch, 1, q_dim)
        if mask.dim() == 2:
            mask = mask.unsqueeze(1)  # (batch, 1, src_len), broadcast over tgt_len
        weights = masked_softmax(self.scores(query, keys, projected), mask)  # (batch, tgt_len, src_len)
        return weights.squeeze(1) if single else weights


def gaussian_window(centre: Tensor, src_len: int, half_width: int) -> tuple[Tensor, Tensor]:
    """The position terms of local-p attention (Luong et al. 2015, eq. 10).

    Args:
        centre: p_t, any shape ``(...)``, floating point, in source positions (0-based).
        src_len: the number of source positions s = 0 .. src_len - 1.
        half_width: D, the half width of the window (at least 1).

    Returns:
        (in_window, gaussian), both ``(..., src_len)``: bool, True where |s - p_t| <= D; and
        exp(-(s - p_t)^2 / (2 sigma^2)) with sigma = D / 2, in the dtype of ``centre``.
    """
    positions = torch.arange(src_len, device=centre.device, dtype=centre.dtype)  # (src_len,)
    distance = positions - centre.unsqueeze(-1)  # (..., src_len)
    in_window = distance.abs() <= half_width
    sigma = half_width / 2.0
    gaussian = torch.exp(-distance.square() / (2.0 * sigma * sigma))
    return in_window, gaussian
