"""``Decoded``: one output of a search as token ids, as every engine returns it, and the GNMT length penalty
that ranks outputs (``mtkit.Hypothesis`` is what users get: text, subwords, plain floats).

No torch here: the CTranslate2 engine uses these without importing it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Union

if TYPE_CHECKING:
    from torch import Tensor


@dataclass
class Decoded:
    """One hypothesis of a search: target token ids, their scores, and optionally their cross-attention."""

    tokens: list[int]  # without BOS / EOS
    score: float  # log_prob / lp(len(tokens) + 1): what hypotheses are ranked by
    log_prob: float  # sum of token_log_probs
    token_log_probs: list[float]  # len(tokens) + 1 values, the last one for EOS
    attention: Optional[Tensor] = None  # (len(tokens) + 1, real_src_len) when asked for


def length_penalty_of(length: Union[int, float, Tensor], alpha: float) -> Union[float, Tensor]:
    """The GNMT length penalty ``((5 + length) / 6) ** alpha``, what a hypothesis's log-prob is divided by.

    Args:
        length: the hypothesis's length in tokens, EOS included. An int gives a float; a float tensor gives a
            tensor of its dtype, computed elementwise in that dtype.
        alpha: the penalty's exponent; 0 leaves log-probs as they are (the penalty is 1).

    Returns:
        The penalty: a float, or a tensor shaped like ``length``.
    """
    return ((5.0 + length) / 6.0) ** alpha
