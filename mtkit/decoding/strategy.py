"""Candidate selection for beam search: the protocol its loop calls, and the plain strategy.

``search.beam_search`` runs one loop over time for every search. At each step it asks a strategy for the
candidates of every live sentence, then finishes the EOS candidates, applies the stopping rule and follows the
continuing beams itself. A strategy owns what differs between searches: which candidates a step proposes and in
what order, which of them continue, each sentence's output limit and its length penalty, and any per-hypothesis
state of its own. ``PlainStrategy`` below is the unconstrained search; ``constraints.ConstrainedStrategy`` adds
prefixes, lexical constraints and avoided phrases. ``constraints.beam_strategy`` picks one of them.

The plain step follows fairseq's: one top-k over each beam's vocabulary (``row_topk``, a blocked pass that finds
what ``topk`` would) keeps its ``2 * beam_size`` best tokens, a second ``topk`` ranks those (beam, token) pairs by
cumulative log-prob, and the best ``beam_size`` non-EOS candidates continue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Protocol, Union

import torch
from torch import Tensor

from mtkit.decoding.hypothesis import length_penalty_of
from mtkit.models.base import EOS

NEG_INF = float("-inf")


@dataclass
class Candidates:
    """One step's candidates for every live sentence, in the order the search takes them."""

    scores: Tensor  # (live, n) cumulative log-probs; -inf: no candidate
    beams: Tensor  # (live, n) the beam within its sentence that each candidate extends
    tokens: Tensor  # (live, n)
    token_log_probs: Tensor  # (live, n) each token's own log-prob, as the hypothesis records it
    next_scores: Tensor  # (live, k) cumulative log-probs of the continuing candidates; -inf: none left
    chosen: Tensor  # (live, k) which of the n candidates continue

    @classmethod
    def picked(
        cls, scores: Tensor, index: Tensor, row_log_probs: Tensor, tokens: Tensor, next_scores: Tensor, chosen: Tensor
    ) -> "Candidates":
        """The candidates at ``index`` (live, n) into each sentence's (beam, token) pairs, flattened beam-major
        from the (rows, width) ``row_log_probs`` of its k beams."""
        live, width = index.size(0), row_log_probs.size(1)
        return cls(
            scores=scores,
            beams=index // width,
            tokens=tokens,
            token_log_probs=row_log_probs.view(live, -1).gather(1, index),
            next_scores=next_scores,
            chosen=chosen,
        )


class BeamStrategy(Protocol):
    """What ``search.beam_search`` asks of a candidate selection strategy, in the order it asks."""

    def start(self, max_len: Tensor, max_len_cap: Optional[int], beam_size: int) -> Tensor:
        """Begin a search over a batch.

        Args:
            max_len: (batch,) int64 output limits from the length options.
            max_len_cap: the model's limit on output tokens, or None.
            beam_size: beams per sentence; the search's rows are ``beam_size`` per live sentence.

        Returns:
            The (batch,) output limits the search must use; the strategy may raise some.

        Raises:
            ValueError: the strategy cannot decode this batch within ``max_len_cap``.
        """
        ...

    def penalty(self, length: Union[int, Tensor]) -> Union[float, Tensor]:
        """The length penalty of hypotheses of ``length`` tokens (EOS included) in each live sentence.

        Args:
            length: an int for every live sentence, or a (live, 1) float tensor of lengths.

        Returns:
            A divisor for (live, n) scores: a float, or a (live, 1) tensor.
        """
        ...

    def step(self, t: int, log_probs: Tensor, beam_scores: Tensor) -> Candidates:
        """Propose the candidates of step ``t`` and pick the ones that continue.

        Args:
            t: the step; the candidates' tokens are the (t + 1)-th of their hypotheses.
            log_probs: (rows, vocab) float32 model log-probs with PAD and BOS at -inf. The strategy may change
                it in place.
            beam_scores: (live, k) cumulative log-probs of the beams; -inf for a dead beam.

        Returns:
            The candidates of every live sentence.
        """
        ...

    def follow(self, chosen: Tensor, keep: Optional[Tensor]) -> None:
        """Move on to the next step's rows.

        Args:
            chosen: (live, k) the ``chosen`` of the last ``step``, before any sentence left.
            keep: (still_live,) the live sentences that go on; None when all go on.
        """
        ...


TOPK_BLOCK = 64  # columns per block of ``row_topk``'s first pass


def row_topk(x: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The ``k`` largest values of each row, best first, and their columns: ``x.topk(k, dim=1)`` in two cheap passes.

    The columns are cut into blocks of ``TOPK_BLOCK``; a block's maximum is found in one vectorised reduction, and the
    k largest values of a row lie in its k blocks of largest maximum (a block holding one of them has a maximum at
    least that large, and at most k - 1 other blocks can beat it), so the exact top k are taken among those k blocks'
    columns and the ragged last columns. The values are exactly ``topk``'s; among equal values the columns may be
    other equal ones. A narrow ``x`` goes to ``topk`` directly.

    Args:
        x: (rows, width) floating point, no NaN.
        k: how many per row, at most ``width``.

    Returns:
        (values, columns), both (rows, k).
    """
    rows, width = x.shape
    blocks = width // TOPK_BLOCK
    if blocks < 4 * k:  # too few blocks for the first pass to pay
        return x.topk(k, dim=1)
    body = x[:, : blocks * TOPK_BLOCK].view(rows, blocks, TOPK_BLOCK)
    best_blocks = body.amax(dim=2).topk(k, dim=1).indices  # (rows, k)
    offsets = torch.arange(TOPK_BLOCK, device=x.device)
    columns = (best_blocks.unsqueeze(2) * TOPK_BLOCK + offsets).view(rows, k * TOPK_BLOCK)
    if blocks * TOPK_BLOCK < width:  # the last, partial block is always a candidate
        rest = torch.arange(blocks * TOPK_BLOCK, width, device=x.device).expand(rows, -1)
        columns = torch.cat([columns, rest], dim=1)
    values, picked = x.gather(1, columns).topk(k, dim=1)
    return values, columns.gather(1, picked)


def row_argmax(x: Tensor) -> Tensor:
    """Each row's first column of its largest value: ``x.argmax(dim=1)``, through block maxima as ``row_topk``.

    ``argmax`` along a row scans it element by element; the blocks' maxima come from one vectorised reduction, the
    first block holding the row's maximum is found among them, and the first column of that value within it. Ties
    go to the first column, as ``argmax``'s.

    Args:
        x: (rows, width) floating point, no NaN.

    Returns:
        (rows,) int64.
    """
    rows, width = x.shape
    blocks = width // TOPK_BLOCK
    if blocks < 2:
        return x.argmax(dim=1)
    maxima = x[:, : blocks * TOPK_BLOCK].view(rows, blocks, TOPK_BLOCK).amax(dim=2)  # (rows, blocks)
    best, block = maxima.max(dim=1)  # the first block of the largest maximum
    columns = block.unsqueeze(1) * TOPK_BLOCK + torch.arange(TOPK_BLOCK, device=x.device)  # (rows, TOPK_BLOCK)
    found = columns.gather(1, x.gather(1, columns).argmax(dim=1, keepdim=True)).squeeze(1)
    if blocks * TOPK_BLOCK < width:  # the ragged last columns win only with a larger value
        tail, at = x[:, blocks * TOPK_BLOCK :].max(dim=1)
        found = torch.where(tail > best, at + blocks * TOPK_BLOCK, found)
    return found


def force_eos(at_limit: Tensor, log_probs: Tensor, row_log_probs: Tensor, row_tokens: Tensor) -> tuple[Tensor, Tensor]:
    """Make EOS the only candidate of the rows at their output limit.

    Args:
        at_limit: (rows, 1) bool, the rows whose hypotheses must end now.
        log_probs: (rows, vocab) the model's log-probs; EOS keeps its own.
        row_log_probs: (rows, width) the candidates' log-probs.
        row_tokens: (rows, width) the candidates' tokens.

    Returns:
        (row_log_probs, row_tokens) with EOS first and every other candidate at -inf in the rows at their limit.
    """
    only_eos = torch.full_like(row_log_probs, NEG_INF)
    only_eos[:, 0] = log_probs[:, EOS]
    return torch.where(at_limit, only_eos, row_log_probs), row_tokens.masked_fill(at_limit, EOS)


class PlainStrategy:
    """Unconstrained beam search: the ``2k`` best candidates by cumulative log-prob, the best ``k`` continue.

    Args:
        length_penalty: GNMT's alpha.
    """

    def __init__(self, length_penalty: float):
        self.alpha = length_penalty

    def start(self, max_len: Tensor, max_len_cap: Optional[int], beam_size: int) -> Tensor:
        self.k = beam_size
        self.max_len = max_len  # (live,)
        # Forcing EOS costs a few ops per step: none are needed before the first sentence reaches its limit.
        self.first_forced_step = int(max_len.min()) if max_len.numel() else 0
        return max_len

    def penalty(self, length: Union[int, Tensor]) -> Union[float, Tensor]:
        return length_penalty_of(length, self.alpha)

    def step(self, t: int, log_probs: Tensor, beam_scores: Tensor) -> Candidates:
        k, live = self.k, beam_scores.size(0)
        # A sentence's 2k best extensions are among the 2k best tokens of each of its beams.
        # Ranking those needs one pass over the vocabulary instead of one over every (beam, token) pair.
        width = min(2 * k, log_probs.size(1))
        row_log_probs, row_tokens = row_topk(log_probs, width)  # (rows, width)
        if t >= self.first_forced_step:
            at_limit = self.max_len.le(t).repeat_interleave(k).unsqueeze(1)  # (rows, 1)
            row_log_probs, row_tokens = force_eos(at_limit, log_probs, row_log_probs, row_tokens)
        cand = (row_log_probs + beam_scores.view(-1, 1)).view(live, k * width)  # (live, k * width) cumulative
        scores, index = cand.topk(min(2 * k, k * width), dim=1)  # (live, 2k) best first
        tokens = row_tokens.view(live, k * width).gather(1, index)
        next_scores, chosen = scores.masked_fill(tokens.eq(EOS), NEG_INF).topk(k, dim=1)  # (live, k)
        return Candidates.picked(scores, index, row_log_probs, tokens, next_scores, chosen)

    def follow(self, chosen: Tensor, keep: Optional[Tensor]) -> None:
        if keep is not None:
            self.max_len = self.max_len[keep]
            self.first_forced_step = int(self.max_len.min())
