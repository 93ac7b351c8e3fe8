"""What the Python API (``mtkit.load``) returns: frozen dataclasses of plain Python values, no torch."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Hypothesis:
    """One translation of a source line.

    ``tokens`` are the target subwords (EOS excluded). With scores: ``log_prob`` is the sum of
    ``token_log_probs`` (``len(tokens) + 1`` values, the last one for EOS) and ``score`` is ``log_prob`` over the
    GNMT length penalty ``((5 + len(tokens) + 1) / 6) ** length_penalty``, what hypotheses are ranked by; without
    scores the three are None. With alignments, ``alignment`` holds the cross-attention weights: one row per
    target token and EOS, one column per source subword and EOS (``Translation.source_tokens`` + ``</s>``).
    With scores, ``confidence`` (in [0, 1]) says how much to trust the hypothesis and ``word_confidences`` each of
    its words (``inference.confidence``: the expected sentence chrF / 100 where the run is calibrated, else the
    geometric mean of its token probabilities; a word's subwords' probability together).
    """

    text: str
    tokens: tuple[str, ...]
    score: Optional[float] = None
    log_prob: Optional[float] = None
    token_log_probs: Optional[tuple[float, ...]] = None
    alignment: Optional[tuple[tuple[float, ...], ...]] = None
    confidence: Optional[float] = None
    word_confidences: Optional[tuple[tuple[str, float], ...]] = None
    qe: Optional[float] = None  # with scores and a quality estimation model: CometKiwi's score (inference.quality)


@dataclass(frozen=True)
class Translation:
    """The n-best hypotheses of one source line, best first; none for an empty or whitespace-only line.

    ``source`` is the line as given; ``source_tokens`` the subwords the model read (after truncation to its
    length limit, EOS excluded).

    A segment the model read as several sentences (a paragraph; an HTML fragment) has their translations in
    ``sentences``, each a ``Translation`` of its own with its tokens, scores and alignments; the segment's
    hypotheses then join theirs (``inference.paragraphs``): their text keeps the source's whitespace (and
    markup), ``tokens`` and ``token_log_probs`` are concatenated, ``score`` and ``log_prob`` summed, and
    ``alignment`` is None. A segment read as one sentence has no ``sentences``.
    """

    source: str
    source_tokens: tuple[str, ...]
    hypotheses: tuple[Hypothesis, ...]
    sentences: tuple["Translation", ...] = ()

    @property
    def best(self) -> Optional[Hypothesis]:
        return self.hypotheses[0] if self.hypotheses else None

    @property
    def text(self) -> str:
        """The best hypothesis's text ("" when there is none)."""
        return self.hypotheses[0].text if self.hypotheses else ""
