#!/usr/bin/env python
"""Peak memory of `mtkit translate` and `mtkit prepare` on large and hostile inputs (docs/benchmarks.md, section 7).

    python scripts/bench_memory.py [--workdir /tmp/mtkit-bench-memory] [--gigabytes 1.0]

Every figure is the peak resident set size (ru_maxrss from wait4) of one `python -m mtkit ...` child
process, printed beside its wall time. The model is a tiny Transformer (max_positions 64) trained for a
few updates on the first 3,000 Multi30k pairs: the point is the input path (reading, chunking, tokenizing,
batching, writing), which a bigger model would only slow down. Cases:

- translate 10,000 and 100,000 Multi30k test lines (greedy): memory must not grow with the input;
- translate a GIGABYTES-sized stream (10,000-character lines of words, through a pipe from `cat`);
- translate a line of 100,000 characters among normal ones;
- prepare the Multi30k training set with and without one extra 1 MB line (which the cleaner filters).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml
from benchlib import read_gz

ROOT = Path(__file__).resolve().parent.parent
MULTI30K = ROOT / "data" / "multi30k"
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def write(path: Path, lines) -> Path:
    with open(path, "w", encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")
    return path


def measured(cmd: list[str], stdin=None, stdout=subprocess.DEVNULL) -> tuple[float, float]:
    """Run ``cmd`` to the end; (peak RSS in MiB, seconds). Fails loudly on a non-zero exit."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, env=ENV, cwd=ROOT)
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}): {err.decode(errors='replace')[-2000:]}")
    return usage.ru_maxrss / 1024, time.perf_counter() - started


def mtkit(*args) -> list[str]:
    return [sys.executable, "-m", "mtkit", *map(str, args)]


def tiny_run(work: Path) -> Path:
    train_en, train_de = read_gz(MULTI30K / "train.en.gz"), read_gz(MULTI30K / "train.de.gz")
    val_en, val_de = read_gz(MULTI30K / "val.en.gz"), read_gz(MULTI30K / "val.de.gz")
    corpus = work / "corpus"
    corpus.mkdir(parents=True, exist_ok=True)
    config = {
        "data": {
            "dir": str(work / "data"),
            "vocab_size": 1000,
            "splits": {
                "train": {
                    "src": str(write(corpus / "train.en", train_en[:3000])),
                    "tgt": str(write(corpus / "train.de", train_de[:3000])),
                },
                "valid": {
                    "src": str(write(corpus / "val.en", val_en[:50])),
                    "tgt": str(write(corpus / "val.de", val_de[:50])),
                },
            },
        },
        "model": {
            "arch": "transformer",
            "d_model": 32,
            "heads": 2,
            "encoder_layers": 1,
            "decoder_layers": 1,
            "ffn_dim": 64,
            "max_positions": 64,
        },
        "training": {
            "run_dir": str(work / "run"),
            "max_updates": 5,
            "batch_tokens": 1000,
            "threads": 1,
            "validate_every": 5,
            "valid_bleu": False,
        },
        "decoding": {"beam_size": 1, "max_len_a": 0.0, "max_len_b": 8, "batch_size": 64, "device": "cpu", "threads": 1},
    }
    path = work / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    for command in ("prepare", "train"):
        subprocess.run(mtkit(command, path), check=True, env=ENV, cwd=ROOT, capture_output=True)
    return work / "run"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/mtkit-bench-memory"))
    parser.add_argument("--gigabytes", type=float, default=1.0, help="size of the streamed translate input")
    args = parser.parse_args()
    work = args.workdir
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    run = tiny_run(work)
    rows = []
    test_en = read_gz(MULTI30K / "test_2016_flickr.en.gz")

    for n in (10_000, 100_000):
        src = write(work / f"lines-{n}.en", (test_en[i % len(test_en)] for i in range(n)))
        with open(src, "rb") as stdin:
            rss, secs = measured(mtkit("translate", run), stdin=stdin)
        rows.append((f"translate {n:,} lines (file on stdin)", src.stat().st_size, rss, secs))

    rng = random.Random(0)
    words = " ".join(test_en).split()
    line_chars = 10_000
    n_lines = int(args.gigabytes * 1e9 / (line_chars + 1))
    big = work / "stream.en"
    with open(big, "w", encoding="utf-8") as f:
        block = [(" ".join(rng.choice(words) for _ in range(2_500)))[:line_chars] for _ in range(50)]
        for i in range(n_lines):
            f.write(block[i % len(block)] + "\n")
    cat = subprocess.Popen(["cat", str(big)], stdout=subprocess.PIPE)
    rss, secs = measured(mtkit("translate", run), stdin=cat.stdout)
    cat.stdout.close()
    cat.wait()
    rows.append((f"translate {n_lines:,} lines of {line_chars:,} chars (pipe)", big.stat().st_size, rss, secs))
    big.unlink()

    huge = write(work / "huge.en", test_en[:50] + [" ".join(words)[:100_000]] + test_en[50:100])
    with open(huge, "rb") as stdin:
        rss, secs = measured(mtkit("translate", run), stdin=stdin)
    rows.append(("translate 100 lines + one of 100,000 chars", huge.stat().st_size, rss, secs))

    train_en, train_de = read_gz(MULTI30K / "train.en.gz"), read_gz(MULTI30K / "train.de.gz")
    for label, extra in (("prepare Multi30k train", []), ("prepare Multi30k train + a 1 MB line", ["x" * 1_000_000])):
        en = write(work / "p.en", train_en[:14_000] + extra + train_en[14_000:])
        de = write(work / "p.de", train_de[:14_000] + ["ein Hund ." for _ in extra] + train_de[14_000:])
        config = work / "prepare.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "data": {
                        "dir": str(work / "p-data"),
                        "vocab_size": 8000,
                        "splits": {"train": {"src": str(en), "tgt": str(de)}},
                    }
                }
            )
        )
        rss, secs = measured(mtkit("prepare", config, "--force"))
        rows.append((label, en.stat().st_size + de.stat().st_size, rss, secs))

    print(f"\n{'case':<52} {'input MB':>10} {'peak RSS MiB':>13} {'seconds':>9}")
    for label, size, rss, secs in rows:
        print(f"{label:<52} {size / 1e6:>10.1f} {rss:>13.0f} {secs:>9.1f}")


if __name__ == "__main__":
    main()
