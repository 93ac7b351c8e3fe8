#!/usr/bin/env python
"""A multilingual model against bilingual ones, and zero-shot directions against pivoting through English.

    python scripts/bench_multilingual.py --multi runs/multi30k-multilingual \\
        --bilingual de=runs/bi-en-de fr=runs/bi-en-fr cs=runs/bi-en-cs
    python scripts/bench_multilingual.py --many runs/multi30k-many

Printed, on test_2016_flickr (or --split), beam 5 (--beam-size), 2 threads:
1. With --multi (English into several languages): BLEU and chrF of each direction from the multilingual run,
   beside each bilingual run's (--bilingual LANG=RUN), and sentences/s of both on the first direction.
2. With --many (a many-to-many run through English): each pair of non-English languages both ways, translated
   directly (zero-shot: the model never saw the pair) and through English (source -> en -> target, the same
   model), BLEU and chrF of both.

The runs come from the shipped configs; for equal total training time give the multilingual run 3 x T minutes
and each bilingual run T (`--set training.max_minutes=T`), e.g. T = 20:

    mtkit prepare configs/multi30k-multilingual.yaml
    mtkit train configs/multi30k-multilingual.yaml --set training.max_minutes=60 --set training.max_updates=100000
    for L in de fr cs; do
      S="--set data.tgt_lang=$L --set data.dir=work/multi30k-en$L --set training.run_dir=runs/bi-en-$L"
      for s in train:train valid:val test:test_2016_flickr; do
        S="$S --set data.splits.${s%%:*}.tgt=data/multi30k/${s##*:}.$L.gz"
      done
      mtkit prepare configs/multi30k-demo.yaml $S
      mtkit train configs/multi30k-demo.yaml $S --set training.max_minutes=20 --set training.max_updates=100000
    done
"""

from __future__ import annotations

import argparse
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


def one_to_many(args) -> None:
    import mtkit

    multi = mtkit.load(args.multi, beam_size=args.beam_size, threads=args.threads)
    bilingual = dict(pair.split("=", 1) for pair in args.bilingual)
    source = lines(args.split, "en")
    print(f"\n1. {args.multi} (targets {', '.join(multi.targets)}) against bilingual runs, {args.split}")
    print("| direction | multilingual BLEU | chrF | bilingual BLEU | chrF | run |")
    print("|---|---:|---:|---:|---:|---|")
    speed = None
    for lang in multi.targets:
        refs = lines(args.split, lang)
        hyps, seconds = timed(lambda lang=lang: multi.translate(source, target=lang))
        m_bleu, m_chrf = scores(hyps, refs)
        row = f"| en-{lang} | {m_bleu:.2f} | {m_chrf:.2f} |"
        if lang in bilingual:
            model = mtkit.load(bilingual[lang], beam_size=args.beam_size, threads=args.threads)
            b_hyps, b_seconds = timed(lambda model=model: model.translate(source))
            b_bleu, b_chrf = scores(b_hyps, refs)
            row += f" {b_bleu:.2f} | {b_chrf:.2f} | {bilingual[lang]} |"
            if speed is None:
                speed = (lang, len(source) / seconds, len(source) / b_seconds)
        else:
            row += " | | |"
        print(row)
    if speed:
        lang, m, b = speed
        print(f"sentences/s on en-{lang}: multilingual {m:.1f}, bilingual {b:.1f} ({m / b:.2f}x)")


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
    parser.add_argument("--multi", help="a run from English into several languages")
    parser.add_argument("--bilingual", nargs="*", default=[], help="LANG=RUN: a bilingual run from English")
    parser.add_argument("--many", help="a many-to-many run through English")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if not args.multi and not args.many:
        parser.error("give --multi, --many or both")
    import torch

    torch.set_num_threads(args.threads)
    print(describe())
    if args.multi:
        one_to_many(args)
    if args.many:
        many_to_many(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
