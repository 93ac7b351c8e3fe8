#!/usr/bin/env python
"""`mtkit clean` streaming: N synthetic noisy en-de pairs, the pairs per second and the peak memory.

    python scripts/bench_clean_stream.py [--pairs 100000] [--filters length,copy,...] [--workdir DIR]

Writes N pairs (German-like and English-like sentences of 4 to 20 words from a small word list, with 2% copies,
3% repeated pairs, 1% URLs, 1% words repeated, 1% French targets) to a temp dir, runs `python -m mtkit clean` on
them as a child process and prints the wall seconds, pairs per second and the child's peak resident set size
(ru_maxrss of the children, from getrusage), with how many pairs each filter removed. Memory that stays flat
from 100k to 1M pairs (but for the duplicate filter's 8-byte hashes) shows the clean is streaming.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EN_DE = {
    "man": "Mann", "woman": "Frau", "child": "Kind", "dog": "Hund", "cat": "Katze", "runs": "läuft",
    "sits": "sitzt", "plays": "spielt", "eats": "isst", "sees": "sieht", "with": "mit", "near": "neben",
    "under": "unter", "park": "Park", "street": "Straße", "house": "Haus", "garden": "Garten", "ball": "Ball",
    "red": "rote", "big": "große", "small": "kleine", "green": "grüne", "old": "alte", "young": "junge",
    "water": "Wasser", "bread": "Brot", "and": "und", "two": "zwei", "three": "drei", "white": "weiße",
    "black": "schwarze", "bike": "Fahrrad", "tree": "Baum", "the": "der", "a": "ein", "is": "ist", "on": "auf",
    "is walking": "geht", "through": "durch", "beside": "neben", "while": "während", "holding": "hält",
}  # fmt: skip
FRENCH = "un homme et une femme marchent dans la rue avec leur chien pendant que les enfants jouent au parc".split()


def sentence_pair(rng: random.Random, i: int) -> tuple[str, str]:
    words = rng.choices(list(EN_DE), k=rng.randint(4, 20))
    src = " ".join(words).capitalize() + f" {i % 97} ."
    tgt = " ".join(EN_DE[w] for w in words).capitalize() + f" {i % 97} ."
    return src, tgt


def write_corpus(folder: Path, pairs: int, seed: int = 1) -> tuple[Path, Path]:
    rng = random.Random(seed)
    src_path, tgt_path = folder / "synthetic.en", folder / "synthetic.de"
    recent: list[tuple[str, str]] = []
    with open(src_path, "w", encoding="utf-8") as fs, open(tgt_path, "w", encoding="utf-8") as ft:
        for i in range(pairs):
            src, tgt = sentence_pair(rng, i)
            roll = rng.random()
            if roll < 0.02:
                tgt = src  # copy
            elif roll < 0.05 and recent:
                src, tgt = rng.choice(recent)  # duplicate
            elif roll < 0.06:
                src = f"https://www.example.com/item/{i}?ref=home"  # URL
            elif roll < 0.07:
                tgt = " ".join(["Hund"] * 8) + " ."  # one word repeated
            elif roll < 0.08:
                tgt = " ".join(rng.choices(FRENCH, k=12)).capitalize() + " ."  # wrong language
            recent = (recent + [(src, tgt)])[-1000:]
            fs.write(src + "\n")
            ft.write(tgt + "\n")
    return src_path, tgt_path


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=100_000)
    parser.add_argument("--filters", default=None, help="comma-separated (default: all)")
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temp dir, removed at the end")
    args = parser.parse_args()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="mtkit-bench-clean-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        started = time.perf_counter()
        src, tgt = write_corpus(work, args.pairs)
        size_mb = (src.stat().st_size + tgt.stat().st_size) / 1e6
        print(f"wrote {args.pairs:,} pairs ({size_mb:.0f} MB) in {time.perf_counter() - started:.1f}s", flush=True)
        command = [sys.executable, "-m", "mtkit", "clean", str(src), str(tgt), "--output", str(work / "out")]
        command += ["--filters", args.filters] if args.filters else []
        started = time.perf_counter()
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
        seconds = time.perf_counter() - started
        if done.returncode:
            sys.exit(f"mtkit clean failed ({done.returncode}): {done.stderr.strip()}")
        peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KiB on Linux
        report = json.loads((work / "out" / "report.json").read_text(encoding="utf-8"))
        print(f"python {platform.python_version()}, filters: {', '.join(report['filters'])}")
        print(
            f"{report['pairs_read']:,} pairs in {seconds:.1f}s: {report['pairs_read'] / seconds:,.0f} pairs/s, "
            f"peak RSS {peak_mib:.0f} MiB, {report['pairs_kept']:,} kept"
        )
        print("removed: " + ", ".join(f"{name} {n:,}" for name, n in report["removed"].items()))
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
