"""One vocabulary on the command line: every list of choices --help gives is what is registered (the decoding
algorithms with a plugin's among them, engines, formats, metrics...); a renamed flag's old spelling works as the
new one with a one-line warning (mtkit/cli/renamed.py); docs/cli.md has a row for every option of every command."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
import typer.main

from mtkit.cli import typer_app
from mtkit.cli.renamed import RENAMED
from mtkit.decoding import algorithms
from mtkit.inference import plain_fields

TESTS = Path(__file__).resolve().parent
DOCS = TESTS.parent / "docs" / "cli.md"


def commands() -> dict:
    """Each command by name, and the group itself as "mtkit"."""
    group = typer.main.get_command(typer_app())
    return {"mtkit": group, **group.commands}


def param(command: str, name: str):
    [found] = [p for p in commands()[command].params if p.name == name]
    return found


def lists(text: str, names) -> bool:
    """``text`` lists exactly ``names``, in order, as help lists choices: ``a, b (a note) or c``."""
    names = [str(n) for n in names]
    note = r"(?: \([^()]*\))?"
    joints = [", "] * (len(names) - 2) + [" or "] if len(names) > 1 else []
    pattern = "".join(re.escape(n) + note + joint for n, joint in zip(names, [*joints, ""]))
    return re.search(r"(?<!, )(?<![\w.-])" + pattern + r"(?!,? (?:or )?\w)(?![\w-])", text) is not None


def test_lists_reads_a_list_of_choices():
    assert lists("beam, greedy or mbr; default", ["beam", "greedy", "mbr"])
    assert lists("first (OpenNMT-py), beam_full (fairseq) or exact.", ["first", "beam_full", "exact"])
    assert not lists("beam, greedy or mbr", ["beam", "greedy"])
    assert not lists("x, beam, greedy or mbr", ["beam", "greedy", "mbr"])
    assert not lists("beam, greedy, sampling or mbr", ["beam", "greedy", "mbr"])


def choice_lists() -> list[tuple[str, str, tuple]]:
    from mtkit.data.selection import SELECTIONS
    from mtkit.documents.formats import FORMATS
    from mtkit.interop.ct2_export import QUANTIZATIONS
    from mtkit.scoring.score import METRICS

    engines = plain_fields.OUTPUT["engine"]["choices"]
    cases = [
        ("translate", "fmt", plain_fields.OUTPUT["format"]["choices"]),
        ("translate", "input_format", plain_fields.OUTPUT["input_format"]["choices"]),
        ("translate", "stopping", plain_fields.DECODING["stopping"]["choices"]),
        ("translate", "search", plain_fields.DECODING["search"]["choices"]),
        ("translate-file", "fmt", tuple(FORMATS)),
        ("translate-file", "source", tuple(e for _, endings in FORMATS.values() for e in endings)),
        ("export", "fmt", plain_fields.OUTPUT["export_format"]["choices"]),
        ("export", "quantization", QUANTIZATIONS),
        ("score", "metrics", METRICS),
        ("distill", "select", SELECTIONS),
    ]
    for command in ("translate", "translate-file", "serve"):
        cases.append((command, "engine", engines))
    for command in ("distill", "backtranslate"):
        cases.append((command, "engine", ("auto", *engines)))
    for command in ("translate", "translate-file", "calibrate", "serve", "distill", "backtranslate"):
        cases.append((command, "device", plain_fields.DECODING["device"]["choices"]))
    for command in ("translate", "translate-file", "serve", "distill", "backtranslate"):
        cases.append((command, "dtype", plain_fields.DECODING["dtype"]["choices"]))
        cases.append((command, "dtype", QUANTIZATIONS))  # --engine ctranslate2's compute types
    return cases


@pytest.mark.parametrize("command, name, names", choice_lists(), ids=lambda x: x if isinstance(x, str) else None)
def test_each_list_of_choices_in_help_is_what_is_registered(command, name, names):
    assert lists(param(command, name).help, names), (command, name, param(command, name).help)


def test_the_engines_auto_picks_among_are_the_teachers():
    from mtkit.inference.teacher import ENGINES

    assert ENGINES == ("auto", *plain_fields.OUTPUT["engine"]["choices"])


def test_the_metrics_the_cli_lists_are_the_scorers():
    from mtkit.cli.translating import METRICS as listed
    from mtkit.scoring.score import METRICS

    assert listed == METRICS


def test_every_algorithm_list_is_the_registry_with_a_plugins():
    """The toy algorithm registered before the command line is built (as tests/test_algorithms.py does): each
    --algorithm lists the registry, the toy last, in a process of its own."""
    code = (
        "import json, toy_algorithm, typer.main; from mtkit.cli import typer_app; "
        "from mtkit.decoding import algorithms; group = typer.main.get_command(typer_app()); "
        "print(json.dumps([list(algorithms.REGISTRY), "
        "{n: {p.name: p.help for p in c.params} for n, c in group.commands.items()}]))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    names, helps = json.loads(done.stdout)
    assert names[-1] == "shortest" and {"beam", "greedy", "sampling", "mbr"} <= set(names)
    for command in ("translate", "serve", "backtranslate"):
        assert lists(helps[command]["algorithm"], names), helps[command]["algorithm"]
        assert "shortest_width" in helps[command]


def test_building_the_command_line_imports_nothing_heavy():
    code = (
        "import sys; from mtkit.cli import typer_app; typer_app(); "
        "heavy = [m for m in ('torch', 'sacrebleu', 'ctranslate2', 'numpy', 'rich') if m in sys.modules]; "
        "assert not heavy, heavy"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


# ---------------------------------------------------------------------------------------------- old spellings
def renames() -> list[tuple[str, str, tuple]]:
    return [(command, old, new) for command, table in RENAMED.items() for old, new in table.items()]


def base_args(command: str, skip: str) -> list[str]:
    """A value for each required argument and option of ``command`` but ``skip`` (a flag)."""
    args = []
    for p in commands()[command].params:
        if p.required and p.param_type_name == "argument":
            args.append("x")
        elif p.required and skip not in p.opts:
            args += [p.opts[0], "x"]
    return args


@pytest.mark.parametrize("command, old, new", renames(), ids=lambda x: x if isinstance(x, str) else None)
def test_an_old_spelling_works_as_the_new_with_a_warning(command, old, new, capsys):
    cmd = commands()[command]
    value = [] if len(new) > 1 else ["v"]
    base = base_args(command, new[0])
    capsys.readouterr()
    given = cmd.make_context(command, [*base, old, *value]).params
    assert capsys.readouterr().err == f"mtkit: warning: {old} is deprecated; use {' '.join(new)}\n"
    assert given == cmd.make_context(command, [*base, *new, *value]).params
    assert capsys.readouterr().err == ""
    if len(new) == 1:  # --out=v too
        assert cmd.make_context(command, [*base, f"{old}=v"]).params == given
    assert not any(old in p.opts for p in cmd.params)  # not in --help


def test_old_spellings_are_replaced_up_to_a_double_dash():
    from mtkit.cli.renamed import current

    assert current("export", ["run", "--out=a", "-o", "b", "--out", "c", "--", "--out"]) == (
        ["run", "--output=a", "-o", "b", "--output", "c", "--", "--out"],
        ["mtkit: warning: --out is deprecated; use --output"],
    )
    assert current("translate", ["run", "--sampling", "--out", "x"]) == (
        ["run", "--algorithm", "sampling", "--out", "x"],
        ["mtkit: warning: --sampling is deprecated; use --algorithm sampling"],
    )
    assert current("translate", ["--sampling=yes"]) == (["--sampling=yes"], [])  # a switch takes no value


def test_every_old_spelling_names_an_option_of_its_command():
    for command, old, new in renames():
        assert any(new[0] in p.opts for p in commands()[command].params), (command, old, new)


@pytest.fixture
def translate_calls(monkeypatch) -> list:
    calls = []
    monkeypatch.setattr("mtkit.inference.translate.translate_main", lambda **kwargs: calls.append(kwargs))
    return calls


@pytest.mark.parametrize("typer_too", [[], ["--alignments"]], ids=["quick", "typer"])
def test_translate_sampling_is_the_sampling_algorithm(run_cli, translate_calls, typer_too):
    """The quick parser and Typer read --sampling alike: --algorithm sampling, one warning."""
    done = run_cli("translate", "run", "--sampling", "--top-p", "0.9", *typer_too)
    assert done.code == 0 and done.err == "mtkit: warning: --sampling is deprecated; use --algorithm sampling\n"
    new = run_cli("translate", "run", "--algorithm", "sampling", "--top-p", "0.9", *typer_too)
    assert new.code == 0 and new.err == ""
    assert translate_calls[0] == translate_calls[1]
    assert translate_calls[0]["algorithm"] == "sampling" and "sampling" not in translate_calls[0]


def test_import_hf_src_lang_and_out_still_work(run_cli, monkeypatch):
    calls = []
    fake = types.SimpleNamespace(import_main=lambda *args, **kwargs: calls.append((args, kwargs)))
    monkeypatch.setitem(sys.modules, "mtkit.interop.marian_import", fake)
    done = run_cli("import-hf", "hf", "--out", "run", "--src-lang", "en", "--tgt-lang", "de")
    assert done.code == 0, done.err
    assert done.err.splitlines() == [
        "mtkit: warning: --out is deprecated; use --output",
        "mtkit: warning: --src-lang is deprecated; use --source",
        "mtkit: warning: --tgt-lang is deprecated; use --target",
    ]
    assert run_cli("import-hf", "hf", "-o", "run", "--source", "en", "--target", "de").err == ""
    assert calls[0] == calls[1] == ((Path("hf"), Path("run")), dict(src_lang="en", tgt_lang="de", force=False))


def test_export_writes_to_output_as_average_does(run_cli, monkeypatch):
    calls = []
    monkeypatch.setattr("mtkit.interop.ct2_export.export_main", lambda **kwargs: calls.append(kwargs))
    done = run_cli("export", "run", "--out", "ct2")
    assert done.code == 0 and done.err == "mtkit: warning: --out is deprecated; use --output\n"
    for flag in ("--output", "-o"):
        assert run_cli("export", "run", flag, "ct2").err == ""
    assert calls[0] == calls[1] == calls[2] and calls[0]["out"] == Path("ct2")
    assert [p for p in commands()["average"].params if p.name == "output"][0].opts == ["--output", "-o"]


# ---------------------------------------------------------------------------------------------- docs/cli.md
def rows() -> list[tuple[set, set]]:
    """docs/cli.md's rows of options: (the flags of the first cell, the words of the second)."""
    found = []
    for line in DOCS.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `-") and len(cells) == 6:
            found.append((set(re.findall(r"`(-[^`]+)`", cells[0])), set(re.findall(r"[a-z][a-z-]*", cells[1]))))
    return found


def test_docs_cli_md_has_a_row_for_every_option_of_every_command():
    """Each option mtkit declares (a plugin's algorithm's options aside: they are its own to document)."""
    table, missing = rows(), []
    assert len(table) > 40
    own = {a.name for a in algorithms.REGISTRY.values() if a.torch.startswith("mtkit.")}
    for name, command in commands().items():
        for p in command.params:
            owner = re.match(r"--algorithm (\S+):", p.help or "")
            if p.param_type_name != "option" or p.hidden or p.name == "help" or (owner and owner[1] not in own):
                continue
            flags = {*p.opts, *p.secondary_opts}
            if not any(flags <= row_flags and name in words for row_flags, words in table):
                missing.append(f"{name} {'/'.join(sorted(flags))}")
    assert not missing, f"docs/cli.md lacks a row for: {', '.join(missing)}"


def test_docs_cli_md_names_no_option_a_command_lacks():
    every = commands()
    for row_flags, words in rows():
        for name in words & set(every):
            known = {o for p in every[name].params for o in (*p.opts, *p.secondary_opts)}
            assert row_flags & known, (name, row_flags)


def test_docs_cli_md_gives_every_old_spelling():
    """Its table of old spellings: a row naming the old one, what it stands for and the command."""
    table = [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in DOCS.read_text(encoding="utf-8").splitlines()
        if line.startswith("| `-")
    ]
    for command, old, new in renames():
        assert any(
            len(cells) == 3
            and f"`{old}`" in cells[0]
            and " ".join(new) in cells[1]
            and command in re.findall(r"[a-z][a-z-]*", cells[2])
            for cells in table
        ), (command, old)
