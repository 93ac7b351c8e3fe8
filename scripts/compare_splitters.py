#!/usr/bin/env python
"""Sentence splitters on paragraphs made of Multi30k sentences: how often each finds exactly the sentences the
paragraph was made of, and how fast.

    python scripts/compare_splitters.py                      # val, en de fr cs, paragraphs of 2-5 sentences
    python scripts/compare_splitters.py --split test_2016_flickr --langs en de

Each paragraph joins 2 to 5 consecutive sentences with a space. Only sentences that end in . ! or ? are used
(a caption without a final full stop cannot be told from the start of the next one by any splitter). Printed per
splitter and language: paragraphs split exactly right, boundaries found (recall) and boundaries that are real
(precision), and sentences per second. Splitters: sentencex (what mtkit uses), pysbd (no Czech rules: English
ones are used for it), sentence-splitter (Moses' non-breaking prefixes) and a plain rule (a full stop, question
or exclamation mark, then a space) as the floor.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import describe, read_gz  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


# Paragraphs that trip splitters: abbreviations, titles, ordinals, numbers, quotes, ellipses; "|" marks the
# sentence boundaries a reader sees.
HARD = {
    "en": [
        "Mr. Smith and Dr. Jones walk to the U.S. border.|They arrive at 5 p.m. on Jan. 3.",
        "Is it raining?|Yes!|It is...",
        'He said "Stop."|Then he left.',
        "Visit www.example.com today.|It is 3.5 km away, i.e. close.",
        "The man, e.g. a doctor, goes home.|He is tired.",
        "St. Mary's church is old.|Prof. Lee visits it, etc.",
    ],
    "de": [
        "Ein Mann, z.B. ein Arzt, geht ca. 3 km nach Hause.|Er ist müde.",
        "Er geht zum 3. Mal nach Hause.|Es regnet.",
        "Am 3. Oktober 2020 spielt das Kind.|Es regnet.",
        "Das Kind spielt usw. im Garten, d.h. draußen.|Es regnet.",
        "Dr. Müller und Prof. Schmidt kommen.|Sie sind da.",
        'Er sagte: "Halt!"|Dann ging er.',
    ],
    "fr": [
        "M. Dupont arrive à la gare.|Il est en retard.",
        "Le Dr. Martin et Mme Durand arrivent.|Ils sont là.",
        "Mme Dupont arrive, p. ex. à pied, vers 10 h.|Il est en retard.",
        "Est-ce qu'il pleut ?|Oui !|Il pleut...",
        "Le 1er janvier, etc. sont des fêtes.|On se repose.",
        "Il mesure 3,5 m.|C'est grand.",
    ],
    "cs": [
        "Muž jede na kole.|Dva psi si hrají ve sněhu.",
        "Např. pan Novák jde domů.|Je unavený.",
        "Dr. Novák a prof. Svoboda přicházejí.|Jsou tady.",
        "Přijde 3. května.|Bude pršet.",
        "Prší?|Ano!|Prší...",
        "Jde domů, tj. do vesnice.|Je unavený.",
    ],
}


def splitters(lang: str) -> dict:
    out = {}
    from sentencex import segment

    out["sentencex"] = lambda text: list(segment(lang, text))
    try:
        import pysbd

        seg = pysbd.Segmenter(language=lang if lang in pysbd.languages.LANGUAGE_CODES else "en", clean=False)
        out["pysbd"] = seg.segment
    except ImportError:
        pass
    try:
        from sentence_splitter import SentenceSplitter

        out["sentence-splitter"] = SentenceSplitter(language=lang).split
    except ImportError:
        pass
    out["rule: [.!?] + space"] = lambda text: re.split(r"(?<=[.!?])\s+", text)
    return out


def paragraphs(sentences: list[str], seed: int) -> list[list[str]]:
    rng = random.Random(seed)
    usable = [s.strip() for s in sentences if s.strip().endswith((".", "!", "?"))]
    out, i = [], 0
    while i < len(usable):
        k = rng.randint(2, 5)
        out.append(usable[i : i + k])
        i += k
    return out


def boundaries(parts: list[str]) -> set[int]:
    """Character offsets (in the paragraph without spaces) where a sentence ends."""
    out, at = set(), 0
    for part in parts[:-1]:
        at += len("".join(part.split()))
        out.add(at)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--split", default="val")
    parser.add_argument("--langs", nargs="+", default=["en", "de", "fr", "cs"])
    parser.add_argument("--data", default=None, help="folder of SPLIT.LANG.gz (default: data/multi30k)")
    args = parser.parse_args()
    print(describe())
    data = Path(args.data) if args.data else ROOT / "data" / "multi30k"
    print(
        "| language, paragraphs | splitter | paragraphs exactly right | boundary recall | boundary precision | sentences/s |"
    )
    print("|---|---|---:|---:|---:|---:|")
    for lang in args.langs:
        path = data / f"{args.split}.{lang}.gz"
        if not path.exists():
            print(f"| {lang} | ({path} not found) | | | | |")
            continue
        sets = [
            (args.split, paragraphs(read_gz(str(path)), seed=1)),
            ("hard cases", [h.split("|") for h in HARD[lang]]),
        ]
        for (kind, paras), (name, fn) in ((k, f) for k in sets for f in splitters(lang).items()):
            exact = found = true = correct = 0
            started = time.perf_counter()
            outputs = [[s.strip() for s in fn(" ".join(p)) if s.strip()] for p in paras]
            seconds = time.perf_counter() - started
            for para, out in zip(paras, outputs):
                want, got = boundaries(para), boundaries(out)
                exact += out == para
                true += len(want)
                found += len(got)
                correct += len(want & got)
            sentences = sum(map(len, paras))
            print(
                f"| {lang}, {kind} | {name} | {exact / len(paras):.1%} ({exact}/{len(paras)}) | {correct / true:.1%} | "
                f"{correct / max(found, 1):.1%} | {sentences / seconds:,.0f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
