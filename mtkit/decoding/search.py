"""Decoding over the Seq2Seq interface: batched beam search, n-best, length penalty; greedy (single_path.py).

Sampling (sampling.py) runs on the same single-path decoder as greedy. Beam search's candidate selection is a
strategy (strategy.py): the plain one, or the constrained one of constraints.py when a ``Guide`` is given.

Everything here is written once against ``encode / init_state / step / State.reorder`` (models/base.py).
No model is special-cased. Each time step is a handful of batched tensor ops over all live sentences and beams.
The only Python loop is over time. A sentence that is done leaves the batch: its state rows are dropped with the
same ``reorder`` that follows the beams, so late steps only pay for long sentences (greedy and sampled paths leave
a quarter of the batch at a time, single_path.py).

Conventions shared by every decoder:
- PAD and BOS are never emitted: their log-probs are set to -inf before choosing.
- ``max_lengths`` bounds the output tokens, EOS not counted. At that length EOS is forced.
- A hypothesis of ``n`` tokens has length ``n + 1`` for the length penalty (EOS counts).
- ``token_log_probs`` holds ``n + 1`` values, the last one EOS's; ``log_prob`` is their sum.
- Scores are model log-probs (<= 0); ``score = log_prob / lp(length)``.
- ``lp`` is the GNMT penalty ``hypothesis.length_penalty_of``: ``((5 + length) / 6) ** length_penalty``.
  ``length_penalty=0`` keeps the raw sum.
- ``attention`` (only with ``need_attention=True``) is ``(len(tokens) + 1, real_src_len)``: one row per emitted
  token including EOS, restricted to the sentence's non-PAD source positions.

Beam search follows fairseq's step: the strategy proposes ``2 * beam_size`` (beam, token) candidates per sentence.
EOS candidates among the first ``beam_size`` become finished hypotheses; the strategy's ``beam_size`` non-EOS
candidates continue. ``beam_size=1`` is therefore greedy (with a length penalty, only under ``"beam_full"``).

Stopping rules (``stopping``; beam_search has no default, the config's ``decoding.stopping`` holds it):
- ``"beam_full"``: fairseq's rule. A sentence stops once ``beam_size`` hypotheses have finished. It may miss a
  longer, better hypothesis under a positive length penalty.
- ``"exact"``: a sentence stops when no live beam can still beat its ``nbest``-th best finished hypothesis.
  Log-probs only fall as a hypothesis grows. A live beam with cumulative score ``c`` can at best finish with
  ``c / max(lp(t + 2), lp(max_len + 1))``, the larger penalty of the shortest and the longest length it can
  still reach. The n-best is therefore that of running every sentence to its maximum length, ties aside. With
  ``nbest=1`` and ``length_penalty=0`` it stops as soon as the best candidate is an EOS. The bound is loose
  under a positive length penalty, so it runs longer than ``"beam_full"`` there.
- ``"first"``: OpenNMT-py's rule. A sentence stops as soon as the best candidate of a step is an EOS and
  ``nbest`` hypotheses have finished. All candidates of a step have the same length, so that hypothesis beats
  every live one at this length. A longer one could still win under a positive length penalty.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal, Optional, Sequence

import torch
from torch import Tensor

from mtkit.decoding.constraints import Guide, beam_strategy
from mtkit.decoding.hypothesis import Decoded, length_penalty_of
from mtkit.decoding.limits import check_common, default_cap, max_lengths
from mtkit.decoding.single_path import encode, greedy, single_path
from mtkit.decoding.strategy import NEG_INF
from mtkit.models.base import BOS, EOS, PAD, Seq2Seq

Stopping = Literal["exact", "beam_full", "first"]


# --------------------------------------------------------------------------- beam search


@dataclass
class _Finished:
    """Hypotheses that ended at one time step t (all of length t + 1), as tensors."""

    sentence: Tensor  # (m,) sentence index in the input batch
    score: Tensor  # (m,) length-penalised
    tokens: Tensor  # (m, t) without EOS
    token_log_probs: Tensor  # (m, t + 1)
    attention: Optional[Tensor]  # (m, t + 1, src_len)


@torch.inference_mode()
def beam_search(
    model: Seq2Seq,
    src: Tensor,
    *,
    beam_size: int,
    length_penalty: float,
    max_len_a: float,
    max_len_b: float,
    max_len_cap: Optional[int] = None,
    nbest: int = 1,
    stopping: Stopping,
    need_attention: bool = False,
    guide: Optional[Guide] = None,
    parts: Optional[Sequence[int]] = None,
) -> list[list[Decoded]]:
    """Batched beam search: the ``nbest`` best hypotheses of each sentence.

    Args:
        model: the model to decode.
        src: (batch, src_len) source token ids, PAD-padded.
        beam_size: beams per sentence.
        length_penalty: GNMT's alpha; 0 ranks by the raw log-prob.
        max_len_a: output tokens allowed per source token.
        max_len_b: output tokens allowed beyond those.
        max_len_cap: the most output tokens; defaults to ``model.max_positions - 1``.
        nbest: hypotheses returned per sentence, at most ``beam_size``.
        stopping: when a sentence stops, ``"exact"``, ``"beam_full"`` or ``"first"`` (the module docstring).
            There is no default here: callers pass ``decoding.stopping``, whose default the config holds.
        need_attention: also return each hypothesis's attention rows.
        guide: prefixes, lexical constraints and avoided phrases (constraints.py); None for none.
        parts: batches joined in ``src``, each encoded on its own (``single_path``); None for one.

    Returns:
        One list per sentence of up to ``nbest`` hypotheses, best first.

    Raises:
        ValueError: an argument is out of range, or ``guide``'s instructions do not fit ``max_len_cap``.
    """
    check_common(src, max_len_a, max_len_b)
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    if not 1 <= nbest <= beam_size:
        raise ValueError(f"nbest must be between 1 and beam_size ({beam_size}), got {nbest}")
    if stopping not in ("exact", "beam_full", "first"):
        raise ValueError(f"stopping must be 'exact', 'beam_full' or 'first', got {stopping!r}")
    if max_len_cap is None:
        max_len_cap = default_cap(model)

    device = src.device
    batch_size, k = src.size(0), beam_size
    src_mask = src.ne(PAD)  # (batch, src_len)
    state = model.init_state(encode(model, src, src_mask, parts), src_mask)  # one row per sentence until the first step
    beam_rows = torch.arange(batch_size, device=device).repeat_interleave(k)  # (batch * k,) each row's sentence
    strategy = beam_strategy(guide, length_penalty)
    max_len = strategy.start(max_lengths(src_mask, max_len_a, max_len_b, max_len_cap), max_len_cap, k)  # (batch,)
    num_steps = int(max_len.max()) + 1 if batch_size else 0

    # Fixed index tensors, sliced as the batch shrinks.
    row_offsets = torch.arange(batch_size, device=device).unsqueeze(1) * k  # (batch, 1) first row of each
    banned = torch.tensor([PAD, BOS], device=device)

    # Per live sentence (dim 0 = live sentences, in the same order as the state's row groups).
    active = torch.arange(batch_size, device=device)  # (live,) sentence index in the batch
    live_lp_max = strategy.penalty((max_len + 1).float().unsqueeze(1))  # (live, 1) lp of the longest
    nbest_scores = torch.full((batch_size, nbest), NEG_INF, device=device)  # (live, nbest) best finished
    finished_count = torch.zeros(batch_size, dtype=torch.long, device=device)  # (live,)
    # Only beam 0 is live at the start, so the first step does not pick k copies of one token.
    beam_scores = torch.full((batch_size, k), NEG_INF, device=device)  # (live, k) cumulative log-prob
    beam_scores[:, 0] = 0.0
    # Per live beam row (dim 0 = live * k): the path so far.
    prefix_tokens = torch.empty(batch_size * k, 0, dtype=torch.long, device=device)  # (rows, t)
    prefix_log_probs = torch.empty(batch_size * k, 0, device=device)  # (rows, t)
    prefix_attention = torch.empty(batch_size * k, 0, src.size(1), device=device)  # (rows, t, src_len)
    prev_tokens = torch.full((batch_size * k,), BOS, dtype=torch.long, device=device)  # (rows,)
    finished: list[_Finished] = []

    for t in range(num_steps):
        if t == 0:  # every beam of a sentence starts from the same BOS: one row per sentence, then k copies
            log_probs, state, attention = model.step(prev_tokens[:batch_size], state, need_attention)
            log_probs, state = log_probs.index_select(0, beam_rows), state.reorder(beam_rows)
            attention = attention.index_select(0, beam_rows) if attention is not None else None
        else:
            log_probs, state, attention = model.step(prev_tokens, state, need_attention)
        log_probs = log_probs.float()  # (rows, vocab)
        log_probs.index_fill_(1, banned, NEG_INF)
        cands = strategy.step(t, log_probs, beam_scores)  # (live, n) candidates, in the order taken
        top_rows = cands.beams + row_offsets[: active.numel()]  # (live, n) row in the current state

        # EOS within the first k candidates finishes a hypothesis of length t + 1 (EOS included).
        ends = cands.tokens[:, :k].eq(EOS) & cands.scores[:, :k].gt(NEG_INF)  # (live, k)
        end_scores = torch.where(ends, cands.scores[:, :k] / strategy.penalty(t + 1), NEG_INF)  # (live, k)
        nbest_scores = torch.cat([nbest_scores, end_scores], dim=1).topk(nbest, dim=1).values  # (live, nbest)
        finished_count = finished_count + ends.sum(dim=1)

        # The strategy's k continuing candidates (dead ones carry -inf and never come back).
        beam_scores, chosen = cands.next_scores, cands.chosen  # (live, k)
        best_live = beam_scores.amax(dim=1)  # (live,)
        if stopping == "exact":
            # The best score a live beam can still reach.
            # lp is monotonic in the length, so the bound is at the shortest or the longest length left.
            bound = best_live.unsqueeze(1) / live_lp_max.clamp(min=strategy.penalty(t + 2))  # (live, 1)
            done = bound.squeeze(1).le(nbest_scores[:, -1])
        elif stopping == "first":
            done = (ends[:, 0] & finished_count.ge(nbest)) | best_live.eq(NEG_INF)  # (live,)
        else:
            done = finished_count.ge(k) | best_live.eq(NEG_INF)  # (live,)
        any_ended, any_done = torch.stack([ends.any(), done.any()]).tolist()  # the one sync per step

        if any_ended:
            sent_idx, cand_idx = ends.nonzero(as_tuple=True)  # (m,), (m,)
            rows = top_rows[sent_idx, cand_idx]  # (m,) beam rows the EOS extends
            finished.append(
                _Finished(
                    sentence=active[sent_idx],
                    score=end_scores[sent_idx, cand_idx],
                    tokens=prefix_tokens[rows],
                    token_log_probs=torch.cat(
                        [prefix_log_probs[rows], cands.token_log_probs[sent_idx, cand_idx].unsqueeze(1)], dim=1
                    ),
                    attention=torch.cat([prefix_attention[rows], attention[rows].float().unsqueeze(1)], dim=1)
                    if need_attention
                    else None,
                )
            )

        parent_rows = top_rows.gather(1, chosen)  # (live, k) rows of the current state to continue
        next_tokens = cands.tokens.gather(1, chosen)  # (live, k)
        next_log_probs = cands.token_log_probs.gather(1, chosen)  # (live, k)
        keep = None
        if any_done:  # finished sentences leave the batch
            keep = done.logical_not().nonzero().squeeze(1)  # (still_live,)
            if keep.numel() == 0:
                break
            active, live_lp_max = active[keep], live_lp_max[keep]
            nbest_scores, finished_count, beam_scores = nbest_scores[keep], finished_count[keep], beam_scores[keep]
            parent_rows, next_tokens, next_log_probs = parent_rows[keep], next_tokens[keep], next_log_probs[keep]
        strategy.follow(chosen, keep)

        # Follow the chosen beams (and drop finished sentences) in one reorder.
        parent_rows = parent_rows.view(-1)  # (new_rows,)
        state = state.reorder(parent_rows)
        prefix_tokens = torch.cat([prefix_tokens[parent_rows], next_tokens.view(-1, 1)], dim=1)
        prefix_log_probs = torch.cat([prefix_log_probs[parent_rows], next_log_probs.view(-1, 1)], dim=1)
        if need_attention:
            prefix_attention = torch.cat([prefix_attention, attention.float().unsqueeze(1)], dim=1)[parent_rows]
        prev_tokens = next_tokens.view(-1)

    return _collect_nbest(finished, batch_size, nbest, src_mask)


def _collect_nbest(finished: list[_Finished], batch_size: int, nbest: int, src_mask: Tensor) -> list[list[Decoded]]:
    """The nbest highest-scoring finished hypotheses per sentence, best first, as Python objects."""
    results: list[list[Decoded]] = [[] for _ in range(batch_size)]
    if not finished:
        return results
    sentence = torch.cat([f.sentence for f in finished])  # (total,)
    score = torch.cat([f.score for f in finished])  # (total,)
    chunk = torch.cat([torch.full_like(f.sentence, i) for i, f in enumerate(finished)])  # (total,)
    row = torch.cat([torch.arange(f.sentence.numel(), device=sentence.device) for f in finished])  # (total,)
    # Group by sentence, best score first within a group (stable: earlier hypotheses win ties).
    order = score.argsort(descending=True, stable=True)
    order = order[sentence[order].argsort(stable=True)]  # (total,)
    group_sizes = torch.bincount(sentence, minlength=batch_size)  # (batch,)
    group_starts = group_sizes.cumsum(0) - group_sizes  # (batch,)
    rank = torch.arange(order.numel(), device=order.device) - group_starts[sentence[order]]  # (total,)
    selected = order[rank < nbest]  # (<= batch * nbest,)

    for s, c, r, sc in zip(
        sentence[selected].tolist(), chunk[selected].tolist(), row[selected].tolist(), score[selected].tolist()
    ):
        f = finished[c]
        token_log_probs = f.token_log_probs[r].tolist()
        results[s].append(
            Decoded(
                tokens=f.tokens[r].tolist(),
                score=sc,
                log_prob=math.fsum(token_log_probs),
                token_log_probs=token_log_probs,
                attention=None if f.attention is None else f.attention[r][:, src_mask[s]],
            )
        )
    return results


__all__ = [
    "NEG_INF",
    "Decoded",
    "beam_search",
    "check_common",
    "default_cap",
    "greedy",
    "length_penalty_of",
    "max_lengths",
    "single_path",
]


def run_beam(model: Seq2Seq, src: Tensor, options, common: dict, generator=None, **_) -> list[list[Decoded]]:
    """The ``beam`` entry of ``mtkit.decoding.algorithms``: beam search with ``options``' beam_size, nbest,
    stopping and length penalty; greedy's loop where it would keep one hypothesis and no constraint."""
    guide = common.get("guide")
    if options.beam_size == 1 and options.nbest == 1 and not (guide is not None and guide.has_constraints):
        return greedy(model, src, length_penalty=options.length_penalty, **common)
    return beam_search(
        model,
        src,
        beam_size=options.beam_size,
        length_penalty=options.length_penalty,
        nbest=options.nbest,
        stopping=options.stopping,
        **common,
    )
