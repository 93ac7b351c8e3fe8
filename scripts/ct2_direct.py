#!/usr/bin/env python
"""Translate stdin to stdout with CTranslate2 and SentencePiece alone (no mtkit), on a dir `mtkit export` wrote:
the reference a whole `mtkit translate --engine ctranslate2` process is timed against (docs/benchmarks.md,
section 12: both commands over the same file, taking turns).

    python scripts/ct2_direct.py runs/demo-ct2 --beam-size 5 < source.txt > output.txt

The same batches as mtkit's engine (sorted by length, --batch-size sentences) and the same output limit per batch
(ceil(a * source length with EOS + b), the longest of the batch); empty lines give empty lines.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("export", type=Path)
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=200)
    parser.add_argument("--compute-type", default="default")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--max-len-a", type=float, default=1.5)
    parser.add_argument("--max-len-b", type=float, default=10)
    args = parser.parse_args()

    import ctranslate2
    import sentencepiece as spm

    meta = json.loads((args.export / "mtkit_export.json").read_text())
    files = meta["tokenizer"]
    sp_src = spm.SentencePieceProcessor(model_file=str(args.export / files["src"]))
    sp_tgt = spm.SentencePieceProcessor(model_file=str(args.export / files["tgt"]))
    translator = ctranslate2.Translator(
        str(args.export), device="cpu", compute_type=args.compute_type, intra_threads=args.threads
    )
    lines = sys.stdin.read().splitlines()
    pieces = sp_src.encode(lines, out_type=str)
    out = [""] * len(lines)
    order = sorted((i for i in range(len(lines)) if pieces[i]), key=lambda i: len(pieces[i]))
    for start in range(0, len(order), args.batch_size):
        idx = order[start : start + args.batch_size]
        limit = max(math.ceil(args.max_len_a * (len(pieces[i]) + 1) + args.max_len_b - 1e-6) for i in idx)
        results = translator.translate_batch(
            [pieces[i] for i in idx],
            beam_size=args.beam_size,
            max_batch_size=args.batch_size,
            max_decoding_length=limit,
        )
        for i, text in zip(idx, sp_tgt.decode([r.hypotheses[0] for r in results])):
            out[i] = text
    sys.stdout.write("".join(line + "\n" for line in out))


if __name__ == "__main__":
    main()
