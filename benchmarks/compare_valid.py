#!/usr/bin/env python
"""Validation loss and greedy BLEU of run B beside run A's nearest validation in elapsed training time.

    python benchmarks/compare_valid.py RUN_A RUN_B

Reads each run directory's metrics.jsonl (what `mtkit train` logs) and prints one row per validation of B:
its update, minutes of training, loss and BLEU, then those of A's validation closest in minutes. For ablations
that change the speed of an update (BPE-dropout, a smaller vocabulary), this compares runs at equal wall time.
Output of 2026-11-23: benchmarks/results/2026-11-23-bpe-dropout/valid-bpe-dropout-src-vs-seed2.txt.
"""

import json
import sys
from pathlib import Path


def validations(run: str) -> list[dict]:
    path = Path(run) / "metrics.jsonl"
    if not path.is_file():
        print(f"compare_valid.py: {path}: not found; give two mtkit run directories", file=sys.stderr)
        sys.exit(2)
    with open(path, encoding="utf-8") as f:
        rows = [r for r in map(json.loads, f) if r.get("kind") == "valid"]
    if not rows:
        print(f"compare_valid.py: {path}: no validation yet", file=sys.stderr)
        sys.exit(2)
    return rows


def main() -> None:
    if len(sys.argv) != 3:
        print("usage: python benchmarks/compare_valid.py RUN_A RUN_B", file=sys.stderr)
        sys.exit(2)
    a, b = (validations(run) for run in sys.argv[1:3])
    print(f"B = {sys.argv[2]}, A = {sys.argv[1]}")
    print(f"{'B update':>8} {'min':>6} {'loss':>6} {'BLEU':>6}  | {'A update':>8} {'min':>6} {'loss':>6} {'BLEU':>6}")
    for r in b:
        near = min(a, key=lambda x: abs(x["elapsed"] - r["elapsed"]))
        print(
            f"{r['update']:8d} {r['elapsed'] / 60:6.1f} {r['loss']:6.3f} {r.get('bleu', 0):6.2f}  | "
            f"{near['update']:8d} {near['elapsed'] / 60:6.1f} {near['loss']:6.3f} {near.get('bleu', 0):6.2f}"
        )


if __name__ == "__main__":
    main()
