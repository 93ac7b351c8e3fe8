"""A source line with its decoding instructions (``Segment``), and how the command line, the Python API and the server
read one: a str, a dict / JSON object ``{"text", "prefix", "constraints", "avoid"}``, or a ``Segment``.

- ``prefix``: the output starts with this text; the model writes what follows (see ``docs/decoding.md``).
- ``constraints``: phrases the output must contain (beam search, torch engine).
- ``avoid``: phrases the output must not contain (after the prefix).

This module checks shapes only (types, keys, empty phrases); what depends on the model (subword lengths, a
constraint holding an avoided phrase, what the engine can do) is checked by ``engine.Engine.guidance``, which turns
a segment into ``Guidance``, the same instructions as target subword ids (``constraints.py`` follows them).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from mtkit.errors import MtkitError

KEYS = ("text", "prefix", "constraints", "avoid", "target")


@dataclass(frozen=True)
class Segment:
    """A source line and its instructions: ``Segment("A dog runs.", prefix="Ein", constraints=("Hund",))``."""

    text: str
    prefix: Optional[str] = None
    constraints: tuple[str, ...] = ()
    avoid: tuple[str, ...] = ()
    target: Optional[str] = None  # the target language, for a multilingual model (None: the call's)

    @property
    def plain(self) -> bool:
        """No instructions: translated as a bare line is."""
        return not (self.prefix or self.constraints or self.avoid)


def _phrases(value: Any, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise MtkitError(f"{key!r} must be a list of strings, not {_kind(value)}")
    for i, phrase in enumerate(value):
        if not isinstance(phrase, str):
            raise MtkitError(f"{key!r} item {i + 1} must be a string, not {_kind(phrase)}")
        if not phrase.strip():
            raise MtkitError(f"{key!r} item {i + 1} is empty; give a word or phrase")
    return tuple(value)


def _kind(value: Any) -> str:
    return {type(None): "null", bool: "a boolean", int: "a number", float: "a number", str: "a string"}.get(
        type(value), "a list" if isinstance(value, (list, tuple)) else "an object"
    )


def segment_from(item: Any) -> Segment:
    """A ``Segment`` from a str, a dict with the keys of ``KEYS`` (``text`` required) or a ``Segment``; a bad shape
    raises ``MtkitError`` saying what is wrong (the caller says where)."""
    if isinstance(item, Segment):
        fields = {"text": item.text, "prefix": item.prefix, "constraints": item.constraints, "avoid": item.avoid}
        item = {**fields, "target": item.target}
    if isinstance(item, str):
        return Segment(item)
    if not isinstance(item, dict):
        raise MtkitError(f"expected a string or an object with a 'text' key, not {_kind(item)}")
    unknown = [key for key in item if key not in KEYS]
    if unknown:
        raise MtkitError(f"unknown key {unknown[0]!r}; the keys are {', '.join(KEYS)}")
    if "text" not in item:
        raise MtkitError("missing key 'text' (the line to translate)")
    if not isinstance(item["text"], str):
        raise MtkitError(f"'text' must be a string, not {_kind(item['text'])}")
    prefix, target = item.get("prefix"), item.get("target")
    if prefix is not None and not isinstance(prefix, str):
        raise MtkitError(f"'prefix' must be a string, not {_kind(prefix)}")
    if target is not None and not isinstance(target, str):
        raise MtkitError(f"'target' must be a language code (a string), not {_kind(target)}")
    return Segment(
        item["text"],
        prefix or None,
        _phrases(item.get("constraints"), "constraints"),
        _phrases(item.get("avoid"), "avoid"),
        target or None,
    )


def parse_jsonl(line: str) -> Segment:
    """One line of ``mtkit translate --input-format jsonl``."""
    try:
        item = json.loads(line)
    except (ValueError, RecursionError) as err:
        raise MtkitError(f"not valid JSON ({getattr(err, 'msg', 'nested too deeply')})") from None
    if not isinstance(item, dict):
        raise MtkitError(f"expected a JSON object with a 'text' key, not {_kind(item)}")
    return segment_from(item)


def with_parallel(
    items: Sequence[Any],
    prefix: Optional[Sequence[Optional[str]]],
    constraints: Optional[Sequence[Optional[Sequence[str]]]],
    avoid: Optional[Sequence[Optional[Sequence[str]]]],
    label: str = "line",
) -> list[Segment]:
    """Segments from ``items`` and parallel per-item lists (one entry per item; None: nothing for it). An item that
    carries a field and gets it from a list too is refused. Errors name the item: ``label`` and its number."""
    lists = {"prefix": prefix, "constraints": constraints, "avoid": avoid}
    for key, values in lists.items():
        if values is not None:
            if isinstance(values, str) or not isinstance(values, Sequence):
                raise MtkitError(f"{key} must be a list with one entry per {label}, not {_kind(values)}")
            if len(values) != len(items):
                raise MtkitError(f"{key} has {len(values)} entries for {len(items)} {label}s; give one per {label}")
    out = []
    for i, item in enumerate(items):
        try:
            segment = segment_from(item)
            extra = {key: values[i] for key, values in lists.items() if values is not None and values[i] is not None}
            if extra:
                fields = {"text": segment.text, "prefix": segment.prefix}
                fields.update(constraints=segment.constraints, avoid=segment.avoid, target=segment.target)
                for key, value in extra.items():
                    if fields[key]:
                        raise MtkitError(f"{key} given twice, in the {label} and in the {key} list")
                    fields[key] = list(value) if isinstance(value, tuple) else value
                segment = segment_from(fields)
        except MtkitError as err:
            raise MtkitError(f"{label} {i + 1}: {err}") from None
        out.append(segment)
    return out
