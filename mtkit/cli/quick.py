"""`mtkit translate` without Typer: its common flags parsed here, the rest of the command line left to Typer.

Importing Typer and building the command line costs a translation about 0.05 s; with a CTranslate2 export, whose
whole start-up is otherwise that of CTranslate2 and SentencePiece, it is worth skipping. ``translate_call`` reads
an argument list only when it understands all of it: run dirs and the flags below, each at most once, as
``--flag value``, ``--flag=value`` or ``-f value``, with values that convert. Anything else (``--help``, any other
flag, a value that does not convert or starts with a dash, ``--``) returns None, and Typer parses the list and
words any usage error, so the two ways in differ only in speed. The old spellings of renamed flags
(``renamed.py``: ``--sampling``) are read as Typer's command reads them, with the same warning, printed only
when the call is made here. tests/test_cli_quick.py holds them to the same call of ``translate_main`` for each flag.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable, Optional

from mtkit.cli import renamed
from mtkit.decoding import algorithms
from mtkit.inference import plain_fields

# flag -> (translate_main's keyword, the value's type)
_VALUES: dict[str, tuple[str, Callable]] = {
    "--input": ("input", Path),
    "-i": ("input", Path),
    "--output": ("output", Path),
    "-o": ("output", Path),
    "--beam-size": ("beam_size", int),
    "-b": ("beam_size", int),
    "--length-penalty": ("length_penalty", float),
    "--max-len-a": ("max_len_a", float),
    "--max-len-b": ("max_len_b", int),
    "--batch-size": ("batch_size", int),
    "--batch-tokens": ("batch_tokens", int),
    "--step-rows": ("step_rows", int),
    "--nbest": ("nbest", int),
    "--device": ("device", str),
    "--dtype": ("dtype", str),
    "--threads": ("threads", int),
    "--stopping": ("stopping", str),
    "--search": ("search", str),
    "--format": ("fmt", str),
    "--input-format": ("input_format", str),
    "--target": ("target", str),
    "-t": ("target", str),
    "--source": ("source", str),
    "--engine": ("engine", str),
    "--algorithm": ("algorithm", str),
    "--mark-below": ("mark_below", float),
    "--qe-model": ("qe_model", str),
    "--rerank": ("rerank", str),
    "--glossary": ("glossary", Path),
}
# every registered algorithm's own options, as Typer's command gets them (cli/base.py: with_algorithm_flags)
_VALUES.update({p.cli_flag: (name, p.kind) for name, (_, p) in algorithms.params().items()})
# flag -> (keyword, value)
_SWITCHES: dict[str, tuple[str, bool]] = {
    "--split-sentences": ("split_sentences", True),
    "--no-split-sentences": ("split_sentences", False),
    "--skip-bad-lines": ("skip_bad_lines", True),
    "--verbose": ("verbose", True),
    "-v": ("verbose", True),
}


def defaults() -> dict:
    """translate_main's keywords as the Typer command passes them when no flag is given."""
    output = plain_fields.OUTPUT
    kwargs: dict = {keyword: None for keyword, _ in _VALUES.values()}
    kwargs.update(
        fmt=output["format"]["default"],
        input_format=output["input_format"]["default"],
        engine=output["engine"]["default"],
        split_sentences=True,
        skip_bad_lines=False,
        verbose=False,
        shortlist=None,
        alignments=False,
        plot_attention=None,
    )
    return kwargs


def translate_call(args: list[str]) -> Optional[dict]:
    """translate_main's keywords for ``mtkit translate ARGS`` (``args`` after the command's name), or None where
    Typer must parse them."""
    kwargs, seen, paths = defaults(), set(), []
    rest, warnings = renamed.current("translate", list(args))
    while rest:
        arg = rest.pop(0)
        if not arg.startswith("-"):
            paths.append(Path(arg))
            continue
        flag, has_value, value = arg.partition("=")
        if flag in _SWITCHES and not has_value:
            keyword, given = _SWITCHES[flag]
        elif flag in _VALUES:
            if not has_value:
                if not rest:
                    return None
                value = rest.pop(0)
            if not value or value.startswith("-") or (has_value and not flag.startswith("--")):
                return None
            keyword, kind = _VALUES[flag]
            try:
                given = kind(value)
            except ValueError:
                return None
        else:
            return None
        if keyword in seen:
            return None
        seen.add(keyword)
        kwargs[keyword] = given
    if not paths:
        return None
    kwargs["paths"] = paths
    for line in warnings:
        print(line, file=sys.stderr)
    return kwargs
