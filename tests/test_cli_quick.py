"""`mtkit translate` parsed without Typer (mtkit/cli/quick.py) calls translate_main exactly as the Typer command
does, and leaves every argument list it does not fully understand to Typer; the plain fields it and the decoding
options start from are the schema's (mtkit/inference/plain_fields.py)."""

from __future__ import annotations

import math

import pytest

from mtkit.cli import typer_app
from mtkit.cli.quick import _SWITCHES, _VALUES, translate_call
from mtkit.config import DecodingConfig
from mtkit.config import plain as plain_module
from mtkit.decoding import algorithms
from mtkit.flags import OutputOptions
from mtkit.inference import plain_fields
from mtkit.inference.options import accepts

# one value each flag converts (and Typer converts the same way)
_EXAMPLES = {int: "3", float: "0.75", str: "float32"}


def typer_kwargs(monkeypatch, args: list[str]) -> dict:
    """The keywords the Typer command passes translate_main for ``mtkit translate ARGS``."""
    seen = {}
    monkeypatch.setattr("mtkit.inference.translate.translate_main", lambda **kwargs: seen.update(kwargs))
    typer_app()(args=["translate", *args], prog_name="mtkit", standalone_mode=False)
    return seen


def argument_lists() -> list[list[str]]:
    lists = [["run"], ["run", "other"]]
    for flag, (_, kind) in _VALUES.items():
        value = "some/file.txt" if kind.__name__ in ("Path", "PosixPath", "WindowsPath") else _EXAMPLES[kind]
        lists.append(["run", flag, value])
        if flag.startswith("--"):
            lists.append([f"{flag}={value}", "run"])
    lists += [["run", flag] for flag in _SWITCHES]
    lists.append(["run", "--sampling", "--top-k", "5"])  # an old spelling (mtkit/cli/renamed.py): --algorithm sampling
    lists.append(["-b", "1", "run", "--threads", "2", "--no-split-sentences", "-i", "in.txt", "-o", "out.txt", "-v"])
    return lists


@pytest.mark.parametrize("args", argument_lists(), ids=" ".join)
def test_the_quick_parser_calls_translate_main_as_typer_does(monkeypatch, args):
    quick = translate_call(args)
    assert quick is not None
    assert quick == typer_kwargs(monkeypatch, args)


@pytest.mark.parametrize(
    "args",
    [
        [],  # no run dir
        ["run", "--help"],
        ["run", "--checkpoint", "x"],  # flags the quick parser leaves to Typer
        ["run", "--alignments"],
        ["run", "-b", "two"],  # values that do not convert
        ["run", "--length-penalty", "high"],
        ["run", "-b", "-1"],  # a value that starts with a dash
        ["run", "-b"],  # a value missing
        ["run", "--beam-size="],
        ["run", "-b=4"],  # click reads "=4" as the value of a short flag
        ["run", "-b", "4", "--beam-size", "5"],  # twice
        ["run", "--verbose=yes"],
        ["run", "--", "-b"],
        ["run", "-vb", "4"],
    ],
    ids=" ".join,
)
def test_what_the_quick_parser_does_not_understand_goes_to_typer(args):
    """(tests/test_cli_usage.py holds the usage errors Typer then words.)"""
    assert translate_call(args) is None


def test_quick_and_typer_give_the_same_error_for_a_missing_run(run_cli, tmp_path):
    missing = tmp_path / "nothing"
    quick = run_cli("translate", missing, "-b", "2")
    slow = run_cli("translate", missing, "-b", "2", "--alignments")  # --alignments: Typer parses it
    assert quick.code == slow.code == 2 and quick.err == slow.err and str(missing) in quick.err


# ----------------------------------------------------------------------------------------- the plain fields
def test_the_plain_fields_are_the_schemas():
    """mtkit/inference/plain_fields.py is what `python -m mtkit.config.plain` writes from the schema today."""
    assert plain_module.main(["--check"]) == 0, "run: python -m mtkit.config.plain"
    registered = algorithms.params()  # the algorithms' own options: fields of the schema made from the registry
    defaults = DecodingConfig().model_dump()
    assert {name: f["default"] for name, f in plain_fields.DECODING.items()} == {
        k: v for k, v in defaults.items() if k not in registered
    }
    assert {k: v for k, v in defaults.items() if k in registered} == {k: p.default for k, (_, p) in registered.items()}


PROBES = [None, True, 0, 1, -1, 2, 0.0, 0.5, 1.0, 1.5, 5, 100, 101, 1000, 1001, math.nan, math.inf, -math.inf, "3"]
PROBES += ["auto", "float32", "int8", "beam_full", "mtkit", "ctranslate2", "text", "jsonl", "torch", "x", ""]


@pytest.mark.parametrize("section, model", [("DECODING", DecodingConfig), ("OUTPUT", OutputOptions)])
def test_a_value_the_plain_fields_accept_the_schema_accepts(section, model):
    """The plain check can only be stricter than pydantic: what it accepts, the schema accepts (what it refuses
    goes to pydantic, which decides and words the error). Each field's default and some values in range pass."""
    fields = getattr(plain_fields, section)
    accepted = 0
    for name in fields:
        for value in PROBES:
            if name == "algorithm":  # any name: Options.check holds it to the registry (algorithms.get) first
                continue
            if accepts(fields, {name: value}):
                accepted += 1
                model.model_validate({name: value})  # raises if the plain check were more lenient
        assert accepts(fields, {name: fields[name]["default"]})
    assert accepted > len(fields)
    assert not accepts(fields, {"no_such_option": 1})
