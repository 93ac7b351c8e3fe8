"""``POST /v1/translate``'s answers and ``GET /v1/models``'s: the response models (their schema is at
``/openapi.json``), and a model's translation as one text's answer, with the sentences it was cut into."""

from __future__ import annotations

from typing import Optional

from pydantic import BaseModel, Field

from mtkit.serving.schemas import RequestOptions


class HypothesisOut(BaseModel):
    text: str
    score: Optional[float] = None
    log_prob: Optional[float] = None
    tokens: Optional[list[str]] = None
    token_log_probs: Optional[list[float]] = Field(None, description="One per subword, the last for EOS.")
    alignment: Optional[list[list[float]]] = Field(None, description="Rows: target subwords and EOS; columns: source.")
    confidence: Optional[float] = Field(
        None, description="From 0 to 1: the expected sentence chrF / 100 (calibrated runs), else the model's own."
    )
    words: Optional[list[tuple[str, float]]] = Field(None, description="Each word and its confidence, 0 to 1.")
    qe: Optional[float] = Field(None, description="CometKiwi's quality estimate, where the server has a --qe-model.")


class LegOut(BaseModel):
    model: str
    source: str
    target: str


class DetectedLanguageOut(BaseModel):
    language: str
    confidence: float = Field(..., description="From 0 to 100.")


class SentenceOut(BaseModel):
    source: str = Field(..., description="The sentence as the model read it (through a pivot: of the pivot text).")
    source_start: Optional[int] = Field(
        None, description="Where it starts in the text given, in characters (code points); null through a pivot."
    )
    source_end: Optional[int] = Field(None, description="Where it ends in the text given; null through a pivot.")
    start: int = Field(..., description="Where its best translation starts in the translation's text (code points).")
    end: int = Field(..., description="Where its best translation ends in the translation's text.")
    source_tokens: Optional[list[str]] = Field(None, description="With options.alignments: its source subwords.")
    hypotheses: list[HypothesisOut] = Field(..., description="Its own, best first: the first is text[start:end].")


class TranslationOut(BaseModel):
    text: str = Field(..., description="The best translation.")
    detected_language: Optional[DetectedLanguageOut] = Field(None, description="With source auto: the text's.")
    route: Optional[list[LegOut]] = Field(
        None,
        description="The models it went through, each from its source into its target: one, or two through a pivot"
        " language (given where the server has several models or the route pivots).",
    )
    source_tokens: Optional[list[str]] = Field(None, description="With options.alignments: the source subwords.")
    hypotheses: Optional[list[HypothesisOut]] = Field(
        None, description="With options.nbest, options.scores or options.alignments (through a pivot: its last leg's)."
    )
    sentences: Optional[list[SentenceOut]] = Field(
        None,
        description="With options.nbest, options.scores or options.alignments and format text: the sentences the"
        " server cut the text into, in order, each with its place in the text and in the translation, and its own"
        " hypotheses (a paragraph's hypotheses join theirs; its alignment is theirs).",
    )


class TranslateResponse(BaseModel):
    translations: list[TranslationOut]


class ModelOut(BaseModel):
    name: str
    path: Optional[str] = Field(..., description="Its run directory, checkpoint or export (null: given loaded).")
    engine: str
    directions: list[str] = Field(..., description="The pairs it serves, source-target.")
    loaded: bool = Field(..., description="Whether it is in memory now.")
    error: Optional[str] = Field(..., description="Why its last load failed; null when it did not.")


class ModelsOut(BaseModel):
    models: list[ModelOut]


def translation_out(result, options: RequestOptions, *, pivot: bool = False) -> TranslationOut:
    """One text's answer: its text, and the hypotheses, source subwords and sentences that ``options`` ask for.

    Args:
        result: the model's ``results.Translation`` of the text.
        options: the request's options.
        pivot: ``result`` is a pivot's last leg: its source is the pivot text, not the text given.
    """
    if options.nbest is None and not options.scores and not options.alignments:
        return TranslationOut(text=result.text)
    source_tokens = list(result.source_tokens) if options.alignments else None
    return TranslationOut(
        text=result.text,
        source_tokens=source_tokens,
        hypotheses=[_hypothesis(h, options) for h in result.hypotheses],
        sentences=_sentences(result, options, pivot) if options.format == "text" else None,
    )


def _hypothesis(h, options: RequestOptions, text: Optional[str] = None) -> HypothesisOut:
    return HypothesisOut(
        text=h.text if text is None else text,
        score=h.score,
        log_prob=h.log_prob,
        tokens=list(h.tokens) if options.scores or options.alignments else None,
        token_log_probs=h.token_log_probs,
        alignment=h.alignment,
        confidence=h.confidence,
        words=list(h.word_confidences) if h.word_confidences is not None else None,
        qe=h.qe,
    )


def _sentences(result, options: RequestOptions, pivot: bool) -> Optional[list[SentenceOut]]:
    """The sentences of ``result``, placed in its source and its best text. ``inference.paragraphs`` joins a
    paragraph's sentences with the source's whitespace between them: each sentence is found in the source after
    the one before, and its best translation after the same whitespace in the text. A text read as one sentence (no
    ``sentences``) is one, its hypotheses without the source's outer whitespace where they carry it. None where the
    sentences do not make up the text so."""
    source, text = result.source, result.text
    out: list[SentenceOut] = []
    at = cursor = 0  # in the source, in the text
    for part in result.sentences or ((result,) if result.hypotheses else ()):
        core = part.source.strip() if part is result else part.source
        found = source.find(core, at) if core else -1
        if found < 0 or source[at:found].strip():
            return None
        gap, at = source[at:found], found + len(core)
        texts = [h.text for h in part.hypotheses]
        if part is result:  # the whole text: its outer whitespace, where the translation keeps it, is not the sentence
            texts = [_inner(t, gap, source[at:]) for t in texts]
            gap = gap if texts[0] != text else ""
        best = texts[0] if texts else ""
        start = cursor + len(gap)
        if not text.startswith(gap, cursor) or not text.startswith(best, start):
            return None
        cursor = start + len(best)
        out.append(
            SentenceOut(
                source=core,
                source_start=None if pivot else found,
                source_end=None if pivot else at,
                start=start,
                end=cursor,
                source_tokens=list(part.source_tokens) if options.alignments else None,
                hypotheses=[_hypothesis(h, options, t) for h, t in zip(part.hypotheses, texts)],
            )
        )
    tail = source[at:]
    return None if tail.strip() or text[cursor:] not in (tail, "") else out


def _inner(text: str, before: str, after: str) -> str:
    """``text`` without ``before`` and ``after`` around it, where it has them."""
    if len(text) >= len(before) + len(after) and text.startswith(before) and text.endswith(after):
        return text[len(before) : len(text) - len(after)]
    return text
