"""The language token that a multilingual model's decoder reads first (``target_tag: decoder``): forced before any
prefix, then taken off the outputs. A model's codes and targets are ``mtkit.languages.run_languages``."""

from __future__ import annotations

import dataclasses
from typing import Optional

from mtkit.decoding.guidance import Guidance
from mtkit.decoding.hypothesis import Decoded


def with_first(guidance: Optional[Guidance], token: int) -> Guidance:
    """``guidance`` with ``token`` forced before its prefix."""
    guidance = guidance or Guidance()
    return dataclasses.replace(guidance, prefix=(token, *guidance.prefix))


def without_first(hyp: Decoded) -> Decoded:
    """A hypothesis without its first token (a forced language token, whose log-prob is 0)."""
    attention = hyp.attention[1:] if hyp.attention is not None else None
    return dataclasses.replace(
        hyp, tokens=list(hyp.tokens[1:]), token_log_probs=list(hyp.token_log_probs[1:]), attention=attention
    )
