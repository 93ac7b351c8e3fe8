"""The benchmark scripts run end to end from a checkout: `scripts/bench_train.py` trains a
tiny model for a few seconds on the toy corpus and scores the shipped test_2016_flickr (data/multi30k), then
reports again with --reuse; `scripts/bench_translate.py` times and scores that run; `scripts/bench_positions.py`
trains a tiny model 3 updates with each position scheme on data prepared once and prints its table. The figures
themselves are not checked (a 3-second model translates badly and timings are never asserted), only that every
line the README quotes is printed with a number and that one hypothesis is written per test sentence.
"""

from __future__ import annotations

import gzip
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import TINY_TRANSFORMER, write_toy_splits

ROOT = Path(__file__).resolve().parent.parent
TEST_EN = ROOT / "data" / "multi30k" / "test_2016_flickr.en.gz"
ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
NUMBER = r"(-?\d+(?:\.\d+)?)"


def run_script(*args, cwd: Path) -> str:
    proc = subprocess.run(
        [sys.executable, *map(str, args)], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def figure(pattern: str, text: str) -> float:
    match = re.search(pattern, text, re.MULTILINE)
    assert match, f"no line matching {pattern!r} in:\n{text}"
    return float(match.group(1))


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    """(config path, run dir, bench_train output) of one 3-second benchmark run on the toy corpus."""
    root = tmp_path_factory.mktemp("bench")
    run_dir = root / "run"
    tree = {
        "data": {"dir": str(root / "data"), "vocab_size": 100, "splits": write_toy_splits(root)},
        "model": {**TINY_TRANSFORMER, "dropout": 0.1},
        "training": {
            "run_dir": str(run_dir),
            "devices": "cpu",
            "batch_tokens": 600,
            "lr": 2e-3,
            "warmup_updates": 4,
            "log_every": 1,
            "validate_every": 1000,
            "keep_last": 2,
            "average_last": 2,
            "save_every": 5,
        },
        "decoding": {"max_len_a": 1.0, "max_len_b": 4, "batch_size": 250},
    }
    config = root / "tiny-bench.yaml"
    config.write_text(yaml.safe_dump(tree, sort_keys=False), encoding="utf-8")
    out = run_script(
        ROOT / "scripts" / "bench_train.py",
        config,
        "--minutes",
        "0.05",
        "--skip-flops",
        "--threads",
        "1",
        "--run-dir",
        run_dir,
        cwd=root,
    )
    return config, run_dir, out


def test_bench_train_prints_every_figure_and_translates_the_whole_test_set(bench_run):
    config, run_dir, out = bench_run
    assert figure(r"^updates\s+" + NUMBER, out) >= 1
    assert figure(r"^target tokens/s\s+" + NUMBER, out) > 0
    assert 0 <= figure(r"^padding fraction\s+" + NUMBER, out) < 1
    assert figure(r"^peak RSS \(train\)\s+" + NUMBER + " MB", out) > 0
    assert figure(r"^wall time train\s+" + NUMBER + " min", out) > 0
    assert 0 <= figure(r"^test BLEU beam 5\s+" + NUMBER, out) <= 100
    assert 0 <= figure(r"^test chrF beam 5\s+" + NUMBER, out) <= 100
    with gzip.open(TEST_EN, "rt", encoding="utf-8") as f:
        sources = f.read().splitlines()
    hyps = (run_dir / "test.beam5.de").read_text(encoding="utf-8").split("\n")
    assert hyps[-1] == "" and len(hyps) - 1 == len(sources) == 1000


def test_bench_train_reuse_reports_on_the_run_without_training_or_inventing_a_memory_figure(bench_run):
    config, run_dir, first = bench_run
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    out = run_script(
        ROOT / "scripts" / "bench_train.py",
        config,
        "--minutes",
        "0.05",
        "--skip-flops",
        "--threads",
        "1",
        "--run-dir",
        run_dir,
        "--reuse",
        cwd=config.parent,
    )
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == checkpoints  # nothing trained
    assert figure(r"^updates\s+" + NUMBER, out) == figure(r"^updates\s+" + NUMBER, first)
    assert figure(r"^test BLEU beam 5\s+" + NUMBER, out) == figure(r"^test BLEU beam 5\s+" + NUMBER, first)
    assert re.search(r"^peak RSS \(train\)\s+not measured", out, re.MULTILINE), out
    assert 0 < figure(r"^training time\s+" + NUMBER + " min", out) <= 0.2  # the trainer's own, from metrics.jsonl


def test_bench_translate_prints_a_row_per_beam(bench_run):
    _, run_dir, _ = bench_run
    out = run_script(
        ROOT / "scripts" / "bench_translate.py",
        run_dir,
        "--beams",
        "5",
        "1",
        "--threads",
        "1",
        "--warmup",
        "2",
        cwd=run_dir.parent,
    )
    rows = [line.split() for line in out.splitlines() if line.startswith("torch ")]
    assert [row[2] for row in rows] == ["5", "1"], out
    for row in rows:
        sentences_per_s, bleu, chrf = float(row[5]), float(row[7]), float(row[8])
        assert sentences_per_s > 0 and 0 <= bleu <= 100 and 0 <= chrf <= 100


def test_bench_positions_prepares_once_and_prints_a_row_per_scheme(tmp_path):
    tree = {
        "data": {"dir": str(tmp_path / "unused"), "vocab_size": 100, "splits": write_toy_splits(tmp_path)},
        "model": TINY_TRANSFORMER,
        "training": {
            "run_dir": str(tmp_path / "unused-run"),
            "devices": "cpu",
            "batch_tokens": 400,
            "warmup_updates": 4,
            "log_every": 1,
            "validate_every": 1000,
            "valid_max_sentences": 4,
        },
        "decoding": {"max_len_a": 1.0, "max_len_b": 4, "batch_size": 100},
    }
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(tree, sort_keys=False), encoding="utf-8")
    args = ["--config", config, "--updates", "3", "--max-target-len", "8", "--workdir", tmp_path / "bench"]
    out = run_script(
        ROOT / "scripts" / "bench_positions.py",
        *args,
        *("--threads", "1", "--beam-size", "2", "--eval-sentences", "20"),
        cwd=tmp_path,
    )
    assert len(re.findall(r"^\$ .* -m mtkit prepare ", out, re.MULTILINE)) == 1, out  # one data dir for all five
    assert len(re.findall(r"^\$ .* -m mtkit train ", out, re.MULTILINE)) == 5, out
    table = out[out.index("`python scripts/bench_positions.py") :]
    assert (tmp_path / "bench" / "table.md").read_text(encoding="utf-8").strip() == table.strip()
    assert "--updates 3" in table.splitlines()[0] and "L = " in table
    header, _, *rows = [line.strip("|").split("|") for line in table.splitlines() if line.startswith("|")]
    counts = [int(re.search(r"\((\d+)\)", cell).group(1)) for cell in header[3:]]
    assert sum(counts[:4]) == 40 and counts[4:] == [10, 6]  # 20 val + 20 test by length; 20 test joined by 2, 3
    assert [row[0].strip() for row in rows] == ["sinusoidal", "learned", "relative", "rope", "alibi"]
    for row in rows:
        assert int(row[1]) == 3
        for cell, n in zip(row[3:], counts):
            if n:
                bleu, chrf = (float(x) for x in cell.split("/"))
                assert 0 <= bleu <= 100 and 0 <= chrf <= 100
            else:
                assert cell.strip() == "-"


def test_bench_constraints_meets_every_constraint_and_prefix(bench_run):
    _, run_dir, _ = bench_run
    out = run_script(
        ROOT / "scripts" / "bench_constraints.py",
        run_dir,
        "--limit",
        "12",
        "--beam",
        "3",
        "--threads",
        "1",
        "--warmup",
        "2",
        cwd=run_dir.parent,
    )
    met, asked = re.search(r"^coverage: (\d+)/(\d+) sentences meet all their constraints", out, re.MULTILINE).groups()
    assert met == asked and int(asked) > 0, out
    assert "not met" not in out
    for name in ("plain", "constrained"):
        assert 0 <= figure(rf"^{name}\s+BLEU\s+" + NUMBER, out) <= 100
        assert figure(rf"^{name}\s+BLEU.*chrF\s+" + NUMBER + r"\s+" + NUMBER + " sent/s", out) >= 0
    assert re.search(r"^prefix \(first 1-3 reference words\): 12/12 outputs start with it", out, re.MULTILINE), out
