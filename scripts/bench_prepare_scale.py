#!/usr/bin/env python
"""`mtkit prepare` at scale: Multi30k's training set repeated up to ~4.35M pairs, time and peak memory.

    python scripts/bench_prepare_scale.py [--copies 15 50 150] [--workdir /tmp/mtkit-bench-prepare]

For each number of copies it writes train.en / train.de (the 29,000 Multi30k pairs repeated, with the
validation set kept as it is), runs `python -m mtkit prepare CONFIG --force` as a child process and prints
the pairs, wall seconds, microseconds per pair and the child's peak resident set size (ru_maxrss from wait4).
Linear time shows as a flat microseconds-per-pair column; SentencePiece samples at most
`data.spm_input_sentence_size` sentences (2M by default), so its share stops growing past that.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml
from benchlib import read_gz

ROOT = Path(__file__).resolve().parent.parent
MULTI30K = ROOT / "data" / "multi30k"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--copies", type=int, nargs="+", default=[15, 50, 150])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/mtkit-bench-prepare"))
    args = parser.parse_args()
    work = args.workdir
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    train = {lang: "\n".join(read_gz(MULTI30K / f"train.{lang}.gz")) + "\n" for lang in ("en", "de")}
    pairs_per_copy = train["en"].count("\n")
    print(f"{'copies':>6} {'pairs':>10} {'input MB':>9} {'seconds':>8} {'us/pair':>8} {'peak RSS MiB':>13}", flush=True)
    for copies in args.copies:
        for lang in ("en", "de"):
            with open(work / f"train.{lang}", "w", encoding="utf-8") as f:
                for _ in range(copies):
                    f.write(train[lang])
        config = work / "config.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "data": {
                        "dir": str(work / "data"),
                        "vocab_size": 8000,
                        "splits": {
                            "train": {"src": str(work / "train.en"), "tgt": str(work / "train.de")},
                            "valid": {"src": str(MULTI30K / "val.en.gz"), "tgt": str(MULTI30K / "val.de.gz")},
                        },
                    }
                }
            )
        )
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "mtkit", "prepare", str(config), "--force"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            cwd=ROOT,
        )
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        seconds = time.perf_counter() - started
        if os.waitstatus_to_exitcode(status) != 0:
            sys.exit(f"prepare failed: {err.decode(errors='replace')[-2000:]}")
        pairs = copies * pairs_per_copy
        size = sum((work / f"train.{lang}").stat().st_size for lang in ("en", "de"))
        print(
            f"{copies:>6} {pairs:>10,} {size / 1e6:>9.0f} {seconds:>8.1f} {seconds / pairs * 1e6:>8.1f} "
            f"{usage.ru_maxrss / 1024:>13.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
