#!/usr/bin/env python
"""A multilingual model against bilingual ones at equal training time, and zero-shot directions against pivoting.

    python scripts/bench_multilingual.py --rate runs/cal-bi runs/cal-multi
    python scripts/bench_multilingual.py --multi runs/multi-60 runs/multi-20 \\
        --bilingual de=runs/bi-en-de fr=runs/bi-en-fr cs=runs/bi-en-cs
    python scripts/bench_multilingual.py --many runs/multi30k-many

Printed, on test_2016_flickr (or --split), beam 5 (--beam-size), 2 threads:
0. With --rate: each run's training speed, updates per second from its metrics.jsonl (update 50 to its last, so
   without the start-up), to turn a time budget into an update budget.
1. With --multi (runs from English into several languages): BLEU and chrF of each direction from each multilingual
   run, beside each bilingual run's (--bilingual LANG=RUN), and sentences/s of the first multilingual run against
   the bilingual one on the first direction (the median of three runs each, taking turns).
2. With --many (a many-to-many run through English): each pair of non-English languages both ways, translated
   directly (zero-shot: the model never saw the pair) and through English (source -> en -> target, the same
   model), BLEU and chrF of both.

Equal total training time: one multilingual model for 3 x T minutes against three bilingual models for T minutes
each. Training speed differs between the two (the multilingual vocabulary is larger) and a wall-clock cap would
cut the cosine schedule short, so each run gets the updates that T minutes buy at its own speed, measured on a
quiet machine with 300-update runs (--rate), and max_updates set to that (the schedule then ends where the budget
does). T = 20, with R_bi and R_multi the rates --rate printed, the budgets are U60 = 3600 x R_multi and
U20 = 1200 x R_multi updates for the multilingual runs, B20 = 1200 x R_bi for each bilingual one:

    mtkit prepare configs/multi30k-multilingual.yaml
    mtkit train configs/multi30k-demo.yaml --set training.max_updates=300 --set training.validate_every=100000 \\
        --set training.run_dir=runs/cal-bi                     # and the same with the multilingual config
    mtkit train configs/multi30k-multilingual.yaml --set training.run_dir=runs/multi-60 \\
        --set training.max_updates=U60 --set training.max_minutes=600        # runs/multi-20: U20
    for L in de fr cs; do
      S="--set data.tgt_lang=$L --set data.dir=work/multi30k-en$L --set training.run_dir=runs/bi-en-$L"
      for s in train:train valid:val test:test_2016_flickr; do
        S="$S --set data.splits.${s%%:*}.tgt=data/multi30k/${s##*:}.$L.gz"
      done
      mtkit prepare configs/multi30k-demo.yaml $S
      mtkit train configs/multi30k-demo.yaml $S --set training.max_updates=B20 --set training.max_minutes=600
    done
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import describe, read_gz  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def scores(hyps: list[str], refs: list[str]) -> tuple[float, float]:
    import sacrebleu

    return sacrebleu.corpus_bleu(hyps, [refs]).score, sacrebleu.corpus_chrf(hyps, [refs]).score


def lines(split: str, lang: str) -> list[str]:
    return read_gz(ROOT / "data" / "multi30k" / f"{split}.{lang}.gz")


def timed(fn):
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def rates(runs: list[str]) -> None:
    print("\n0. Training speed (update 50 to the last logged update)")
    for run in runs:
        rows = [json.loads(line) for line in Path(run, "metrics.jsonl").read_text().splitlines()]
        rows = [r for r in rows if r.get("kind") == "train"]
        first = next(r for r in rows if r["update"] >= 50)
        last = rows[-1]
        rate = (last["update"] - first["update"]) / (last["elapsed"] - first["elapsed"])
        print(f"{run}: {rate:.3f} updates/s ({first['update']}-{last['update']}); 20 min = {1200 * rate:.0f} updates")


def one_to_many(args) -> None:
    import statistics

    import mtkit

    multis = [mtkit.load(run, beam_size=args.beam_size, threads=args.threads) for run in args.multi]
    bilingual = dict(pair.split("=", 1) for pair in args.bilingual)
    source = lines(args.split, "en")
    print(f"\n1. {', '.join(args.multi)} (targets {', '.join(multis[0].targets)}) against bilingual runs, {args.split}")
    print(
        "| direction | " + " | ".join(f"{run} BLEU | chrF" for run in args.multi) + " | bilingual BLEU | chrF | run |"
    )
    print("|---|" + "---:|---:|" * len(multis) + "---:|---:|---|")
    for lang in multis[0].targets:
        refs = lines(args.split, lang)
        row = f"| en-{lang} |"
        for multi in multis:
            row += " {:.2f} | {:.2f} |".format(*scores(multi.translate(source, target=lang), refs))
        if lang in bilingual:
            model = mtkit.load(bilingual[lang], beam_size=args.beam_size, threads=args.threads)
            row += " {:.2f} | {:.2f} |".format(*scores(model.translate(source), refs)) + f" {bilingual[lang]} |"
        else:
            row += " | | |"
        print(row)
    lang = next((t for t in multis[0].targets if t in bilingual), None)
    if lang is None:
        return
    model = mtkit.load(bilingual[lang], beam_size=args.beam_size, threads=args.threads)
    m_times, b_times = [], []
    for _ in range(3):  # taking turns, so that a slower minute of the machine falls on both
        m_times.append(timed(lambda: multis[0].translate(source, target=lang))[1])
        b_times.append(timed(lambda: model.translate(source))[1])
    m, b = len(source) / statistics.median(m_times), len(source) / statistics.median(b_times)
    print(f"sentences/s on en-{lang}, median of 3: {args.multi[0]} {m:.1f}, {bilingual[lang]} {b:.1f} ({m / b:.2f}x)")


def many_to_many(args) -> None:
    import mtkit

    model = mtkit.load(args.many, beam_size=args.beam_size, threads=args.threads)
    others = [t for t in model.targets if t != "en"]
    print(f"\n2. {args.many}: zero-shot against pivoting through English, {args.split}")
    print("| direction | zero-shot BLEU | chrF | through en BLEU | chrF |")
    print("|---|---:|---:|---:|---:|")
    for src in others:
        source = lines(args.split, src)
        english = model.translate(source, target="en")
        for tgt in others:
            if tgt == src:
                continue
            refs = lines(args.split, tgt)
            direct = scores(model.translate(source, target=tgt), refs)
            pivot = scores(model.translate(english, target=tgt), refs)
            print(f"| {src}-{tgt} | {direct[0]:.2f} | {direct[1]:.2f} | {pivot[0]:.2f} | {pivot[1]:.2f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", nargs="*", default=[], help="runs whose training speed to print")
    parser.add_argument("--multi", nargs="*", default=[], help="runs from English into several languages")
    parser.add_argument("--bilingual", nargs="*", default=[], help="LANG=RUN: a bilingual run from English")
    parser.add_argument("--many", help="a many-to-many run through English")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if not args.multi and not args.many and not args.rate:
        parser.error("give --rate, --multi or --many")
    import torch

    torch.set_num_threads(args.threads)
    print(describe())
    if args.rate:
        rates(args.rate)
    if args.multi:
        one_to_many(args)
    if args.many:
        many_to_many(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
