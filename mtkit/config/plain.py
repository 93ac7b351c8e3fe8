"""Write the decoding section's fields, and those of the output flags, as plain data.

``mtkit translate`` of an export dir starts in about the time CTranslate2 takes to import only if it imports
neither pydantic (0.1 s before the first model class exists) nor Typer. The schema stays the one source of the
defaults and ranges; this module writes them into ``mtkit/inference/plain_fields.py``, which
``mtkit.inference.options`` reads to accept the common values at once. A value that the plain fields do not accept
goes to pydantic, which decides and words the error, so the plain fields can only ever be stricter.

    python -m mtkit.config.plain           # rewrite mtkit/inference/plain_fields.py after a schema change
    python -m mtkit.config.plain --check   # exit 1 if it is out of date (a test runs this)
"""

from __future__ import annotations

import json
import sys
import typing
from pathlib import Path

import annotated_types
from pydantic import BaseModel

from mtkit.config.schema import DecodingConfig
from mtkit.decoding import algorithms
from mtkit.flags import OutputOptions

TARGET = Path(__file__).resolve().parent.parent / "inference" / "plain_fields.py"
SECTIONS = {"DECODING": DecodingConfig, "OUTPUT": OutputOptions}
_BOUNDS = {annotated_types.Ge: "ge", annotated_types.Gt: "gt", annotated_types.Le: "le", annotated_types.Lt: "lt"}


def plain_field(name: str, info) -> dict:
    """One field as {"default", "type" ("int", "float", "str" or "choice"), "choices", "optional" (None
    allowed; only when true), and its bounds "ge", "gt", "le", "lt"}."""
    annotation, optional = info.annotation, False
    if typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"{name}: a union of several types has no plain form")
        annotation, optional = args[0], True
    field: dict = {"default": info.default}
    if typing.get_origin(annotation) is typing.Literal:
        field["type"] = "choice"
        field["choices"] = tuple(typing.get_args(annotation))
    elif annotation in (int, float, str):
        field["type"] = annotation.__name__
    else:
        raise TypeError(f"{name}: {annotation} has no plain form")
    if optional:
        field["optional"] = True
    for item in info.metadata:
        if type(item) not in _BOUNDS:
            raise TypeError(f"{name}: constraint {item!r} has no plain form")
        key = _BOUNDS[type(item)]
        field[key] = getattr(item, key)
    return field


def plain_fields(model: type[BaseModel]) -> dict[str, dict]:
    """The plain form of each field of ``model`` but the decoding algorithms' own options (their registry,
    ``mtkit.decoding.algorithms``, is plain data already)."""
    own = algorithms.params()
    return {name: plain_field(name, info) for name, info in model.model_fields.items() if name not in own}


def _literal(value) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, tuple):
        return "(" + ", ".join(_literal(v) for v in value) + ")"
    return repr(value)


def render() -> str:
    """The text of ``plain_fields.py`` (formatted as ``ruff format`` leaves it)."""
    out = [
        '"""The fields of the decoding section and of the output flags as plain data: written by',
        "`python -m mtkit.config.plain` from the schema (mtkit/config/schema.py, mtkit/flags.py); do not edit.",
        '"""',
        "",
    ]
    for section, model in SECTIONS.items():
        out.append(f"{section} = {{")
        for name, field in plain_fields(model).items():
            items = [f"{_literal(k)}: {_literal(v)}" for k, v in field.items()]
            line = f"    {_literal(name)}: {{{', '.join(items)}}},"
            if len(line) > 120:  # as ruff format breaks it: one item a line
                line = "\n".join([f"    {_literal(name)}: {{", *(f"        {item}," for item in items), "    },"])
            out.append(line)
        out.append("}")
    return "\n".join(out) + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not TARGET.exists() or TARGET.read_text(encoding="utf-8") != text:
            print(f"{TARGET.name} is out of date: run python -m mtkit.config.plain", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
