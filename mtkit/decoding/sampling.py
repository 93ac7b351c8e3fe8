"""Ancestral sampling with temperature, top-k and nucleus (top-p) truncation.

It runs on single_path.py's decoder, greedy's too. ``sample`` returns ``nbest`` independent samples per sentence as
``Decoded`` lists, like the other decoders.
"""

from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
from torch import Tensor

from mtkit.decoding.constraints import Guide
from mtkit.decoding.hypothesis import Decoded
from mtkit.decoding.limits import check_common, default_cap
from mtkit.decoding.single_path import single_path
from mtkit.decoding.strategy import NEG_INF, row_topk
from mtkit.models.base import Seq2Seq


def filter_top_k_top_p(logits: Tensor, top_k: int, top_p: float, epsilon: float = 0.0) -> Tensor:
    """Truncate each row's distribution to its top-k and nucleus (top-p) tokens, and to those of probability at
    least ``epsilon`` (epsilon sampling, Hewitt et al. 2022: no sort, one comparison per token).

    Args:
        logits: (rows, vocab) unnormalised scores.
        top_k: tokens kept per row, the most likely first; 0 keeps all.
        top_p: the probability mass kept per row: the smallest set of most likely tokens that reaches it; 1 keeps
            all. The most likely token is always kept.
        epsilon: the least probability a kept token has; 0 keeps all. The most likely token is always kept.

    Returns:
        (rows, vocab) ``logits`` with every token outside the kept set at -inf.
    """
    if epsilon > 0.0:
        log_probs = logits.log_softmax(dim=1)
        best = log_probs.max(dim=1, keepdim=True).values  # (rows, 1)
        logits = logits.masked_fill((log_probs < math.log(epsilon)) & (log_probs < best), NEG_INF)
    if top_k > 0:
        kth_best = row_topk(logits, min(top_k, logits.size(1)))[0][:, -1:]  # (rows, 1)
        logits = logits.masked_fill(logits < kth_best, NEG_INF)
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=1, descending=True)  # (rows, vocab)
        sorted_probs = sorted_logits.softmax(dim=1)
        mass_before = sorted_probs.cumsum(dim=1) - sorted_probs  # mass of strictly better tokens
        drop_sorted = mass_before >= top_p  # keep the smallest prefix reaching top_p
        drop_sorted[:, 0] = False  # and the most likely, whatever top_p (one too small for float32 is 0 there)
        drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)  # (rows, vocab), unsorted
        logits = logits.masked_fill(drop, NEG_INF)
    return logits


def draw_epsilon(logits: Tensor, epsilon: float, top_k: int = 0, generator=None) -> Tensor:
    """One draw per row among the subwords of probability at least ``epsilon`` (the most likely always; within
    the ``top_k`` most likely where ``top_k`` > 0), by their probabilities: ``filter_top_k_top_p(logits, top_k,
    1.0, epsilon)`` then a draw, without a pass over the vocabulary per filter. At most 1 / epsilon subwords reach
    epsilon, so they are among that many most likely: the draw looks at those only, normalised by the whole
    vocabulary's log-sum-exp.

    Args:
        logits: (rows, vocab) scores (after any temperature).
        epsilon: in (0, 1).
        top_k: 0, or the most subwords kept.
        generator: the draws' generator.

    Returns:
        (rows,) the subwords drawn.
    """
    k = min(logits.size(1), int(1.0 / epsilon), top_k or logits.size(1))
    values, ids = row_topk(logits, k)  # (rows, k), best first
    probs = (values - logits.logsumexp(dim=1, keepdim=True)).exp_()
    probs[:, 1:].masked_fill_(probs[:, 1:] < epsilon, 0.0)  # the most likely stays, whatever its probability
    choice = torch.multinomial(probs, 1, generator=generator)  # (rows, 1): unnormalised weights are fine
    return ids.gather(1, choice).squeeze(1)


@torch.inference_mode()
def sample(
    model: Seq2Seq,
    src: Tensor,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    epsilon: float = 0.0,
    generator: Optional[torch.Generator] = None,
    max_len_a: float,
    max_len_b: float,
    max_len_cap: Optional[int] = None,
    length_penalty: float = 0.0,
    nbest: int = 1,
    need_attention: bool = False,
    guide: Optional[Guide] = None,
    parts: Optional[Sequence[int]] = None,
) -> list[list[Decoded]]:
    """Ancestral sampling: ``nbest`` independent samples per sentence.

    Tokens are drawn from ``softmax(log_probs / temperature)`` truncated by ``filter_top_k_top_p``. Reported
    log-probs and scores are the model's own, without temperature or truncation.

    Args:
        model: the model to decode.
        src: (batch, src_len) source token ids, PAD-padded.
        temperature: divides the log-probs before drawing; must be > 0.
        top_k: draw among the ``top_k`` most likely tokens; 0 for all.
        top_p: draw among the smallest set of most likely tokens whose probability reaches ``top_p``; 1 for all.
        epsilon: draw only among tokens of probability >= ``epsilon`` (after the temperature); 0 for all.
        generator: a seeded generator on the model's device makes the samples reproducible; None uses torch's.
        max_len_a: output tokens allowed per source token.
        max_len_b: output tokens allowed beyond those.
        max_len_cap: the most output tokens; defaults to ``model.max_positions - 1``.
        length_penalty: GNMT's alpha; it only changes the reported ``score``.
        nbest: samples per sentence.
        need_attention: also return each hypothesis's attention rows.
        guide: prefixes and avoided phrases (constraints.py); None for none. A forced prefix token is drawn with
            certainty.
        parts: batches joined in ``src``, each encoded on its own (``single_path``); None for one.

    Returns:
        One list per sentence of its ``nbest`` samples, best score first.

    Raises:
        ValueError: an argument is out of range, or ``guide`` carries lexical constraints or does not fit
            ``max_len_cap``.
    """
    check_common(src, max_len_a, max_len_b)
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0 (use greedy for temperature 0), got {temperature}")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0 disables it), got {top_k}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if nbest < 1:
        raise ValueError(f"nbest must be >= 1, got {nbest}")

    def tempered(scores: Tensor) -> Tensor:
        if temperature == 1.0:
            return scores
        # the best at 0 first, so a temperature too small for float32 (below its least normal, which is used then)
        # leaves the best finite and the others -inf: greedy's draw
        best = scores.max(dim=1, keepdim=True).values
        return (scores - best) / max(temperature, torch.finfo(scores.dtype).tiny)

    def draw(scores: Tensor) -> Tensor:  # (rows, vocab) -> (rows,)
        if epsilon > 0 and top_p == 1.0:
            return draw_epsilon(tempered(scores), epsilon, top_k, generator)
        logits = filter_top_k_top_p(tempered(scores), top_k, top_p, epsilon)
        return torch.multinomial(logits.softmax(dim=1), 1, generator=generator).squeeze(1)

    return single_path(
        model,
        src,
        draw,
        copies=nbest,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        max_len_cap=default_cap(model) if max_len_cap is None else max_len_cap,
        length_penalty=length_penalty,
        need_attention=need_attention,
        guide=guide,
        parts=parts,
    )


def run_sampling(model: Seq2Seq, src: Tensor, options, common: dict, generator=None, **_) -> list[list[Decoded]]:
    """The ``sampling`` entry of ``mtkit.decoding.algorithms``: ``options.nbest`` samples a sentence."""
    return sample(
        model,
        src,
        temperature=options.param("temperature"),
        top_k=options.param("top_k"),
        top_p=options.param("top_p"),
        epsilon=options.param("epsilon"),
        generator=generator,
        nbest=options.nbest,
        length_penalty=options.length_penalty,
        **common,
    )
