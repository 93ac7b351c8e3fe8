"""`mtkit score` and corpus_scores: identical to the sacrebleu command, options checked, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import toy_pairs, write_lines
from mtkit.errors import MtkitError
from mtkit.score import corpus_scores

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


def sacrebleu_cli(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "sacrebleu", *map(str, args)], check=True, capture_output=True, text=True, timeout=60
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
