"""``POST /v1/translate``'s answers and ``GET /v1/models``'s: the response models (their schema is at
``/openapi.json``), and a model's translation as one sentence's answer."""

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


class LegOut(BaseModel):
    model: str
    source: str
    target: str


class DetectedLanguageOut(BaseModel):
    language: str
    confidence: float = Field(..., description="From 0 to 100.")


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


def translation_out(result, options: RequestOptions) -> TranslationOut:
    """One sentence's answer: its text, and the hypotheses and source subwords that ``options`` ask for.

    Args:
        result: the model's ``results.Translation`` of the sentence.
        options: the request's options.
    """
    if options.nbest is None and not options.scores and not options.alignments:
        return TranslationOut(text=result.text)
    hyps = [
        HypothesisOut(
            text=h.text,
            score=h.score,
            log_prob=h.log_prob,
            tokens=list(h.tokens) if options.scores or options.alignments else None,
            token_log_probs=h.token_log_probs,
            alignment=h.alignment,
            confidence=h.confidence,
            words=list(h.word_confidences) if h.word_confidences is not None else None,
        )
        for h in result.hypotheses
    ]
    source_tokens = list(result.source_tokens) if options.alignments else None
    return TranslationOut(text=result.text, source_tokens=source_tokens, hypotheses=hyps)
