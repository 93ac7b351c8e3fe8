"""Command-line flags that are not config keys (sampling, formats, the server's limits): their defaults and
checks, written once."""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import Field, ValidationError

from mtkit.config import Section
from mtkit.errors import MtkitError


class SamplingOptions(Section):
    """`mtkit translate --sampling` flags (not config keys): their defaults and ranges, written once."""

    temperature: float = Field(1.0, gt=0, description="greedy decoding is temperature 0: use --beam-size 1")
    top_k: int = Field(0, ge=0, description="sample among the k most likely subwords; 0: all")
    top_p: float = Field(1.0, gt=0, le=1, description="sample in the smallest set of this much probability")
    seed: int = 0


class OutputOptions(Section):
    """`mtkit translate --format / --input-format / --engine` and `mtkit export --format` flags (not config keys)."""

    format: Literal["text", "jsonl"] = "text"
    input_format: Literal["text", "jsonl"] = "text"
    engine: Literal["torch", "ctranslate2"] = "torch"
    export_format: Literal["ctranslate2", "hf"] = "ctranslate2"


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
