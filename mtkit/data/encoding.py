"""Token arrays on disk: a split's cleaned text files encoded chunk by chunk into ``{split}.{lang}.bin`` (all token
ids, concatenated) and ``.idx`` (int64 offsets, N + 1), and the sampled-segmentation copies of the training split
(``mtkit prepare``, data.subword_samples). ``data.batches`` reads them back, memory-mapped."""

from __future__ import annotations

from itertools import chain, compress, islice
from pathlib import Path
from typing import Iterator

import numpy as np

from mtkit.tokenizer import Tokenizer, seed_sampling

CHUNK_LINES = 10_000  # lines encoded per SentencePiece batch call


def token_dtype(vocab_size: int):
    """The dtype of a side's token ids: uint16 while the vocabulary fits, else int32."""
    return np.uint16 if vocab_size <= 65535 else np.int32


def read_chunks(paths: tuple[Path, Path], size: int) -> Iterator[tuple[list[str], list[str]]]:
    """Line-aligned chunks of the two cleaned text files (lines without their newline)."""
    with open(paths[0], encoding="utf-8", newline="\n") as fs, open(paths[1], encoding="utf-8", newline="\n") as ft:
        while True:
            src = [line[:-1] for line in islice(fs, size)]
            tgt = [line[:-1] for line in islice(ft, size)]
            if not src:
                return
            yield src, tgt


def array_names(prefix: str, langs: tuple[str, str]) -> dict:
    """Each side's file names: ``{"src": {"bin": "train.en.bin", "idx": "train.en.idx"}, "tgt": {...}}``."""
    return {
        side: {"bin": f"{prefix}.{lang}.bin", "idx": f"{prefix}.{lang}.idx"}
        for side, lang in zip(("src", "tgt"), langs)
    }


def lengths_of(ids: list[list[int]]) -> np.ndarray:
    """Each sentence's number of token ids."""
    return np.fromiter(map(len, ids), np.int64, count=len(ids))  # (n,)


def write_arrays(chunks: Iterator[tuple[list, list]], build_dir: Path, names: dict, dtypes: dict) -> dict:
    """Stream (src id lists, tgt id lists) chunks into the flat token files and their (N + 1,) int64 offsets."""
    lengths = {"src": [], "tgt": []}  # per chunk: (n,) int64
    with open(build_dir / names["src"]["bin"], "wb") as src_bin, open(build_dir / names["tgt"]["bin"], "wb") as tgt_bin:
        for src_ids, tgt_ids in chunks:
            for ids, out, side in ((src_ids, src_bin, "src"), (tgt_ids, tgt_bin, "tgt")):
                lens = lengths_of(ids)
                flat = np.fromiter(chain.from_iterable(ids), dtypes[side], count=int(lens.sum()))  # (tokens,)
                out.write(flat.tobytes())
                lengths[side].append(lens)
    counts = {}
    for side in ("src", "tgt"):
        lens = np.concatenate(lengths[side]) if lengths[side] else np.zeros(0, np.int64)
        offsets = np.zeros(len(lens) + 1, np.int64)  # (N + 1,)
        np.cumsum(lens, out=offsets[1:])
        (build_dir / names[side]["idx"]).write_bytes(offsets.tobytes())
        counts[f"{side}_tokens"] = int(offsets[-1])
        counts["sentences"] = len(lens)
    return counts


def encode_samples(
    tokenizer: Tokenizer,
    text_paths,
    build_dir: Path,
    langs: tuple[str, str],
    dtypes: dict,
    keeps: list[np.ndarray],
    cfg,
) -> list[dict]:
    """Write ``cfg.subword_samples`` copies of the training split, each with freshly sampled segmentations
    (``train.s{k}.{lang}.bin`` / ``.idx``) of exactly the pairs the deterministic encoding kept, in its order.

    A sampled copy can exceed data.max_tokens a little: the filters judge the deterministic segmentation, so
    that every copy holds the same sentences. Copy k is reproducible: the sampler is seeded with k + 1.
    """
    copies = []
    for k in range(cfg.subword_samples):
        seed_sampling(k + 1)

        def chunks():
            for (src_lines, tgt_lines), keep in zip(read_chunks(text_paths, CHUNK_LINES), keeps):
                src_lines, tgt_lines = list(compress(src_lines, keep)), list(compress(tgt_lines, keep))
                yield (
                    tokenizer.encode_src(src_lines, cfg.src_subword_alpha),
                    tokenizer.encode_tgt(tgt_lines, cfg.tgt_subword_alpha),
                )

        names = array_names(f"train.s{k}", langs)
        counts = write_arrays(chunks(), build_dir, names, dtypes)
        copies.append({**names, "src_tokens": counts["src_tokens"], "tgt_tokens": counts["tgt_tokens"]})
    return copies
