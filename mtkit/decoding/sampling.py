"""Ancestral sampling with temperature, top-k and nucleus (top-p) truncation, on search.py's single-path decoder.

``sample`` returns ``nbest`` independent samples per sentence as ``Hypothesis`` lists, like the other decoders.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from mtkit.decoding.constraints import Guide
from mtkit.decoding.search import NEG_INF, Hypothesis, check_common, default_cap, single_path
from mtkit.models.base import Seq2Seq


def filter_top_k_top_p(logits: Tensor, top_k: int, top_p: float) -> Tensor:
    """logits (rows, vocab) with everything outside the top-k / nucleus set to -inf."""
    if top_k > 0:
        kth_best = logits.topk(min(top_k, logits.size(1)), dim=1).values[:, -1:]  # (rows, 1)
        logits = logits.masked_fill(logits < kth_best, NEG_INF)
    if top_p < 1.0:
        sorted_logits, order = logits.sort(dim=1, descending=True)  # (rows, vocab)
        sorted_probs = sorted_logits.softmax(dim=1)
        mass_before = sorted_probs.cumsum(dim=1) - sorted_probs  # mass of strictly better tokens
        drop_sorted = mass_before >= top_p  # keep the smallest prefix reaching top_p (never the first)
        drop = torch.zeros_like(drop_sorted).scatter(1, order, drop_sorted)  # (rows, vocab), unsorted
        logits = logits.masked_fill(drop, NEG_INF)
    return logits


@torch.inference_mode()
def sample(
    model: Seq2Seq,
    src: Tensor,
    *,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: Optional[torch.Generator] = None,
    max_len_a: float,
    max_len_b: float,
    max_len_cap: Optional[int] = None,
    length_penalty: float = 0.0,
    nbest: int = 1,
    need_attention: bool = False,
    guide: Optional[Guide] = None,
) -> list[list[Hypothesis]]:
    """Ancestral sampling: ``nbest`` independent samples per sentence, sorted by score (best first).

    Tokens are drawn from softmax(log_probs / temperature), restricted to the ``top_k`` most likely
    tokens (0: all) and to the smallest set whose probability reaches ``top_p``. Reported log-probs and
    scores are the model's own (no temperature, no truncation). Pass a seeded ``generator`` (on the
    model's device) for reproducible samples. A ``guide`` (constraints.py) forces prefixes (a forced token is
    drawn with certainty) and bans avoided phrases; it may not carry constraints.
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

    def draw(scores: Tensor) -> Tensor:  # (rows, vocab) -> (rows,)
        logits = filter_top_k_top_p(scores / temperature, top_k, top_p)
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
    )
