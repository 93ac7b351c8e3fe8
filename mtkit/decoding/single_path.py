"""Single-path decoding: greedy, and the decoder that sampling (sampling.py) shares with it.

One path per sentence (``copies`` of them for sampling's n-best), one token per path and step, under the
conventions of search.py's docstring: PAD and BOS never chosen, EOS forced at the length limit, scores as
``log_prob / lp(length)``. Paths that ended leave the batch a quarter at a time (``DROP_SHARE``).
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence

import torch
from torch import Tensor

from mtkit.decoding.constraints import Guide, path_guide
from mtkit.decoding.hypothesis import Decoded, length_penalty_of
from mtkit.decoding.limits import check_common, default_cap, max_lengths
from mtkit.decoding.strategy import NEG_INF, row_argmax
from mtkit.models.base import BOS, EOS, PAD, Seq2Seq

# Greedy and sampled paths that ended keep running (their outputs past EOS are ignored) until they are this share of
# the batch, and are then dropped together: each drop copies the state of every path left (its caches and sources),
# so dropping a few at a time, most steps, cost more than the steps they would have run (docs/benchmarks.md, 21).
DROP_SHARE = 0.25


def encode(model: Seq2Seq, src: Tensor, src_mask: Tensor, parts: Optional[Sequence[int]]) -> Any:
    """The model's memory of ``src``: whole, or with two or more ``parts`` each of those batches on its own."""
    return model.encode(src, src_mask) if parts is None or len(parts) < 2 else model.encode_parts(src, src_mask, parts)


def single_path(
    model: Seq2Seq,
    src: Tensor,
    choose: Callable[[Tensor], Tensor],
    *,
    copies: int,
    max_len_a: float,
    max_len_b: float,
    max_len_cap: Optional[int],
    length_penalty: float,
    need_attention: bool,
    guide: Optional[Guide] = None,
    parts: Optional[Sequence[int]] = None,
) -> list[list[Decoded]]:
    """Decode ``copies`` independent paths per sentence, one token per path and step.

    Args:
        model: the model to decode.
        src: (batch, src_len) source token ids, PAD-padded.
        choose: maps scores (rows, vocab) to the next tokens (rows,). The scores are the model's log-probs with
            PAD and BOS at -inf, and every token but EOS at -inf in rows at their length limit.
        copies: paths per sentence.
        max_len_a: output tokens allowed per source token.
        max_len_b: output tokens allowed beyond those.
        max_len_cap: the most output tokens, or None.
        length_penalty: GNMT's alpha; it only changes the reported ``score``.
        need_attention: also return each hypothesis's attention rows.
        guide: prefixes and avoided phrases (constraints.py); None for none.
        parts: the row counts of the length-sorted batches ``src`` joins, each encoded on its own
            (``Seq2Seq.encode_parts``); None encodes ``src`` whole.

    Returns:
        One list per sentence of its ``copies`` hypotheses, best score first. Token log-probs are the model's own.

    Raises:
        ValueError: ``guide`` carries lexical constraints (they need ``beam_search``), or does not fit
            ``max_len_cap``.
    """
    device = src.device
    src_mask = src.ne(PAD)  # (batch, src_len)
    state = model.init_state(encode(model, src, src_mask, parts), src_mask)
    path = path_guide(guide)
    max_len = path.start(max_lengths(src_mask, max_len_a, max_len_b, max_len_cap), max_len_cap, copies, beam=False)
    if copies > 1:
        copy_rows = torch.arange(src.size(0), device=device).repeat_interleave(copies)  # (rows,)
        state = state.reorder(copy_rows)
        max_len = max_len[copy_rows]
    num_rows = max_len.numel()
    num_steps = int(max_len.max()) + 1 if num_rows else 0

    out_tokens = torch.full((num_rows, num_steps), PAD, dtype=torch.long, device=device)  # (rows, steps)
    out_log_probs = torch.zeros(num_rows, num_steps, device=device)  # (rows, steps)
    out_attention: Optional[Tensor] = None  # (rows, steps, src_len)
    if need_attention:
        out_attention = torch.zeros(num_rows, num_steps, src.size(1), device=device)
    banned = torch.tensor([PAD, BOS], device=device)

    active = torch.arange(num_rows, device=device)  # (live,) row ids of live paths
    live_max_len = max_len  # (live,)
    first_forced_step = int(max_len.min()) if num_rows else 0
    prev_tokens = torch.full((num_rows,), BOS, dtype=torch.long, device=device)  # (live,)
    done: Optional[Tensor] = None  # (live,) paths that ended but still run, until enough of them are dropped at once
    for t in range(num_steps):
        log_probs, state, attention = model.step(prev_tokens, state, need_attention)
        log_probs = log_probs.float()  # (live, vocab)
        # without a guide the bans go into log_probs itself: a banned token is never chosen, so the chosen tokens'
        # log-probs read below are the model's (a guide changes scores in place, so it gets its own copy)
        scores = (
            log_probs.index_fill_(1, banned, NEG_INF) if guide is None else log_probs.index_fill(1, banned, NEG_INF)
        )
        scores, forced_prefix = path.mask(scores, t)
        if t >= first_forced_step:
            forced = live_max_len.le(t).unsqueeze(1)  # (live, 1)
            not_eos = torch.ones_like(scores[0], dtype=torch.bool)
            not_eos[EOS] = False
            scores.masked_fill_(forced & not_eos, NEG_INF)
        tokens = choose(scores)  # (live,)
        out_tokens[active, t] = tokens
        token_log_probs = log_probs.gather(1, tokens.unsqueeze(1)).squeeze(1)
        out_log_probs[active, t] = (
            token_log_probs if forced_prefix is None else token_log_probs.masked_fill(forced_prefix, 0)
        )
        if out_attention is not None:
            out_attention[active, t] = attention.float()
        path.advance(tokens)
        ended = tokens.eq(EOS) if done is None else tokens.eq(EOS).logical_or_(done)  # (live,)
        finished = int(ended.sum())  # the one sync per step
        if finished == ended.numel():
            break
        if finished and finished >= DROP_SHARE * ended.numel():
            keep = ended.logical_not().nonzero().squeeze(1)  # (still_live,)
            active, live_max_len, tokens = active[keep], live_max_len[keep], tokens[keep]
            state = state.reorder(keep)
            path.keep(keep)
            first_forced_step = int(live_max_len.min())
            done = None
        elif finished:
            done = ended
        prev_tokens = tokens

    # Python lists once, at the end. A path's length is where its first EOS is.
    is_eos = out_tokens.eq(EOS)  # (rows, steps)
    lengths = torch.where(is_eos.any(1), is_eos.int().argmax(1), torch.full_like(max_len, num_steps))
    tokens_list, log_probs_list, lengths_list = out_tokens.tolist(), out_log_probs.tolist(), lengths.tolist()
    results: list[list[Decoded]] = [[] for _ in range(src.size(0))]
    prefix_lengths = path.prefix_lengths()
    for row in range(num_rows):
        length = lengths_list[row]
        token_log_probs = log_probs_list[row][: length + 1]
        log_prob = math.fsum(token_log_probs)
        attention_rows = None
        if out_attention is not None:
            attention_rows = out_attention[row, : length + 1][:, src_mask[row // copies]]
        results[row // copies].append(
            Decoded(
                tokens=tokens_list[row][:length],
                score=log_prob / length_penalty_of(length + 1 - prefix_lengths[row // copies], length_penalty),
                log_prob=log_prob,
                token_log_probs=token_log_probs,
                attention=attention_rows,
            )
        )
    for hyps in results:
        hyps.sort(key=lambda h: h.score, reverse=True)
    return results


@torch.inference_mode()
def greedy(
    model: Seq2Seq,
    src: Tensor,
    *,
    max_len_a: float,
    max_len_b: float,
    max_len_cap: Optional[int] = None,
    length_penalty: float = 0.0,
    need_attention: bool = False,
    guide: Optional[Guide] = None,
    parts: Optional[Sequence[int]] = None,
) -> list[list[Decoded]]:
    """Greedy decoding: the most likely token at every step.

    Args:
        model: the model to decode.
        src: (batch, src_len) source token ids, PAD-padded.
        max_len_a: output tokens allowed per source token.
        max_len_b: output tokens allowed beyond those.
        max_len_cap: the most output tokens; defaults to ``model.max_positions - 1``.
        length_penalty: GNMT's alpha; it only changes the reported ``score``.
        need_attention: also return each hypothesis's attention rows.
        guide: prefixes and avoided phrases (constraints.py); None for none.
        parts: batches joined in ``src``, each encoded on its own (``single_path``); None for one.

    Returns:
        One list per sentence holding its one hypothesis.

    Raises:
        ValueError: an argument is out of range, or ``guide`` carries lexical constraints or does not fit
            ``max_len_cap``.
    """
    check_common(src, max_len_a, max_len_b)
    return single_path(
        model,
        src,
        row_argmax,
        copies=1,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        max_len_cap=default_cap(model) if max_len_cap is None else max_len_cap,
        length_penalty=length_penalty,
        need_attention=need_attention,
        guide=guide,
        parts=parts,
    )


def run_greedy(model: Seq2Seq, src: Tensor, options, common: dict, generator=None, **_) -> list[list[Decoded]]:
    """The ``greedy`` entry of ``mtkit.decoding.algorithms``."""
    return greedy(model, src, length_penalty=options.length_penalty, **common)
