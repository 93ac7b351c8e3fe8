#!/usr/bin/env python
"""Language identifiers on Multi30k sentences: accuracy and time per sentence, with the candidates held to the
languages a server reads and with every language the identifier knows.

    python scripts/compare_detectors.py                 # val, en de fr cs
    python scripts/compare_detectors.py --split test_2016_flickr

Identifiers whose model ships in their package: py3langid (langid.py's model, 97 languages) and lingua (75
languages, high-accuracy mode). Printed per identifier and candidate set: sentences identified right (and per
language), p50 and mean milliseconds per sentence (one sentence at a time, as a request brings them).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import describe, read_gz  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def py3langid(candidates):
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    if candidates:
        identifier.set_languages(candidates)
    return lambda text: identifier.classify(text)[0]


def lingua(candidates):
    from lingua import IsoCode639_1, Language, LanguageDetectorBuilder

    if candidates:
        languages = [Language.from_iso_code_639_1(getattr(IsoCode639_1, c.upper())) for c in candidates]
        builder = LanguageDetectorBuilder.from_languages(*languages)
    else:
        builder = LanguageDetectorBuilder.from_all_languages()
    detector = builder.build()

    def detect(text):
        found = detector.detect_language_of(text)
        return found.iso_code_639_1.name.lower() if found else ""

    return detect


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", default="val")
    parser.add_argument("--langs", nargs="+", default=["en", "de", "fr", "cs"])
    args = parser.parse_args()
    print(describe())
    data = {lang: read_gz(ROOT / "data" / "multi30k" / f"{args.split}.{lang}.gz") for lang in args.langs}
    print("| identifier | candidates | right | " + " | ".join(args.langs) + " | p50 ms | mean ms |")
    print("|---|---|---:|" + "---:|" * len(args.langs) + "---:|---:|")
    for name, build in (("py3langid", py3langid), ("lingua", lingua)):
        for candidates in (args.langs, None):
            detect = build(candidates)
            detect("warm up")
            right, per, times = 0, {}, []
            for lang, sentences in data.items():
                hits = 0
                for sentence in sentences:
                    started = time.perf_counter()
                    found = detect(sentence)
                    times.append(time.perf_counter() - started)
                    hits += found == lang
                per[lang] = hits / len(sentences)
                right += hits
            total = sum(map(len, data.values()))
            label = "the server's" if candidates else "all it knows"
            print(
                f"| {name} | {label} | {right / total:.1%} | "
                + " | ".join(f"{per[lang]:.1%}" for lang in args.langs)
                + f" | {statistics.median(times) * 1000:.3f} | {statistics.fmean(times) * 1000:.3f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
