"""Command-line flags that are not config keys (formats, the server's limits): their defaults and checks, written
once. The decoding algorithms' own flags (sampling's among them) are declared in ``mtkit.decoding.algorithms``."""

from __future__ import annotations

from typing import Any, Literal, Optional, get_args

from pydantic import Field, ValidationError

from mtkit.config import Section
from mtkit.errors import MtkitError


class OutputOptions(Section):
    """`mtkit translate --format / --input-format / --engine` and `mtkit export --format` flags (not config keys)."""

    format: Literal["text", "jsonl"] = "text"
    input_format: Literal["text", "jsonl", "html"] = "text"
    engine: Literal["torch", "ctranslate2"] = "torch"
    export_format: Literal["ctranslate2", "hf", "argos", "web"] = "ctranslate2"


FLAGS = {"format": "--format", "input_format": "--input-format", "engine": "--engine", "export_format": "--format"}


def check_flags(**values) -> OutputOptions:
    """Validate flag values with ``OutputOptions``; a bad one is one line: ``--format 'x': use text or jsonl``."""
    try:
        return OutputOptions(**values)
    except ValidationError as err:
        first = err.errors()[0]
        name = str(first["loc"][0])
        choices = get_args(OutputOptions.model_fields[name].annotation)
        raise MtkitError(f"{FLAGS[name]} {first['input']!r}: use {' or '.join(choices)}") from None


class ServeLimits(Section):
    """`mtkit serve`'s bounds (flags, not config keys): their defaults and checks, written once."""

    # room for a text of max_chars characters however escaped (serving.contract.text_bytes): a text over the
    # schema's maxLength is refused by its route (422), not by the body limit (413) checked before it
    max_body_bytes: int = Field(2 << 20, ge=1)
    max_file_bytes: int = Field(10 << 20, ge=1, description="per document sent to /translate_file")
    max_sentences: int = Field(128, ge=1, description="per request")
    max_hypotheses: int = Field(
        64, ge=1, description="per sentence: a request's nbest and the hypotheses of an algorithm it names"
    )
    max_chars: int = Field(100_000, ge=1, description="per request, all sentences together")
    queue_size: int = Field(1024, ge=1, description="sentences waiting, all requests together")
    max_wait: float = Field(
        0.005, ge=0, description="seconds the batcher waits for the next sentence of a batch as large as its last"
    )
    max_delay: float = Field(0.05, ge=0, description="seconds the batcher holds a batch back at most")
    timeout: float = Field(60.0, gt=0, description="seconds a request may wait for its translations")
    char_limit: Optional[int] = Field(
        None, ge=0, description="characters DeepL's routes translate in all; beyond: 456 (None: no limit)"
    )


def serve_limits(flags: dict[str, tuple[str, Any]], **values) -> ServeLimits:
    """``ServeLimits(**values)``; a bad value is one line naming its flag: ``flags`` maps a field to (flag, the
    value as typed), e.g. {"max_wait": ("--max-wait-ms", 5.0)}."""
    try:
        return ServeLimits(**values)
    except ValidationError as err:
        first = err.errors()[0]
        flag, typed = flags[str(first["loc"][0])]
        raise MtkitError(f"{flag} {typed!r}: {first['msg'][0].lower()}{first['msg'][1:]}") from None
