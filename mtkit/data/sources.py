"""Reading parallel corpora for ``mtkit prepare``: line-aligned plain or gzip files, and local Hugging Face datasets.

Each source is a stream of ``(src, tgt)`` text pairs, read one line (or one batch of rows) at a time; a pair
skipped for invalid UTF-8 is ``None``. Errors name the file and line, or the config key to fix.
"""

from __future__ import annotations

import gzip
import os
import random
import zlib
from itertools import chain, zip_longest
from pathlib import Path
from typing import Iterator, Optional

from mtkit.errors import MtkitError

ROWS_PER_BATCH = 10_000  # rows read from a Hugging Face dataset at a time

Pair = Optional[tuple[str, str]]  # None marks a pair skipped for invalid UTF-8


def hf_paths(hf) -> list[Path]:
    """data_files are taken relative to ``path`` when that is a directory; without data_files, ``path``
    itself is the data (a save_to_disk directory, or one file / directory of files for the builder)."""
    base = Path(hf.path)
    if hf.format == "disk" or not hf.data_files:
        return [base]
    return [base / f if base.is_dir() else Path(f) for f in hf.data_files.values()]


def open_sources(cfg, hf_cache: Path) -> tuple[dict[str, Iterator[Pair]], dict[str, dict]]:
    """split -> pair iterator (train first), and split -> a description for the manifest."""
    sources: dict[str, Iterator[Pair]] = {}
    described: dict[str, dict] = {}
    if cfg.hf is not None:
        for split, (dataset, where) in _load_hf(cfg, hf_cache).items():
            sources[split] = _hf_pairs(dataset, where, cfg)
            described[split] = {"hf": where}
    for split, spec in cfg.splits.items():  # files override a same-named HF split
        sources[split] = file_pairs(Path(spec.src), Path(spec.tgt), cfg.skip_bad_lines)
        described[split] = {"src": spec.src, "tgt": spec.tgt}
    order = ["train"] + [s for s in sources if s != "train"]
    return {s: sources[s] for s in order}, {s: described[s] for s in order}


def describe(source: dict) -> str:
    return source.get("hf") or f"{source['src']} / {source['tgt']}"


def _open_binary(path: Path):
    with open(path, "rb") as f:
        magic = f.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb", buffering=1 << 20)


SKIP_HINT = "set data.skip_bad_lines: true"


def _decode(raw: bytes, path: Path, lineno: int, skip_bad: bool, skip_hint: str = SKIP_HINT) -> Optional[str]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        if skip_bad:
            return None
        raise MtkitError(
            f"{path}:{lineno}: invalid UTF-8 (byte 0x{raw[err.start]:02x} at byte {err.start + 1} "
            f"of the line); fix the file or {skip_hint}"
        ) from None
    if lineno == 1 and text.startswith("\ufeff"):
        text = text[1:]  # UTF-8 byte order mark
    return text


def file_pairs(src_path: Path, tgt_path: Path, skip_bad: bool, skip_hint: str = SKIP_HINT) -> Iterator[Pair]:
    """Stream decoded line pairs of two line-aligned files; one line at a time, plain or gzip. ``skip_hint``: how
    the invalid UTF-8 error tells to skip such lines instead."""
    try:
        with _open_binary(src_path) as fs, _open_binary(tgt_path) as ft:
            for lineno, (raw_src, raw_tgt) in enumerate(zip_longest(fs, ft), 1):
                if raw_src is None or raw_tgt is None:
                    n_src = lineno - 1 + (raw_src is not None) + sum(1 for _ in fs)
                    n_tgt = lineno - 1 + (raw_tgt is not None) + sum(1 for _ in ft)
                    raise MtkitError(
                        f"{src_path} has {n_src} lines but {tgt_path} has {n_tgt}; parallel files must be line-aligned"
                    )
                src = _decode(raw_src, src_path, lineno, skip_bad, skip_hint)
                tgt = _decode(raw_tgt, tgt_path, lineno, skip_bad, skip_hint)
                yield None if src is None or tgt is None else (src, tgt)
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise MtkitError(f"{src_path} / {tgt_path}: corrupt gzip data ({err}); re-download or decompress it") from None


def text_lines(path: Path, skip_bad: bool, skip_hint: str = SKIP_HINT) -> Iterator[Optional[str]]:
    """Stream the decoded lines of one file (plain or gzip), without their line break; a line skipped for invalid
    UTF-8 (``skip_bad``) is None, else invalid UTF-8 is an error naming the file and line."""
    try:
        with _open_binary(path) as f:
            for lineno, raw in enumerate(f, 1):
                text = _decode(raw, path, lineno, skip_bad, skip_hint)
                yield None if text is None else text.rstrip("\r\n")
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise MtkitError(f"{path}: corrupt gzip data ({err}); re-download or decompress it") from None


def mixed_train(cfg, train: Iterator[Pair], train_pairs: int) -> tuple[Iterator[Pair], list[dict]]:
    """The train split followed by each part of ``cfg.mix``, drawn to its ratio.

    A part of n pairs gives m = round(ratio x train_pairs) pairs: every pair m // n times, and m % n of them once
    more, drawn without replacement by the part's seed; the pairs keep the file's order (the trainer shuffles).

    Args:
        cfg: the data section (``mix``, ``skip_bad_lines``).
        train: the pairs of data.splits.train.
        train_pairs: how many pairs ``train`` holds (lines read, before cleaning).

    Returns:
        The pairs, and per part {"src", "tgt", "ratio", "seed", "pairs_read", "pairs_drawn"} for the manifest.
    """
    plans, described = [], []
    for part in cfg.mix:
        n = sum(1 for _ in file_pairs(Path(part.src), Path(part.tgt), cfg.skip_bad_lines))
        m = round(part.ratio * train_pairs) if n else 0
        repeats, extra = divmod(m, n) if n else (0, 0)
        plans.append((part, repeats, set(random.Random(part.seed).sample(range(n), extra))))
        described.append(
            {
                "src": part.src,
                "tgt": part.tgt,
                "ratio": part.ratio,
                "seed": part.seed,
                "pairs_read": n,
                "pairs_drawn": m,
            }
        )

    def drawn(part, repeats: int, once_more: set) -> Iterator[Pair]:
        for i, pair in enumerate(file_pairs(Path(part.src), Path(part.tgt), cfg.skip_bad_lines)):
            times = repeats + (i in once_more)
            if pair is None and times:
                yield None  # counted once as a line skipped for invalid UTF-8
                continue
            for _ in range(times):
                yield pair

    return chain(train, *(drawn(*plan) for plan in plans)), described


def _load_hf(cfg, cache_dir: Path) -> dict[str, tuple[object, str]]:
    """Load the local HF dataset; return our split name -> (Dataset, description)."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # local files only, never the hub
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    hf = cfg.hf
    try:
        if hf.format == "disk":
            loaded = datasets.load_from_disk(hf.path)
        else:
            paths = hf_paths(hf)
            files = (
                {name: str(p) for name, p in zip(hf.data_files, paths)} if hf.data_files else {"train": str(paths[0])}
            )
            loaded = datasets.load_dataset(hf.format, data_files=files, cache_dir=str(cache_dir))
    except MtkitError:
        raise
    except Exception as err:  # datasets raises many types for unreadable input
        first = (str(err).strip().splitlines() or [err.__class__.__name__])[0]
        raise MtkitError(f"data.hf: cannot load {hf.path} as {hf.format}: {first}") from None
    if isinstance(loaded, datasets.Dataset):
        return {"train": (loaded, f"{hf.path}")}
    found = {}
    for ours, theirs in hf.splits.items():
        if theirs in loaded:
            found[ours] = (loaded[theirs], f"{hf.path}[{theirs}]")
    if "train" not in found:
        raise MtkitError(
            f"data.hf.splits.train: {hf.path} has no split {hf.splits.get('train', 'train')!r} "
            f"(it has {', '.join(loaded)}); set data.hf.splits.train"
        )
    return found


def _hf_pairs(dataset, where: str, cfg) -> Iterator[Pair]:
    hf, columns = cfg.hf, dataset.column_names
    if hf.src_field is None and hf.tgt_field is None and "translation" in columns:
        for batch in dataset.iter(batch_size=ROWS_PER_BATCH):
            for row in batch["translation"]:
                row = row or {}
                for lang in (cfg.src_lang, cfg.tgt_lang):
                    if lang not in row:
                        raise MtkitError(
                            f"{where}: 'translation' has no {lang!r} (it has {', '.join(row) or 'nothing'}); "
                            "check data.src_lang / data.tgt_lang"
                        )
                yield _text(row[cfg.src_lang]), _text(row[cfg.tgt_lang])
        return
    src_field, tgt_field = hf.src_field or cfg.src_lang, hf.tgt_field or cfg.tgt_lang
    for key, field in (("src_field", src_field), ("tgt_field", tgt_field)):
        if field not in columns:
            raise MtkitError(
                f"{where}: no column {field!r} (columns: {', '.join(columns)}); set data.hf.{key} "
                "or use a 'translation' column"
            )
    for batch in dataset.iter(batch_size=ROWS_PER_BATCH):
        for src, tgt in zip(batch[src_field], batch[tgt_field]):
            yield _text(src), _text(tgt)


def _text(value) -> str:
    return "" if value is None else value if isinstance(value, str) else str(value)
