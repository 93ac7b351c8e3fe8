#!/usr/bin/env python
"""How well mtkit's confidence tells good translations from bad: sentence confidence against sentence chrF, and
flagged words against the reference.

    python scripts/bench_confidence.py runs/multi30k-transformer [--samples 8] [--threshold 0.5] [--algorithm beam]

Calibrates the run on val (``mtkit calibrate [--samples K]``: RUN/calibration.json), then translates val and
test_2016_flickr and prints, per split: the seconds the translation with scores took (with --samples, the epsilon
samples each sentence draws for its agreement included); Spearman's rank correlation of the sentence confidence (and
of the raw mean token log-prob) with sentence chrF against the reference; the calibration error (confidence against
sentence chrF / 100, ten equal-width bins) uncalibrated and calibrated; and for words, how often a word under
``--threshold`` is absent from the reference (compared lower-cased, punctuation stripped) against a word at or above
it, and their ratio. With --samples, it then times the cost of the samples: test_2016_flickr translated with scores,
with the calibration (drawing the samples) and without it, twice each.
"""

from __future__ import annotations

import argparse
import math
import string
import time
from pathlib import Path

from benchlib import describe, read_gz

ROOT = Path(__file__).resolve().parent.parent


def normal(word: str) -> str:
    return word.strip(string.punctuation + "„“”‚‘’»«").lower()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run")
    ap.add_argument("--threshold", type=float, default=0.5, help="a word under this confidence is flagged")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--algorithm", default=None)
    ap.add_argument("--samples", type=int, default=0, help="mtkit calibrate --samples: epsilon samples a sentence")
    args = ap.parse_args()

    import contextlib
    import io

    from sacrebleu.metrics.chrf import CHRF

    import mtkit
    from mtkit.inference.calibrate import calibrate_main
    from mtkit.inference.confidence import calibration_error, mean_log_prob, spearman

    print(f"bench_confidence {time.strftime('%Y-%m-%d %H:%M')}  {describe()}  {args.run}")
    with contextlib.redirect_stdout(io.StringIO()) as said:
        calibrate_main(run=Path(args.run), threads=args.threads, samples=args.samples)
    print(said.getvalue().strip())
    model = mtkit.load(args.run, threads=args.threads, algorithm=args.algorithm)
    chrf = CHRF()
    print(
        f"{'split':<18} {'sentences':>9} {'seconds':>8} {'Spearman conf':>13} {'Spearman lp':>11} {'ECE raw':>8} "
        f"{'ECE cal':>8} {'flagged absent':>14} {'unflagged absent':>16} {'ratio':>6}"
    )
    splits = ("val", "test_2016_flickr")
    for name in splits:
        sources = read_gz(ROOT / f"data/multi30k/{name}.en.gz")
        references = read_gz(ROOT / f"data/multi30k/{name}.de.gz")
        confidence, raw, mean_lp, quality = [], [], [], []
        counts = {True: [0, 0], False: [0, 0]}  # flagged -> [absent, all]
        started = time.perf_counter()
        translations = model.translate_batch(sources, scores=True)
        seconds = time.perf_counter() - started
        for t, ref in zip(translations, references):
            best = t.best
            if best is None:
                continue
            confidence.append(best.confidence)
            mean_lp.append(mean_log_prob(best.token_log_probs))
            raw.append(math.exp(mean_lp[-1]))
            quality.append(chrf.sentence_score(best.text, [ref]).score / 100)
            in_ref = {normal(w) for w in ref.split()}
            for word, c in best.word_confidences:
                if not normal(word):
                    continue
                flagged = c < args.threshold
                counts[flagged][0] += normal(word) not in in_ref
                counts[flagged][1] += 1
        absent = {k: v[0] / max(v[1], 1) for k, v in counts.items()}
        print(
            f"{name:<18} {len(quality):9d} {seconds:8.2f} {spearman(confidence, quality):13.3f} "
            f"{spearman(mean_lp, quality):11.3f} {calibration_error(raw, quality):8.3f} "
            f"{calibration_error(confidence, quality):8.3f} "
            f"{absent[True]:9.3f} ({counts[True][1]}) {absent[False]:10.3f} ({counts[False][1]}) "
            f"{absent[True] / max(absent[False], 1e-9):6.2f}x",
            flush=True,
        )
    if args.samples:  # on the last split's sources
        calibration = model.calibration
        model.translate_batch(sources[:50], scores=True)  # warm-up
        for turn in (1, 2):
            for label, used in ((f"{args.samples} samples", calibration), ("no samples", None)):
                model.calibration = used
                started = time.perf_counter()
                model.translate_batch(sources, scores=True)
                seconds = time.perf_counter() - started
                print(f"cost, turn {turn}, {splits[-1]} with scores, {label:>10}: {seconds:7.2f} s", flush=True)


if __name__ == "__main__":
    main()
