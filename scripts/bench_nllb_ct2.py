#!/usr/bin/env python
"""Decoding an NLLB-200-shaped model on the CPU: the torch engine against its CTranslate2 export, int8.

    python scripts/bench_nllb_ct2.py [--shape nllb-600m] [--sentences 100] [--output-tokens 24] [--threads 2]
    python scripts/bench_nllb_ct2.py --smoke     # a tiny model, a few sentences: every step, no figure to keep

Random weights stand in for the released ones (speed and memory depend on the shape alone): the script trains a
SentencePiece model on Multi30k's English and German (8,000 pieces), writes a transformers
``M2M100ForConditionalGeneration`` directory of the shape with NllbTokenizer's files (the rows past the tokenizer's
pieces and language codes unnamed, up to the shape's 256,206), imports it (`mtkit import-hf`), exports it
(`mtkit export --quantization int8`), then translates test_2016_flickr's first --sentences English sentences into
German (eng_Latn -> deu_Latn), greedy and beam 4, with each engine in this process after one warm-up batch:
the torch engine at ``dtype: auto`` (int8 where PyTorch has x86 int8 kernels) and float32, and the export, then
the export through ``ctranslate2.Translator.translate_batch`` alone (``ctranslate2 direct``).
A random model seldom ends a sentence before --output-tokens tokens (``max_len_a 0``), and the tokens are
counted: the target tokens/s compare like with like. Printed: the CPU, each step's seconds, the export's size and a table of
sentences/s and target tokens/s per engine and search, with each one's ratio to the torch engine's ``auto``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench_lora import SHAPES as MODEL_SHAPES  # noqa: E402
from benchlib import describe, read_gz  # noqa: E402

SHAPES = {  # d_model, encoder layers, decoder layers, heads, FFN, vocabulary rows
    "nllb-600m": MODEL_SHAPES["nllb-600m"],
    "smoke": (32, 1, 1, 2, 64, 600),  # rows for 300 pieces, NLLB's 202 language codes and the specials
}
MULTI30K = ROOT / "data" / "multi30k"


def step(name: str, start: float) -> None:
    print(f"{name}: {time.perf_counter() - start:.1f} s", flush=True)


def build_nllb_dir(directory: Path, shape: tuple, pieces: int, smoke: bool) -> None:
    """A random NLLB-shaped transformers directory: SentencePiece model, NllbTokenizer's files, weights."""
    import sentencepiece as spm
    import torch
    from transformers import M2M100Config, M2M100ForConditionalGeneration, NllbTokenizer
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    directory.mkdir(parents=True)
    lines = [line for lang in ("en", "de") for line in read_gz(MULTI30K / f"train.{lang}.gz")]
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines[:2000] if smoke else lines),
        model_prefix=str(directory / "sentencepiece.bpe"),
        vocab_size=pieces,
        model_type="bpe",
        minloglevel=2,
    )
    (directory / "sentencepiece.bpe.vocab").unlink()
    config = {"tokenizer_class": "NllbTokenizer", "extra_special_tokens": FAIRSEQ_LANGUAGE_CODES}
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    tokenizer = NllbTokenizer.from_pretrained(directory)
    tokenizer.save_pretrained(directory)
    d, enc, dec, heads, ffn, rows = shape
    if rows < len(tokenizer):
        sys.exit(f"the shape's {rows} rows hold fewer than the tokenizer's {len(tokenizer)} tokens")
    model_config = M2M100Config(
        vocab_size=rows,
        d_model=d,
        encoder_layers=enc,
        decoder_layers=dec,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=ffn,
        decoder_ffn_dim=ffn,
        max_position_embeddings=1024,
        pad_token_id=1,
        bos_token_id=0,
        eos_token_id=2,
        decoder_start_token_id=2,
    )
    torch.manual_seed(0)
    M2M100ForConditionalGeneration(model_config).save_pretrained(directory)


def direct(model, sources: list[str], beam: int, args) -> tuple:
    """The export's row through ``ctranslate2.Translator.translate_batch`` alone: the engine's encoded sources and
    target prefix (the language token), its batches, no rescoring and no detokenising."""
    engine = model.engine
    pieces = [[engine.src_vocab[t] for t in ids] for ids in engine.encode([f"eng_Latn {s}" for s in sources])]
    prefix = [["deu_Latn"]] * len(pieces)
    options = dict(beam_size=beam, max_decoding_length=args.output_tokens + 1, max_batch_size=args.batch_size)
    engine.translator.translate_batch(pieces[: args.batch_size], target_prefix=prefix[: args.batch_size], **options)
    start = time.perf_counter()
    found = engine.translator.translate_batch(pieces, target_prefix=prefix, **options)
    seconds = time.perf_counter() - start
    tokens = sum(len(r.hypotheses[0]) for r in found)  # the prefix's token stands for the EOS counted elsewhere
    return "ctranslate2 direct", beam, len(sources) / seconds, tokens / seconds, "translate_batch alone"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="nllb-600m", choices=[s for s in SHAPES if s != "smoke"])
    ap.add_argument("--sentences", type=int, default=100, help="test_2016_flickr sentences translated")
    ap.add_argument("--output-tokens", type=int, default=24, help="target tokens of every output")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32, help="sentences per batch, both engines")
    ap.add_argument("--work", type=Path, default=Path("work/bench-nllb-ct2"), help="its folders (rebuilt)")
    ap.add_argument("--smoke", action="store_true", help="a tiny model and 6 sentences: a check, no result")
    args = ap.parse_args()
    shape = SHAPES["smoke" if args.smoke else args.shape]
    if args.smoke:
        args.sentences, args.output_tokens = 6, 4

    import torch

    import mtkit
    from mtkit.cli import main as cli

    torch.set_num_threads(args.threads)
    print(f"bench_nllb_ct2 {time.strftime('%Y-%m-%d %H:%M')}  {describe()}")
    print(
        f"shape {'smoke' if args.smoke else args.shape}: d_model {shape[0]}, {shape[1]}+{shape[2]} layers, FFN {shape[4]}"
    )
    shutil.rmtree(args.work, ignore_errors=True)
    hf_dir, run, export = args.work / "hf", args.work / "run", args.work / "ct2-int8"
    start = time.perf_counter()
    build_nllb_dir(hf_dir, shape, 300 if args.smoke else 8000, args.smoke)
    step("random model and tokenizer written", start)
    for name, argv in (
        ("import-hf", ["import-hf", str(hf_dir), "--output", str(run)]),
        ("export int8", ["export", str(run), "--output", str(export), "--quantization", "int8"]),
    ):
        start = time.perf_counter()
        if cli(argv) != 0:
            sys.exit(f"mtkit {name} failed")
        step(f"mtkit {name}", start)
    size = sum(p.stat().st_size for p in export.iterdir()) / 2**20
    print(f"export: {size:,.0f} MiB")
    shutil.rmtree(hf_dir)

    sources = read_gz(MULTI30K / "test_2016_flickr.en.gz")[: args.sentences]
    common = dict(source="eng_Latn", max_len_a=0, max_len_b=args.output_tokens, threads=args.threads)
    common.update(batch_size=args.batch_size)
    engines = (("torch auto", run, {"dtype": "auto"}), ("torch float32", run, {"dtype": "float32"}))
    engines += (("ctranslate2 int8", export, {}),)
    rows = []
    for beam in (1, 4):
        for name, path, extra in engines:
            model = mtkit.load(path, beam_size=beam, **common, **extra)
            model.translate(sources[: args.batch_size], target="deu_Latn")  # warm-up
            start = time.perf_counter()
            found = model.translate_batch(sources, target="deu_Latn", scores=False)
            seconds = time.perf_counter() - start
            tokens = sum(len(t.hypotheses[0].tokens) + 1 for t in found)  # with EOS
            rows.append((name, beam, len(sources) / seconds, tokens / seconds, model.engine.describe()))
            if name.startswith("ctranslate2"):
                rows.append(direct(model, sources, beam, args))
            del model
    print(f"{'engine':18} {'search':7} {'sent/s':>8} {'tgt tok/s':>10} {'x torch auto':>12}  engine line")
    for name, beam, rate, tok_rate, line in rows:
        base = next(r for r in rows if r[0] == "torch auto" and r[1] == beam)
        search = "greedy" if beam == 1 else f"beam {beam}"
        print(f"{name:18} {search:7} {rate:8.2f} {tok_rate:10.1f} {tok_rate / base[3]:11.2f}x  {line}")


if __name__ == "__main__":
    main()
