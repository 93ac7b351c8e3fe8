#!/usr/bin/env python
"""A glossary of uncommon but valid term pairs on test_2016_flickr: do its terms hold, are the other sentences
untouched, and what does it cost.

    python scripts/bench_glossary.py runs/multi30k-transformer
    python scripts/bench_glossary.py runs/demo --limit 100 --threads 1     # a quick check

1. Reads the glossary (``--glossary FILE``, TSV or CSV; by default the ten pairs below: English terms of the test
   set, each with a German rendering the model would rarely choose) and finds, per sentence, the terms it holds
   (whole words, any case, the longest first: ``mtkit.text.glossary``); a pair whose target term the model cannot
   write (a character its vocabulary lacks) is left out, and said.
2. Translates every sentence plainly, then with the glossary (beam 5 by default, the torch engine's constrained
   search), in this process through ``mtkit.load``.
3. Prints the share of term-bearing sentences whose translation carries every target term (the goal: 98% or more),
   listing any that does not; BLEU and chrF of the untouched sentences (those without a term) with and without the
   glossary, and how many of them are word for word the same (the goal: all); and the time of the term-bearing
   sentences with the glossary against the same sentences without it, each after an untimed warm-up (the goal:
   2x or less).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from pathlib import Path

from benchlib import add_split_options, describe, read_split

# English terms of test_2016_flickr, each with a valid German rendering the references seldom use
TERMS = (
    ("bicycle", "Drahtesel"),
    ("guitar", "Klampfe"),
    ("hat", "Kopfbedeckung"),
    ("beach", "Gestade"),
    ("car", "Automobil"),
    ("street", "Fahrbahn"),
    ("boy", "Knabe"),
    ("camera", "Fotoapparat"),
    ("jacket", "Joppe"),
    ("shirt", "Oberhemd"),
)


def timed(model, items: list[str], warmup: int, **call) -> tuple[list[str], float]:
    """Translations of ``items`` and the seconds they took (after translating the first ``warmup`` untimed)."""
    model.translate(items[:warmup], **call)
    start = time.perf_counter()
    found = model.translate(items, **call)
    return found, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="run dir or checkpoint")
    parser.add_argument("--glossary", type=Path, default=None, help="a TSV or CSV file of term pairs")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    add_split_options(parser)
    parser.add_argument("--warmup", type=int, default=20, help="sentences translated untimed before each timed run")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

    import mtkit
    from mtkit.scoring.score import corpus_scores
    from mtkit.text.glossary import Glossary

    sources, references = read_split(args)
    glossary = Glossary.read(args.glossary) if args.glossary else Glossary(TERMS)
    model = mtkit.load(args.run, beam_size=args.beam, nbest=1, threads=args.threads, device="cpu")
    print(f"$ python scripts/bench_glossary.py {' '.join(sys.argv[1:])}")
    print(f"{datetime.date.today()}  {describe()}")
    print(f"{args.run}: {len(sources)} sentences of {args.split}, beam {args.beam}, torch engine")
    print(f"glossary: {len(glossary.entries)} pairs: " + ", ".join(f"{s} -> {t}" for s, t in glossary.entries))
    writable = []
    for source_term, target_term in glossary.entries:
        try:  # e.g. a character the target vocabulary lacks: the model cannot write the term
            model.check(mtkit.Segment(source_term, constraints=(target_term,)))
            writable.append((source_term, target_term))
        except mtkit.MtkitError as err:
            print(f"  left out, {source_term} -> {target_term}: {err}")
    glossary = Glossary(tuple(writable))

    terms = [glossary.terms(s) for s in sources]
    bearing = [i for i, t in enumerate(terms) if t]
    untouched = [i for i, t in enumerate(terms) if not t]
    plain = model.translate(sources)
    with_glossary = model.translate(sources, glossary=glossary)

    unmet = [i for i in bearing if not all(t in with_glossary[i] for t in terms[i])]
    carried = len(bearing) - len(unmet)
    before = sum(all(t in plain[i] for t in terms[i]) for i in bearing)
    share = 100 * carried / max(len(bearing), 1)
    print(f"term-bearing sentences: {len(bearing)} ({sum(map(len, terms))} terms)")
    print(f"carry every target term: {carried}/{len(bearing)} ({share:.1f}%); without the glossary {before}")
    for i in unmet:
        print(f"  not carried, sentence {i + 1}: {terms[i]} -> {with_glossary[i]!r}")

    def quality(hyps: list[str], rows: list[int]) -> str:
        s = corpus_scores([hyps[i] for i in rows], [[references[i] for i in rows]], metrics=("bleu", "chrf"))
        return f"BLEU {s['bleu']['score']:6.2f}  chrF {s['chrf']['score']:6.2f}"

    same = sum(plain[i] == with_glossary[i] for i in untouched)
    print(f"untouched sentences: {len(untouched)}; the same with the glossary: {same}/{len(untouched)}")
    if untouched:
        print(f"  without the glossary  {quality(plain, untouched)}")
        print(f"  with the glossary     {quality(with_glossary, untouched)}")
    if bearing:
        print(f"term-bearing sentences  without: {quality(plain, bearing)}  with: {quality(with_glossary, bearing)}")
        items = [sources[i] for i in bearing]
        warmup = min(args.warmup, len(items))
        _, plain_s = timed(model, items, warmup)
        _, glossary_s = timed(model, items, warmup, glossary=glossary)
        print(f"{'without':<8} {len(items) / plain_s:8.1f} sent/s  ({plain_s:.2f} s)")
        print(f"{'with':<8} {len(items) / glossary_s:8.1f} sent/s  ({glossary_s:.2f} s)")
        print(f"time with the glossary / without: {glossary_s / plain_s:.2f}x")


if __name__ == "__main__":
    main()
