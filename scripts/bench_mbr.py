#!/usr/bin/env python
"""Minimum Bayes risk decoding against beam search on a trained run: quality and time per candidate source,
candidate count and utility.

    python scripts/bench_mbr.py runs/multi30k-transformer                 # test_2016_flickr, 16 candidates
    python scripts/bench_mbr.py runs/multi30k-transformer --candidates 8 16 --split val --engine ctranslate2

Prints the date and CPU, then one row per setting: beam 5 (the baseline), a beam and epsilon sampling as wide as
the candidates (what drawing them costs), and MBR over the beam's n-best and over epsilon samples, with chrF and
with BLEU as the utility (and, with --pseudo-references N, against N samples drawn apart): seconds, sentences/s,
BLEU and chrF (sacreBLEU, cased, against the references) and the seconds as a multiple of beam 5's. Every row is
translated through ``mtkit.load`` in this process after a warm-up, as ``mtkit translate`` translates; model
loading is not timed.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from benchlib import describe, read_gz

ROOT = Path(__file__).resolve().parent.parent
SPLITS = {"test": "test_2016_flickr", "val": "val"}


def rows(args) -> list[tuple[str, dict]]:
    """(label, mtkit.load options) of every row, beam 5 first."""
    out = [("beam 5", dict(beam_size=5))]
    for n in args.candidates:
        out.append((f"beam {n}", dict(beam_size=n)))
        out.append((f"epsilon {args.epsilon} x{n}", dict(sampling=True, epsilon=args.epsilon, nbest=n, seed=1)))
        for utility in args.utilities:
            out.append(
                (
                    f"mbr beam {n} {utility}",
                    dict(algorithm="mbr", mbr_candidates=n, mbr_epsilon=0.0, mbr_utility=utility),
                )
            )
            if args.engine == "torch":
                out.append(
                    (
                        f"mbr eps {n} {utility}",
                        dict(
                            algorithm="mbr", mbr_candidates=n, mbr_epsilon=args.epsilon, mbr_utility=utility, mbr_seed=1
                        ),
                    )
                )
            for m in args.pseudo_references:
                out.append(
                    (
                        f"mbr beam {n} {utility} refs {m}",
                        dict(
                            algorithm="mbr",
                            mbr_candidates=n,
                            mbr_epsilon=0.0,
                            mbr_utility=utility,
                            mbr_pseudo_references=m,
                            mbr_seed=1,
                        ),
                    )
                )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run")
    ap.add_argument("--split", choices=list(SPLITS), default="test")
    ap.add_argument("--limit", type=int, default=0, help="only the first N sentences (0: all)")
    ap.add_argument("--candidates", type=int, nargs="+", default=[16])
    ap.add_argument("--utilities", nargs="+", default=["chrf", "bleu"], choices=["chrf", "bleu"])
    ap.add_argument("--epsilon", type=float, default=0.02)
    ap.add_argument("--pseudo-references", type=int, nargs="*", default=[])
    ap.add_argument("--engine", choices=["torch", "ctranslate2"], default="torch")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import mtkit
    from mtkit.scoring.score import corpus_scores

    name = SPLITS[args.split]
    sources = read_gz(ROOT / f"data/multi30k/{name}.en.gz")
    references = read_gz(ROOT / f"data/multi30k/{name}.de.gz")
    if args.limit:
        sources, references = sources[: args.limit], references[: args.limit]
    print(f"bench_mbr {time.strftime('%Y-%m-%d %H:%M')}  {describe()}  {args.run}  {name}: {len(sources)} sentences")
    print(f"{'setting':<28} {'seconds':>8} {'sent/s':>8} {'BLEU':>6} {'chrF':>6} {'x beam 5':>8}")
    base = None
    for label, options in rows(args):
        model = mtkit.load(args.run, engine=args.engine, threads=args.threads, **options)
        model.translate(sources[:20])  # warm-up
        start = time.perf_counter()
        hyps = model.translate(sources)
        seconds = time.perf_counter() - start
        base = base or seconds
        scores = corpus_scores(hyps, [references], metrics=("bleu", "chrf"))
        print(
            f"{label:<28} {seconds:8.2f} {len(sources) / seconds:8.1f} {scores['bleu']['score']:6.2f} "
            f"{scores['chrf']['score']:6.2f} {seconds / base:7.2f}x",
            flush=True,
        )


if __name__ == "__main__":
    main()
