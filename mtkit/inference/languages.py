"""The languages of a loaded model: its source and target codes, a multilingual model's targets, and the
language token that its decoder reads first (``target_tag: decoder``), forced and then taken off the outputs."""

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


def run_languages(data) -> tuple[tuple[str, str], tuple[str, ...]]:
    """(source, target) codes of a run's ``data`` section, and a multilingual run's targets (() otherwise). A
    multilingual run's source is its directions' one source language, or "" where they have several."""
    if not data.multilingual:
        return (data.src_lang, data.tgt_lang), ()
    sources = {d.src_lang for d in data.directions}
    return (sources.pop() if len(sources) == 1 else "", "mul"), tuple(data.targets)
