"""Output length limits and the argument checks that every decoder shares."""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from mtkit.models.base import Seq2Seq


def max_lengths(src_mask: Tensor, a: float, b: float, cap: Optional[int]) -> Tensor:
    """Each sentence's maximum number of output tokens: ``min(ceil(a * src_len + b), cap)``, EOS excluded.

    Args:
        src_mask: (batch, src_len) bool, True at real (non-PAD) source tokens.
        a: output tokens per source token.
        b: output tokens beyond those.
        cap: the most output tokens, or None for no cap.

    Returns:
        (batch,) int64 limits, never negative.
    """
    src_lengths = src_mask.sum(dim=1).double()  # (batch,)
    # The 1e-6 forgives float rounding: 1.2 * 10 is 12, not 13.
    limit = torch.ceil(a * src_lengths + b - 1e-6)
    if cap is not None:  # before the cast: a limit past int64's range (max_len_a 1e308) would wrap round
        limit = limit.clamp(max=cap)
    return limit.clamp(min=0, max=2**62).long()


def default_cap(model: Seq2Seq) -> Optional[int]:
    """The most output tokens ``model`` can decode.

    Args:
        model: the model; its ``max_positions`` attribute, where it has one, bounds the decoder's positions.

    Returns:
        ``model.max_positions - 1``, or None for a model without that attribute.
    """
    # Decoder inputs are BOS plus every emitted token but the final EOS: max_len + 1 positions.
    max_positions = getattr(model, "max_positions", None)
    return None if max_positions is None else int(max_positions) - 1


def check_common(src: Tensor, max_len_a: float, max_len_b: float) -> None:
    """Check the arguments every decoder takes.

    Args:
        src: source token ids; must be (batch, src_len).
        max_len_a: output tokens per source token; must be >= 0.
        max_len_b: output tokens beyond those; must be >= 0.

    Raises:
        ValueError: an argument is out of range.
    """
    if src.dim() != 2:
        raise ValueError(f"src must be (batch, src_len), got shape {tuple(src.shape)}")
    if max_len_a < 0 or max_len_b < 0:
        raise ValueError(f"max_len_a and max_len_b must be >= 0, got {max_len_a} and {max_len_b}")
