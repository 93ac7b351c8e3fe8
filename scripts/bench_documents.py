#!/usr/bin/env python
"""Paragraphs, inline markup and documents, measured on a trained English-German run.

    python scripts/bench_documents.py runs/demo
    python scripts/bench_documents.py runs/demo --split val --skip-formats

Printed, on test_2016_flickr (or --split):
1. One sentence per line, sentence splitting on and off: BLEU / chrF of each and how many lines differ.
2. Paragraph mode against line mode: the sentences joined 2 to 5 at a time into paragraphs, each paragraph
   translated as one segment, against each sentence translated as a line (then joined the same way):
   paragraphs whose translation is identical, document-level BLEU of both, sentences/s of both.
3. Tag placement: in each sentence holding a word of a small table of unambiguous words (colours, numbers,
   common nouns), that word wrapped in <b>; counted over the sentences whose plain translation has the table's
   translation of the word: the output is well-formed, its text without tags equals the plain translation, and
   <b> encloses that translation.
4. Documents: the sentences as a .txt, .md, .html, .docx, .srt, .po and .xliff document (each built with its
   format's library), translated with `translate_file`: size, seconds, sentences/s, and sentences/s against
   line mode.
"""

from __future__ import annotations

import argparse
import io
import random
import re
import sys
import tempfile
import time
from html.parser import HTMLParser
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import describe, read_gz  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

# English word -> the start every German translation of it has (case-sensitive: nouns are capitalised)
UNAMBIGUOUS = {
    "red": "rot",
    "blue": "blau",
    "green": "grün",
    "yellow": "gelb",
    "black": "schwarz",
    "white": "weiß",
    "orange": "orange",
    "pink": "rosa",
    "two": "zwei",
    "three": "drei",
    "four": "vier",
    "dog": "Hund",
    "man": "Mann",
    "woman": "Frau",
    "girl": "Mädchen",
    "boy": "Junge",
    "child": "Kind",
    "ball": "Ball",
    "bike": "Fahrrad",
    "car": "Auto",
    "water": "Wasser",
    "beach": "Strand",
    "street": "Straße",
    "hat": "Hut",
    "shirt": "Hemd",
    "snow": "Schnee",
    "guitar": "Gitarre",
}


def bleu_chrf(hyps: list[str], refs: list[str]) -> tuple[float, float]:
    import sacrebleu

    return sacrebleu.corpus_bleu(hyps, [refs]).score, sacrebleu.corpus_chrf(hyps, [refs]).score


def timed(fn):
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def group(items: list, seed: int = 1) -> list[list]:
    rng, out, i = random.Random(seed), [], 0
    while i < len(items):
        k = rng.randint(2, 5)
        out.append(items[i : i + k])
        i += k
    return out


class WellFormed(HTMLParser):
    def __init__(self):
        super().__init__()
        self.stack, self.ok = [], True

    def handle_starttag(self, tag, attrs):
        self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.ok = False
        else:
            self.stack.pop()


def well_formed(fragment: str) -> bool:
    checker = WellFormed()
    checker.feed(fragment)
    checker.close()
    return checker.ok and not checker.stack


def placement(model, sources: list[str]) -> None:
    cases = []
    for source in sources:
        for m in re.finditer(r"[A-Za-z]+", source):
            if m.group().lower() in UNAMBIGUOUS:
                word = UNAMBIGUOUS[m.group().lower()]
                tagged = source[: m.start()] + "<b>" + m.group() + "</b>" + source[m.end() :]
                cases.append((source, tagged, word))
                break
    plain = model.translate([c[0] for c in cases])
    tagged = model.translate([c[1] for c in cases], format="html")
    eligible = formed = same = placed = 0
    for (_, _, word), p, t in zip(cases, plain, tagged):
        if not re.search(r"(?<!\w)" + re.escape(word), p, flags=re.IGNORECASE if word.islower() else 0):
            continue
        eligible += 1
        formed += well_formed(t)
        same += re.sub(r"<[^>]*>", "", t) == p
        inside = re.findall(r"<b>(.*?)</b>", t)
        hit = bool(inside) and any(re.search(r"(?<!\w)" + re.escape(word), x, flags=re.IGNORECASE) for x in inside)
        placed += hit
    print(f"{len(cases)} sentences with a tagged word, {eligible} whose plain translation has the word's translation")
    print(f"  well-formed: {formed}/{eligible} ({formed / max(eligible, 1):.1%})")
    print(f"  text without tags = plain translation: {same}/{eligible} ({same / max(eligible, 1):.1%})")
    print(f"  <b> around the word's translation: {placed}/{eligible} ({placed / max(eligible, 1):.1%})")


def documents(model, sources: list[str], line_rate: float) -> None:
    paras = [" ".join(p) for p in group(sources)]
    builders = {
        "txt": lambda: ("\n\n".join(paras) + "\n").encode(),
        "md": lambda: "".join(f"## Part {i}\n\n{p}\n\n" for i, p in enumerate(paras)).encode(),
        "html": lambda: (
            "<!DOCTYPE html><html><head><title>Captions</title></head><body>"
            + "".join(f"<p>{p}</p>\n" for p in paras)
            + "</body></html>"
        ).encode(),
        "docx": lambda: _docx(paras),
        "srt": lambda: _srt(sources),
        "po": lambda: _po(sources),
        "xliff": lambda: _xliff(sources),
    }
    print("| format | bytes | sentences | seconds | sentences/s | x line mode |")
    print("|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for fmt, build in builders.items():
            try:
                data = build()
            except ImportError as err:
                print(f"| {fmt} | (needs {err.name}) | | | | |")
                continue
            src, dst = Path(tmp) / f"in.{fmt}", Path(tmp) / f"out.{fmt}"
            src.write_bytes(data)
            stats, seconds = timed(lambda src=src, dst=dst: model.translate_file(src, dst))
            rate = stats.sentences / seconds
            print(
                f"| {fmt} | {len(data):,} | {stats.sentences} | {seconds:.2f} | {rate:.1f} | {rate / line_rate:.2f} |"
            )


def _docx(paras: list[str]) -> bytes:
    import docx

    document = docx.Document()
    document.add_heading("Captions", level=1)
    for p in paras:
        document.add_paragraph(p)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _srt(sentences: list[str]) -> bytes:
    import datetime

    import srt

    subs = [
        srt.Subtitle(i + 1, datetime.timedelta(seconds=2 * i), datetime.timedelta(seconds=2 * i + 1.5), s)
        for i, s in enumerate(sentences)
    ]
    return srt.compose(subs).encode()


def _po(sentences: list[str]) -> bytes:
    import polib

    po = polib.POFile()
    po.metadata = {"Content-Type": "text/plain; charset=UTF-8"}
    for i, s in enumerate(sentences):
        po.append(polib.POEntry(msgid=s, msgstr="", occurrences=[("captions.py", str(i + 1))]))
    return str(po).encode()


def _xliff(sentences: list[str]) -> bytes:
    from translate.storage import xliff

    store = xliff.xlifffile(sourcelanguage="en", targetlanguage="de")
    for i, s in enumerate(sentences):
        unit = store.addsourceunit(s)
        unit.setid(str(i + 1))
    return bytes(store)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--skip-formats", action="store_true")
    args = parser.parse_args()

    import mtkit

    model = mtkit.load(args.run, beam_size=args.beam_size, threads=args.threads)
    print(describe())
    print(f"{args.run}: {args.split}, beam {args.beam_size}")
    sources = read_gz(ROOT / "data" / "multi30k" / f"{args.split}.en.gz")
    refs = read_gz(ROOT / "data" / "multi30k" / f"{args.split}.de.gz")
    model.translate(sources[:50])  # warm-up

    print("\n1. one sentence per line")
    split_on, on_s = timed(lambda: model.translate(sources))
    split_off, off_s = timed(lambda: model.translate(sources, split_sentences=False))
    b_on, c_on = bleu_chrf(split_on, refs)
    b_off, c_off = bleu_chrf(split_off, refs)
    differ = sum(a != b for a, b in zip(split_on, split_off))
    print(f"  split on:  BLEU {b_on:.2f} chrF {c_on:.2f}, {len(sources) / on_s:.1f} sentences/s")
    print(f"  split off: BLEU {b_off:.2f} chrF {c_off:.2f}, {len(sources) / off_s:.1f} sentences/s")
    print(f"  lines whose translation differs: {differ}")

    print("\n2. paragraphs of 2-5 sentences against the same sentences as lines")
    groups = group(list(range(len(sources))))
    paragraphs = [" ".join(sources[i] for i in g) for g in groups]
    para_out, para_s = timed(lambda: model.translate(paragraphs))
    lines_out, line_s = timed(lambda: model.translate(sources, split_sentences=False))
    joined = [" ".join(lines_out[i] for i in g) for g in groups]
    ref_docs = [" ".join(refs[i] for i in g) for g in groups]
    same = sum(a == b for a, b in zip(para_out, joined))
    print(f"  paragraphs identical to the joined line translations: {same}/{len(groups)}")
    ended = [k for k, g in enumerate(groups) if all(sources[i].rstrip().endswith((".", "!", "?")) for i in g[:-1])]
    same_ended = sum(para_out[k] == joined[k] for k in ended)
    print(f"    of those whose sentences all end in . ! or ? (a splitter's only cue): {same_ended}/{len(ended)}")
    print(
        f"  document BLEU: paragraphs {bleu_chrf(para_out, ref_docs)[0]:.2f}, lines {bleu_chrf(joined, ref_docs)[0]:.2f}"
    )
    line_rate = len(sources) / line_s
    print(f"  sentences/s: paragraphs {len(sources) / para_s:.1f}, lines {line_rate:.1f}")

    print("\n3. tag placement")
    placement(model, sources)

    if not args.skip_formats:
        print("\n4. documents")
        documents(model, sources, line_rate)
    return 0


if __name__ == "__main__":
    sys.exit(main())
