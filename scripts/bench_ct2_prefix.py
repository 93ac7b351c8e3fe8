#!/usr/bin/env python
"""The CTranslate2 engine's beam search after a target prefix: ranked by CTranslate2's own scores (today's engine)
against rescoring every candidate with a teacher-forced pass first (the engine before 2026-11-27).

    python scripts/bench_ct2_prefix.py RUN [--beam 5] [--turns 3] [--limit N]

RUN is a run dir translating test_2016_flickr's language pair (the shipped Multi30k en-de, e.g.
runs/multi30k-transformer). Each English sentence is translated with the first word of its German reference as a
target prefix (the jsonl ``prefix`` instruction; a multilingual model's language token takes the same path), in
this process, on the CPU, the two ways taking turns after a warm-up: printed are the CPU, each way's seconds per
turn and the best, and how many of the outputs the two ways agree on.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchlib import describe, read_gz  # noqa: E402

MULTI30K = ROOT / "data" / "multi30k"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path)
    ap.add_argument("--beam", type=int, default=5)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, help="the first N test sentences only (default: all 1,000)")
    args = ap.parse_args()

    import mtkit
    from mtkit.inference.ct2_engine import Ct2Engine

    sources = read_gz(MULTI30K / "test_2016_flickr.en.gz")
    references = read_gz(MULTI30K / "test_2016_flickr.de.gz")
    lines = [{"text": s, "prefix": r.split()[0]} for s, r in zip(sources, references)][: args.limit]
    model = mtkit.load(args.run, engine="ctranslate2", beam_size=args.beam, threads=args.threads)
    print(f"bench_ct2_prefix {time.strftime('%Y-%m-%d %H:%M')}  {describe()}; {model.engine.describe()}")
    ranked = Ct2Engine._ranked

    def rescoring(self, o, plan, srcs, found, forced):
        """The earlier engine: after a prefix, no candidate keeps CTranslate2's score."""
        if any(forced):
            found = [[(pieces, None, None) for pieces, _, _ in cands] for cands in found]
        return ranked(self, o, plan, srcs, found, forced)

    ours, earlier = "CTranslate2's scores", "every candidate rescored"
    ways = {ours: ranked, earlier: rescoring}
    seconds: dict[str, list[float]] = {name: [] for name in ways}
    outputs: dict[str, list[str]] = {}
    try:
        for _ in range(args.turns):
            for name, method in ways.items():
                Ct2Engine._ranked = method
                model.translate(lines[:50])  # warm-up
                start = time.perf_counter()
                outputs[name] = model.translate(lines)
                seconds[name].append(time.perf_counter() - start)
    finally:
        Ct2Engine._ranked = ranked
    for name, times in seconds.items():
        turns = ", ".join(f"{t:.2f}" for t in times)
        print(
            f"{name:26} best {min(times):6.2f} s  ({turns})  {len(lines)} sentences, beam {args.beam}, one-word prefix"
        )
    first, second = outputs.values()
    print(f"outputs equal: {sum(a == b for a, b in zip(first, second))} of {len(lines)}")
    print(f"{ours}: {min(seconds[earlier]) / min(seconds[ours]):.2f}x the speed of the earlier way")


if __name__ == "__main__":
    main()
