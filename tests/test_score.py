"""`mtkit score` and corpus_scores: identical to the sacrebleu command, options checked, one-line errors."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import toy_pairs, write_lines
from mtkit.errors import MtkitError
from mtkit.scoring.score import corpus_scores

REFS = [t for _, t in toy_pairs(40, seed=7)]


def noisy(lines: list[str]) -> list[str]:
    """Hypotheses that overlap the references partly (drop, swap and replace words), with odd spacing."""
    out = []
    for i, line in enumerate(lines):
        words = line.split()
        if i % 3 == 0:
            words = words[1:]
        if i % 4 == 1 and len(words) > 2:
            words[0], words[1] = words[1], words[0]
        if i % 5 == 2:
            words = [w.lower() for w in words] + ["Hund"]
        out.append(" ".join(words) + ("  " if i % 2 else ""))
    return out


@pytest.fixture
def files(tmp_path):
    ref = write_lines(tmp_path / "ref.de", REFS)
    ref2 = write_lines(tmp_path / "ref2.de", [r.replace("ein", "der") for r in REFS])
    hyp = write_lines(tmp_path / "hyp.de", noisy(REFS))
    return ref, ref2, hyp


def sacrebleu_cli(*args: str, env: dict | None = None) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "sacrebleu", *map(str, args)],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )
    return result.stdout


@pytest.mark.parametrize("metric", ["bleu", "chrf", "ter"])
def test_printed_score_equals_the_sacrebleu_command(files, run_cli, metric):
    ref, _, hyp = files
    expected = json.loads(sacrebleu_cli(ref, "-i", hyp, "-m", metric))
    result = run_cli("score", ref, "-i", hyp, "-m", metric, "--json")
    assert result.code == 0, result.err
    ours = json.loads(result.out)[metric]
    assert ours["score"] == expected["score"]
    assert ours["signature"] == expected["signature"]
    assert 0 < ours["score"] < 100  # a real, non-trivial comparison
    # the formatted line is sacreBLEU's own text output
    assert ours["text"] == sacrebleu_cli(ref, "-i", hyp, "-m", metric, "-f", "text").strip()
    # and the table shows the same digits
    table = run_cli("score", ref, "-i", hyp, "-m", metric)
    assert f" {expected['score']:.1f} " in table.out


@pytest.mark.parametrize("width", ["0", "3"])
def test_width_prints_sacrebleus_decimals(files, run_cli, width):
    ref, _, hyp = files
    expected = json.loads(sacrebleu_cli(ref, "-i", hyp, "-m", "chrf", "-w", width))
    result = run_cli("score", ref, "-i", hyp, "-m", "chrf", "-w", width, "--json")
    assert result.code == 0, result.err
    ours = json.loads(result.out)["chrf"]
    assert ours["score"] == expected["score"]
    # exactly `width` decimals: the score has no more, and one fewer would change it
    assert ours["score"] == round(ours["score"], int(width)) != round(ours["score"], int(width) - 1)
    assert ours["text"] == sacrebleu_cli(ref, "-i", hyp, "-m", "chrf", "-w", width, "-f", "text").strip()


def test_two_references_and_stdin(files, run_cli):
    ref, ref2, hyp = files
    expected = json.loads(sacrebleu_cli(ref, ref2, "-i", hyp, "-m", "bleu"))
    result = run_cli("score", ref, ref2, "-m", "bleu", "--json", stdin=hyp.read_text(encoding="utf-8"))
    assert result.code == 0, result.err
    bleu = json.loads(result.out)["bleu"]
    assert bleu["score"] == expected["score"] and "nrefs:2" in bleu["signature"]


def test_options_reach_sacrebleu(files, run_cli):
    ref, _, hyp = files
    expected = json.loads(sacrebleu_cli(ref, "-i", hyp, "-m", "bleu", "-lc", "--tokenize", "char"))
    result = run_cli("score", ref, "-i", hyp, "-m", "bleu", "-lc", "--tokenize", "char", "--json")
    bleu = json.loads(result.out)["bleu"]
    assert bleu["score"] == expected["score"]
    assert "case:lc" in bleu["signature"] and "tok:char" in bleu["signature"]


def test_corpus_scores_api():
    hyps = noisy(REFS)
    scores = corpus_scores(REFS, [REFS])
    assert list(scores) == ["bleu", "chrf", "ter"]
    assert scores["bleu"]["score"] == pytest.approx(100.0) and scores["ter"]["score"] == pytest.approx(0.0)
    partial = corpus_scores(hyps, [REFS], metrics=["bleu"])
    assert list(partial) == ["bleu"] and 0 < partial["bleu"]["score"] < 100
    assert partial["bleu"]["text"].startswith("BLEU|nrefs:1|")
    lower = corpus_scores(hyps, [REFS], metrics=["bleu"], lowercase=True)
    assert lower["bleu"]["score"] > partial["bleu"]["score"]  # some hypotheses were lower-cased
    with pytest.raises(MtkitError, match="reference stream 1 has 39"):
        corpus_scores(hyps, [REFS[:-1]])


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["-m", "blue"], "unknown metric 'blue'; choose from bleu, chrf, ter"),
        (["--tokenize", "moses"], "unknown tokenizer 'moses'"),
        (["-w", "11"], "--width must be between 0 and 10 decimals, got 11"),
        (["--width", "-1"], "--width must be between 0 and 10 decimals, got -1"),
    ],
)
def test_bad_options_are_rejected_not_filtered(files, run_cli, args, fragment):
    ref, _, hyp = files
    result = run_cli("score", ref, "-i", hyp, *args)
    assert result.code == 2
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mtkit: error: ") and fragment in lines[0]


def test_line_count_mismatch_is_one_line(tmp_path, files, run_cli):
    ref, _, hyp = files
    short = write_lines(tmp_path / "short.de", REFS[:35])
    result = run_cli("score", short, "-i", hyp)
    assert result.code == 2
    lines = result.err.strip().splitlines()
    assert len(lines) == 1
    assert str(hyp) in lines[0] and "40 lines" in lines[0] and str(short) in lines[0] and "35" in lines[0]


def test_missing_and_invalid_reference_files(tmp_path, files, run_cli):
    _, _, hyp = files
    result = run_cli("score", tmp_path / "nope.de", "-i", hyp)
    assert result.code == 2 and "nope.de: reference file not found" in result.err
    bad = tmp_path / "bad.de"
    bad.write_bytes(b"ok\nbad \xff line\n")
    result = run_cli("score", bad, "-i", hyp)
    assert result.code == 2 and f"{bad}:2: invalid UTF-8" in result.err


def test_score_never_imports_torch(files):
    ref, _, hyp = files
    code = (
        "import sys; from mtkit.cli import main; rc = main(['score', sys.argv[1], '-i', sys.argv[2]]); "
        "assert rc == 0, rc; assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code, str(ref), str(hyp)], check=True, capture_output=True, timeout=60)


# ------------------------------------------------------------------------- paired significance tests
VAL_DE = Path(__file__).resolve().parent.parent / "data" / "multi30k" / "val.de.gz"
SACREBLEU_NAMES = {"bleu": "BLEU", "chrf": "chrF2", "ter": "TER"}
SACREBLEU_METRICS = ("-m", "bleu", "chrf", "ter")  # its -m takes several names


@pytest.fixture(scope="module")
def paired_dir(tmp_path_factory):
    """200 validation references (ref.de) and three "systems" made from them by different edits."""
    root = tmp_path_factory.mktemp("paired")
    refs = gzip.decompress(VAL_DE.read_bytes()).decode("utf-8").splitlines()[:200]
    write_lines(root / "ref.de", refs)
    write_lines(root / "base.de", [" ".join(r.split()[:-1]) if i % 3 == 0 else r for i, r in enumerate(refs)])
    write_lines(root / "other.de", [" ".join(r.split()[1:]) if i % 2 == 0 else r for i, r in enumerate(refs)])
    write_lines(root / "third.de", [r.lower() if i % 4 == 0 else r for i, r in enumerate(refs)])
    return root


@pytest.fixture
def paired(paired_dir, monkeypatch):
    """Run in the systems' directory (short system names, as in sacreBLEU's output), with a wide console."""
    monkeypatch.chdir(paired_dir)
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("SACREBLEU_SEED", raising=False)
    return paired_dir


def table_numbers(text: str, top: str, bottom: str) -> list[str]:
    """The numbers of a table (between its top and bottom border characters), in reading order."""
    body = text[text.index(top) : text.index(bottom)]
    return re.findall(r"\d+\.\d+", body)


def test_paired_bootstrap_equals_the_sacrebleu_command(paired, run_cli):
    files = ["base.de", "other.de", "third.de"]
    args = ["score", "ref.de", *[a for f in files for a in ("-i", f)], "--paired-bs", "--paired-bs-n", "100"]
    result = run_cli(*args, "--json")
    assert result.code == 0, result.err
    got = json.loads(result.out)
    assert got["test"] == "paired-bs" and got["n"] == 100 and got["seed"] == "12345"
    assert [row["file"] for row in got["systems"]] == files
    assert [row["baseline"] for row in got["systems"]] == [True, False, False]
    # sacrebleu's JSON cannot hold these results (numpy float32), so compare with its table at 4 decimals
    theirs = sacrebleu_cli(
        "ref.de", "-i", *files, *SACREBLEU_METRICS, "--paired-bs", "-pbsn", "100", "-f", "text", "-w", "4", "-nc"
    )
    expected = table_numbers(theirs, "╒", "╛")
    ours = []
    for row in got["systems"]:
        ours += [f"{row[m][k]:.4f}" for m in SACREBLEU_NAMES for k in ("score", "mean", "ci")]
        ours += [f"{row[m]['p_value']:.4f}" for m in SACREBLEU_NAMES if not row["baseline"]]
    assert ours == expected
    assert len(set(ours)) > 20 and any(row["ter"]["p_value"] < 0.05 for row in got["systems"][1:])
    assert all(row[m]["p_value"] is None for row in got["systems"][:1] for m in SACREBLEU_NAMES)
    # the table prints what sacrebleu's table prints (one decimal, p-values with four)
    table = run_cli(*args)
    assert table.code == 0, table.err
    theirs = sacrebleu_cli(
        "ref.de", "-i", *files, *SACREBLEU_METRICS, "--paired-bs", "-pbsn", "100", "-f", "text", "-nc"
    )
    shown = table_numbers(table.out, "┏", "└")
    assert len(shown) == 33 and shown == table_numbers(theirs, "╒", "╛")  # 3 x 3 x (score, mean, ci), 6 p-values
    assert "baseline: base.de" in table.out and got["metrics"]["bleu"]["signature"] in table.out


def test_paired_approximate_randomisation_equals_the_sacrebleu_command(paired, run_cli):
    files = ["base.de", "other.de", "third.de"]
    args = ["score", "ref.de", *[a for f in files for a in ("-i", f)], "--paired-ar", "--paired-ar-n", "200"]
    result = run_cli(*args, "--json")
    assert result.code == 0, result.err
    got = json.loads(result.out)
    assert got["test"] == "paired-ar" and got["n"] == 200 and "ar:200" in got["metrics"]["ter"]["signature"]
    expected = json.loads(sacrebleu_cli("ref.de", "-i", *files, *SACREBLEU_METRICS, "--paired-ar", "-parn", "200"))
    assert expected[0]["system"] == "Baseline: base.de" and len(expected) == 3
    for row, theirs in zip(got["systems"], expected):
        for metric, name in SACREBLEU_NAMES.items():
            assert row[metric] == theirs[name], (row["file"], metric)  # score, mean, ci and p_value, exactly
            assert row[metric]["mean"] is None and row[metric]["ci"] is None
    assert len({row["chrf"]["score"] for row in got["systems"]}) == 3
    table = run_cli(*args)
    assert table.code == 0, table.err
    theirs = sacrebleu_cli(
        "ref.de", "-i", *files, *SACREBLEU_METRICS, "--paired-ar", "-parn", "200", "-f", "text", "-nc"
    )
    shown = table_numbers(table.out, "┏", "└")
    assert len(shown) == 15 and shown == table_numbers(theirs, "╒", "╛")  # 3 x 3 scores, 6 p-values


def test_paired_seed_option_and_environment(paired, run_cli, monkeypatch):
    args = ("score", "ref.de", "-i", "base.de", "-i", "other.de", "--paired-ar", "--paired-ar-n", "200", "--json")
    default = json.loads(run_cli(*args).out)
    seeded = json.loads(run_cli(*args, "--seed", "7").out)
    assert "SACREBLEU_SEED" not in os.environ  # set only while the test runs
    expected = json.loads(
        sacrebleu_cli(
            "ref.de",
            "-i",
            "base.de",
            "other.de",
            *SACREBLEU_METRICS,
            "--paired-ar",
            "-parn",
            "200",
            env={"SACREBLEU_SEED": "7"},
        )
    )
    assert [seeded["systems"][1][m]["p_value"] for m in SACREBLEU_NAMES] == [
        expected[1][n]["p_value"] for n in SACREBLEU_NAMES.values()
    ]
    assert seeded["seed"] == "7" and "seed:7" in seeded["metrics"]["chrf"]["signature"]
    assert [default["systems"][1][m]["p_value"] for m in SACREBLEU_NAMES] != [
        seeded["systems"][1][m]["p_value"] for m in SACREBLEU_NAMES
    ]
    monkeypatch.setenv("SACREBLEU_SEED", "7")
    assert json.loads(run_cli(*args).out) == seeded  # the environment variable, as for sacrebleu
    assert json.loads(run_cli(*args, "--seed", "12345").out) == default  # the option wins over it
    assert os.environ["SACREBLEU_SEED"] == "7"  # and leaves it as it was


def test_paired_stdin_as_a_system_and_metric_choice(paired, run_cli):
    result = run_cli(
        "score",
        "ref.de",
        "-i",
        "base.de",
        "-i",
        "-",
        "--paired-ar",
        "--paired-ar-n",
        "200",
        "-m",
        "ter",
        "--json",
        stdin=(paired / "other.de").read_text(encoding="utf-8"),
    )
    assert result.code == 0, result.err
    got = json.loads(result.out)
    assert list(got["metrics"]) == ["ter"] and got["metrics"]["ter"]["name"] == "TER"
    assert [row["file"] for row in got["systems"]] == ["base.de", "<stdin>"]
    assert list(got["systems"][1]) == ["file", "baseline", "ter"]
    expected = json.loads(
        sacrebleu_cli("ref.de", "-i", "base.de", "other.de", "-m", "ter", "--paired-ar", "-parn", "200")
    )
    assert got["systems"][1]["ter"] == expected[1]["TER"]


def test_paired_json_shape(paired, run_cli):
    result = run_cli(
        "score", "ref.de", "-i", "base.de", "-i", "other.de", "--paired-bs", "--paired-bs-n", "50", "--json"
    )
    lines = result.out.strip().splitlines()
    assert result.code == 0 and len(lines) == 1
    got = json.loads(lines[0])
    assert list(got) == ["test", "n", "seed", "metrics", "systems"]
    assert got["test"] == "paired-bs" and got["n"] == 50 and got["seed"] == "12345"
    assert list(got["metrics"]) == ["bleu", "chrf", "ter"]
    assert [m["name"] for m in got["metrics"].values()] == list(SACREBLEU_NAMES.values())
    assert all(list(m) == ["name", "signature"] and "bs:50" in m["signature"] for m in got["metrics"].values())
    for row in got["systems"]:
        assert list(row) == ["file", "baseline", "bleu", "chrf", "ter"]
        for metric in SACREBLEU_NAMES:
            assert list(row[metric]) == ["score", "mean", "ci", "p_value"]
            values = [row[metric][k] for k in ("score", "mean", "ci")] + [row[metric]["p_value"]] * (
                not row["baseline"]
            )
            assert all(isinstance(v, float) for v in values)


def test_single_hypotheses_from_dash_is_stdin(paired, run_cli):
    text = (paired / "base.de").read_text(encoding="utf-8")
    dash = run_cli("score", "ref.de", "-i", "-", "--json", stdin=text)
    assert dash.code == 0, dash.err
    assert json.loads(dash.out) == json.loads(run_cli("score", "ref.de", "-i", "base.de", "--json").out)


@pytest.mark.parametrize(
    "args, fragment",
    [
        (
            ["ref.de", "-i", "base.de", "--paired-bs"],
            "--paired-bs compares systems: give the baseline and at least one more",
        ),
        (["ref.de", "--paired-ar"], "--paired-ar compares systems"),
        (
            ["ref.de", "-i", "base.de", "-i", "other.de", "--paired-bs", "--paired-ar"],
            "give --paired-bs or --paired-ar, not both",
        ),
        (
            ["ref.de", "-i", "base.de", "-i", "other.de"],
            "2 systems given with -i; compare them with --paired-bs or --paired-ar",
        ),
        (
            ["ref.de", "-i", "base.de", "-i", "other.de", "--paired-bs", "--paired-ar-n", "9"],
            "--paired-ar-n is for --paired-ar",
        ),
        (["ref.de", "-i", "base.de", "-i", "other.de", "--paired-bs-n", "9"], "--paired-bs-n is for --paired-bs"),
        (
            ["ref.de", "-i", "base.de", "-i", "other.de", "--paired-bs", "--paired-bs-n", "0"],
            "--paired-bs-n must be at least 1",
        ),
        (
            ["ref.de", "-i", "base.de", "-i", "other.de", "--paired-ar", "--seed", "abc"],
            "--seed must be a positive integer",
        ),
        (
            ["ref.de", "-i", "base.de", "-i", "other.de", "--paired-ar", "--seed", "0"],
            "--seed must be a positive integer",
        ),
        (["ref.de", "-i", "-", "-i", "base.de", "-i", "-", "--paired-bs"], "stdin (-i -) given twice with -i"),
        (["ref.de", "-i", "base.de", "-i", "other.de", "-i", "base.de", "--paired-bs"], "base.de given twice with -i"),
        (["ref.de", "-i", "base.de", "-i", "nope.de", "--paired-bs"], "nope.de: hypotheses file not found"),
        (["ref.de", "-i", "base.de", "-i", "short.de", "--paired-ar"], "short.de has 150 lines but ref.de has 200"),
        (["empty.de", "-i", "empty.de", "-i", "empty2.de", "--paired-bs"], "empty.de and the hypotheses have no"),
        (["empty.de", "-i", "empty.de"], "empty.de and the hypotheses have no lines; nothing to score"),
    ],
)
def test_paired_bad_input_is_one_line(paired, run_cli, args, fragment):
    write_lines(paired / "short.de", (paired / "other.de").read_text(encoding="utf-8").splitlines()[:150])
    write_lines(paired / "empty.de", [])
    write_lines(paired / "empty2.de", [])
    result = run_cli("score", *args)
    assert result.code == 2, result.err
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mtkit: error: "), result.err
    assert fragment in lines[0] and result.out == ""
