"""Usage errors through the installed ``mtkit`` console script: a short message, exit code 2, never a traceback.

Each case runs the script a user runs (the one ``pip install`` wrote beside this interpreter) in a subprocess,
so the test covers the Typer and click versions the lock file installs, not only ``mtkit.cli.main``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SUBCOMMANDS = ["prepare", "train", "translate", "score", "average", "plot", "export", "serve"]


def _script() -> str:
    beside = Path(sys.executable).with_name("mtkit")
    found = str(beside) if beside.exists() else shutil.which("mtkit")
    assert found, "the mtkit console script is not installed (pip install -e .)"
    return found


def _run(*args: str, stdin: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1"}
    return subprocess.run([_script(), *args], input=stdin, capture_output=True, text=True, env=env, timeout=120)


def _assert_usage_error(result: subprocess.CompletedProcess, *expected: str) -> None:
    err = result.stderr
    assert result.returncode == 2, (result.returncode, err)
    assert "Traceback" not in err and 'File "' not in err, err
    assert len(err.strip().splitlines()) <= 8, err  # a short usage message, not a dump
    assert result.stdout == "", result.stdout
    for word in expected:
        assert word in err, (word, err)


def test_unknown_command():
    _assert_usage_error(_run("bogus"), "No such command", "bogus")


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_unknown_option_on_each_subcommand(command):
    _assert_usage_error(_run(command, "x", "--bogus-option"), "No such option", "--bogus-option", f"mtkit {command}")


@pytest.mark.parametrize("command", ["prepare", "translate", "average", "plot", "export"])
def test_missing_argument(command):
    _assert_usage_error(_run(command), "Missing", f"mtkit {command}")


def test_score_without_a_reference_says_which_metric_needs_one():
    # the reference is optional since CometKiwi scores without one: its absence is the metric's error
    _assert_usage_error(_run("score"), "bleu needs a reference file", "cometkiwi")


@pytest.mark.parametrize(
    "args, option",
    [
        (["translate", "runs/x", "--beam-size", "abc"], "--beam-size"),
        (["translate", "runs/x", "--length-penalty", "high"], "--length-penalty"),
        (["train", "config.yaml", "--gpus", "two"], "--gpus"),
        (["average", "runs/x", "--last", "five"], "--last"),
        (["score", "ref", "-i", "a", "-i", "b", "--paired-bs", "--paired-bs-n", "many"], "--paired-bs-n"),
    ],
)
def test_bad_value_for_a_typed_option(args, option):
    _assert_usage_error(_run(*args), "Invalid value", option)


def test_score_short_option_that_does_not_exist():
    _assert_usage_error(_run("score", "-r", "ref"), "No such option", "-r")


def test_export_without_its_required_option(tmp_path):
    _assert_usage_error(_run("export", str(tmp_path)), "Missing option", "--output")


@pytest.mark.parametrize(
    "args, expected",
    [
        (["export", "runs/x", "--out"], ["--output", "requires an argument"]),  # an old spelling without its value
        (["import-hf", "hf", "-o", "runs/x", "--src-lang"], ["--source", "requires an argument"]),
        (["translate", "runs/x", "--sampling", "--top-k", "many"], ["Invalid value", "--top-k"]),
    ],
)
def test_an_old_spelling_in_bad_usage_warns_once_then_the_usage_error(args, expected):
    result = _run(*args)
    _assert_usage_error(result, *expected)
    old = next(a for a in args if a in ("--out", "--src-lang", "--sampling"))
    assert result.stderr.startswith(f"mtkit: warning: {old} is deprecated; use --"), result.stderr
    assert result.stderr.count("warning") == 1, result.stderr


def test_a_flag_another_command_renamed_is_unknown_here():
    _assert_usage_error(_run("translate", "runs/x", "--out", "x"), "No such option", "--out")
    _assert_usage_error(_run("average", "runs/x", "--src-lang", "en"), "No such option", "--src-lang")


def test_help_and_version_exit_zero():
    for args in (["--help"], ["translate", "--help"], ["--version"]):
        result = _run(*args)
        assert result.returncode == 0, (args, result.stderr)
        assert result.stdout.strip(), args


def test_a_mtkit_error_is_one_line_with_exit_code_2(tmp_path):
    result = _run("translate", str(tmp_path / "no-such-run"), stdin="A man.\n")
    assert result.returncode == 2
    assert result.stderr.startswith("mtkit: error: ") and result.stderr.count("\n") == 1, result.stderr


def test_score_paired_test_with_one_system_through_the_script(tmp_path):
    ref = tmp_path / "ref.de"
    ref.write_text("Ein Hund .\n", encoding="utf-8")
    result = _run("score", str(ref), "-i", str(ref), "--paired-bs")
    _assert_usage_error(result, "--paired-bs compares systems")
    assert len(result.stderr.strip().splitlines()) == 1
