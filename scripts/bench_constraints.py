#!/usr/bin/env python
"""Lexical constraints and prefixes on test_2016_flickr: coverage, quality and speed against plain beam search.

    python scripts/bench_constraints.py runs/multi30k-transformer
    python scripts/bench_constraints.py runs/demo --limit 100 --threads 1     # a quick check

1. Translates the source side plainly (beam 5 by default, the run's other decoding options).
2. Takes, per sentence, up to two phrases of the reference that the plain output misses: reference words of 3 or
   more letters absent from the output, two such words in a row making one two-word phrase; sentences whose
   output misses none get no constraint.
3. Translates again with those constraints (the torch engine's constrained beam search) and prints the share of
   constrained sentences whose output contains all their phrases (listing any that does not), BLEU and chrF with
   and without constraints, and sentences/s of both runs (after an untimed warm-up each).
4. Prefix check: translates with the first 1-3 reference words as each sentence's prefix and prints the share of
   outputs that start with it.
Everything runs in this process through ``mtkit.load`` and ``TranslationModel.translate``.
"""

from __future__ import annotations

import argparse
import datetime
import os
import re
import sys
import time
from pathlib import Path

from benchlib import add_split_options, describe, read_split


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text)


def contains(text: str, phrase: str) -> bool:
    """``phrase`` appears in ``text`` as whole words."""
    return f" {' '.join(words(phrase))} " in f" {' '.join(words(text))} "


def missed_phrases(reference: str, hypothesis: str, most: int = 2) -> list[str]:
    """Up to ``most`` phrases of ``reference`` missing from ``hypothesis``: words of 3+ letters, adjacent ones joined."""
    present = set(words(hypothesis))
    phrases: list[list[str]] = []
    previous_missed = False
    for word in words(reference):
        missed = len(word) >= 3 and word not in present and not any(word in p for p in phrases)
        if missed and previous_missed and len(phrases[-1]) == 1:
            phrases[-1].append(word)
        elif missed:
            phrases.append([word])
        previous_missed = missed
    return [" ".join(p) for p in phrases[:most]]


def timed(model, items, warmup: int, **instructions) -> tuple[list[str], float]:
    """Translations of ``items`` and the seconds they took (after translating the first ``warmup`` untimed)."""
    head = {key: value[:warmup] for key, value in instructions.items()}
    model.translate(items[:warmup], **head)
    start = time.perf_counter()
    found = model.translate(items, **instructions)
    return found, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="run dir or checkpoint")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    add_split_options(parser)
    parser.add_argument("--warmup", type=int, default=20, help="sentences translated untimed before each run")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

    import mtkit
    from mtkit.scoring.score import corpus_scores

    sources, references = read_split(args)
    model = mtkit.load(args.run, beam_size=args.beam, nbest=1, threads=args.threads, device="cpu")
    print(f"$ python scripts/bench_constraints.py {' '.join(sys.argv[1:])}")
    print(f"{datetime.date.today()}  {describe()}")
    print(f"{args.run}: {len(sources)} sentences of {args.split}, beam {args.beam}, torch engine")

    def quality(hyps: list[str]) -> str:
        s = corpus_scores(hyps, [references], metrics=("bleu", "chrf"))
        return f"BLEU {s['bleu']['score']:6.2f}  chrF {s['chrf']['score']:6.2f}"

    plain, plain_s = timed(model, sources, args.warmup)
    constraints, refused = [], 0
    for source, ref, hyp in zip(sources, references, plain):
        kept = []
        for phrase in missed_phrases(ref, hyp):
            try:  # e.g. a character the target vocabulary lacks: the model cannot write the phrase
                model.check(mtkit.Segment(source, constraints=(*kept, phrase)))
                kept.append(phrase)
            except mtkit.MtkitError:
                refused += 1
        constraints.append(kept)
    constrained, constrained_s = timed(model, sources, args.warmup, constraints=[c or None for c in constraints])
    asked = [i for i, c in enumerate(constraints) if c]
    unmet = [i for i in asked if not all(contains(constrained[i], p) for p in constraints[i])]
    phrases = sum(len(constraints[i]) for i in asked)
    print(f"constraints: {phrases} phrases on {len(asked)} sentences (the others' plain output misses no word)")
    if refused:
        print(f"  {refused} missed phrases left out: the model cannot write them (see mtkit.Segment checks)")
    print(
        f"coverage: {len(asked) - len(unmet)}/{len(asked)} sentences meet all their constraints "
        f"({100 * (len(asked) - len(unmet)) / max(len(asked), 1):.1f}%)"
    )
    for i in unmet:
        print(f"  not met, sentence {i + 1}: {constraints[i]} -> {constrained[i]!r}")
    print(f"{'plain':<12} {quality(plain)}  {len(sources) / plain_s:8.1f} sent/s  ({plain_s:.2f} s)")
    print(
        f"{'constrained':<12} {quality(constrained)}  {len(sources) / constrained_s:8.1f} sent/s  ({constrained_s:.2f} s)"
    )
    print(f"time constrained / plain: {constrained_s / plain_s:.2f}x")

    prefixes = [" ".join(ref.split()[: 1 + i % 3]) for i, ref in enumerate(references)]
    prefixed, prefixed_s = timed(model, sources, args.warmup, prefix=prefixes)
    starting = sum(out.startswith(p) for out, p in zip(prefixed, prefixes))
    print(
        f"prefix (first 1-3 reference words): {starting}/{len(sources)} outputs start with it "
        f"({100 * starting / max(len(sources), 1):.1f}%); {quality(prefixed)}  {len(sources) / prefixed_s:8.1f} sent/s"
    )


if __name__ == "__main__":
    main()
