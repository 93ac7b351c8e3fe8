"""Parallel data: reading and cleaning corpora, binarised token arrays, token-budget batches, rank shards.

``prepare(data_cfg)`` turns parallel text (plain/.gz files or a local Hugging Face dataset) into a data dir:

    DIR/manifest.json                 what was built, from what, with per-split counts (written last)
    DIR/spm.model, spm.vocab          joint SentencePiece model (or spm.{src}.model + spm.{tgt}.model)
    DIR/{split}.{lang}.bin            all token ids of the split, concatenated; uint16 (vocab <= 65535) else int32
    DIR/{split}.{lang}.idx            int64 offsets, N+1 of them: sentence i is bin[idx[i]:idx[i+1]]
    DIR/{split}.{lang}.txt            cleaned text of non-train splits (references for validation BLEU)

No BOS/EOS is stored; ``collate`` adds them. Everything is built in a temp dir beside DIR and renamed
into place at the end, so an interrupted run never leaves a manifest pointing at partial data.

The trainer side (``ParallelData``, ``make_batches``, ``shard_batches``, ``collate``) reads those arrays
through memory maps. torch is imported only inside ``collate``.
"""

from __future__ import annotations

import dataclasses
import glob
import gzip
import hashlib
import json
import os
import shutil
import socket
import tempfile
import time
import zlib
from collections import Counter
from itertools import chain, compress, islice, zip_longest
from pathlib import Path
from typing import Iterator, Optional, Sequence

import numpy as np

from mtkit.errors import MtkitError
from mtkit.tokenizer import BOS, EOS, PAD, Tokenizer, seed_sampling, train_sentencepiece

FORMAT_VERSION = 1
CHUNK_LINES = 10_000  # lines encoded per SentencePiece batch call
LATER_KEYS = ("src_subword_alpha", "tgt_subword_alpha", "subword_samples")  # see _inputs_fingerprint
FILTER_REASONS = ("empty", "max_chars", "duplicate", "max_tokens", "length_ratio")  # train only

Pair = Optional[tuple[str, str]]  # None marks a pair skipped for invalid UTF-8


# ============================================================================================ prepare
def prepare(data_cfg, *, force: bool = False) -> dict:
    """Build ``data_cfg.dir`` from the configured corpus and return its manifest.

    A rerun with unchanged inputs and data config does nothing (unless ``force``).
    """
    started = time.perf_counter()
    out_dir = Path(data_cfg.dir)
    if data_cfg.src_lang == data_cfg.tgt_lang:
        raise MtkitError(f"data.src_lang and data.tgt_lang are both {data_cfg.src_lang!r}; they must differ")
    inputs = _input_files(data_cfg)
    fingerprint = _inputs_fingerprint(data_cfg, inputs)
    if not force:
        current = _current_manifest(out_dir, fingerprint)
        if current is not None:
            print(f"{out_dir}: up to date (inputs and data config unchanged); use --force to rebuild")
            return current
    _check_replaceable(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_builds(out_dir)
    build_dir = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.tmp-", dir=out_dir.parent))
    try:
        os.chmod(build_dir, 0o777 & ~_umask())  # mkdtemp makes it private; the data dir should not be
        (build_dir / BUILD_OWNER).write_text(f"{socket.gethostname()} {os.getpid()}\n", encoding="utf-8")
        manifest = _build(data_cfg, build_dir, fingerprint)
        (build_dir / BUILD_OWNER).unlink()
        _fsync_tree(build_dir)
        _replace_dir(build_dir, out_dir)
    except BaseException:
        shutil.rmtree(build_dir, ignore_errors=True)
        raise
    _print_summary(manifest, out_dir, time.perf_counter() - started)
    return manifest


BUILD_OWNER = ".owner"  # "host pid" of the prepare process building a folder
STALE_UNOWNED_SECONDS = 600


def _remove_stale_builds(out_dir: Path) -> None:
    """Delete build folders that a killed ``prepare`` left beside ``out_dir`` (``.NAME.tmp-*``, ``.NAME.old-*``).

    A folder is stale when its owner process (same host) is gone, or when it has no owner file and has not
    been touched for 10 minutes (a kill between creating it and writing the owner). Builds of live
    processes, and of other hosts sharing the folder, are left alone.
    """
    host = socket.gethostname()
    for build in out_dir.parent.glob(f".{glob.escape(out_dir.name)}.tmp-*"):
        if not build.is_dir() or build.is_symlink():
            continue
        try:
            owner_host, pid = (build / BUILD_OWNER).read_text(encoding="utf-8").split()
            stale = owner_host == host and not _process_alive(int(pid))
        except FileNotFoundError:
            try:
                stale = time.time() - build.stat().st_mtime > STALE_UNOWNED_SECONDS
            except FileNotFoundError:  # removed meanwhile
                continue
        except (OSError, ValueError, UnicodeDecodeError):
            continue  # unreadable: not ours to judge
        if stale:
            shutil.rmtree(build, ignore_errors=True)
            print(f"{build}: removed the unfinished build of an interrupted prepare")
    if out_dir.is_dir():  # the swap finished: any copy moved aside before it (``_replace_dir``) is garbage
        for old in out_dir.parent.glob(f".{glob.escape(out_dir.name)}.old-*"):
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old, ignore_errors=True)


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by another user
        return True
    return True


def read_manifest(data_dir) -> dict:
    path = Path(data_dir) / "manifest.json"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MtkitError(f"{path}: not found; run `mtkit prepare CONFIG` first") from None
    except (ValueError, UnicodeDecodeError):
        raise MtkitError(f"{path}: unreadable manifest; rerun `mtkit prepare CONFIG --force`") from None
    if manifest.get("version") != FORMAT_VERSION:
        raise MtkitError(f"{path}: data format version {manifest.get('version')} (expected {FORMAT_VERSION}); "
                         "rerun `mtkit prepare CONFIG --force`")
    return manifest


@dataclasses.dataclass
class SplitStats:
    pairs_read: int = 0
    pairs_kept: int = 0
    filtered: Counter = dataclasses.field(default_factory=Counter)
    bad_lines_skipped: int = 0
    src_tokens: int = 0
    tgt_tokens: int = 0

    def to_json(self, train: bool) -> dict:
        reasons = FILTER_REASONS if train else ()
        return dict(pairs_read=self.pairs_read, pairs_kept=self.pairs_kept,
                    filtered={r: self.filtered.get(r, 0) for r in reasons},
                    bad_lines_skipped=self.bad_lines_skipped,
                    src_tokens=self.src_tokens, tgt_tokens=self.tgt_tokens)


def _build(cfg, build_dir: Path, fingerprint: str) -> dict:
    src, tgt = cfg.src_lang, cfg.tgt_lang
    sources, described = _open_sources(cfg, build_dir / ".hf_cache")
    stats = {split: SplitStats() for split in sources}

    # pass 1: read, clean and (train only) filter by characters / duplicates -> cleaned text files
    text_files = {}
    for split, pairs in sources.items():
        text_files[split] = (build_dir / f"{split}.{src}.txt", build_dir / f"{split}.{tgt}.txt")
        _clean_split(pairs, text_files[split], stats[split], cfg, train=split == "train")
    train_stats = stats["train"]
    if train_stats.pairs_kept == 0:
        raise MtkitError(f"{_describe(described['train'])}: no training pairs left after cleaning "
                         f"({_filter_summary(train_stats)}); check the files or relax data.max_chars")
    shutil.rmtree(build_dir / ".hf_cache", ignore_errors=True)

    # SentencePiece on the cleaned training text (joint: both sides into one model)
    common = dict(vocab_size=cfg.vocab_size, model_type=cfg.spm_model_type,
                  character_coverage=cfg.character_coverage, input_sentence_size=cfg.spm_input_sentence_size)
    train_src, train_tgt = text_files["train"]
    if cfg.joint_vocab:
        model = train_sentencepiece([train_src, train_tgt], build_dir / "spm", **common)
        tokenizer_files = {"src": model.name, "tgt": model.name}
    else:
        src_model = train_sentencepiece([train_src], build_dir / f"spm.{src}", corpus_name="the source training text", **common)
        tgt_model = train_sentencepiece([train_tgt], build_dir / f"spm.{tgt}", corpus_name="the target training text", **common)
        tokenizer_files = {"src": src_model.name, "tgt": tgt_model.name}
    tokenizer = Tokenizer(build_dir / tokenizer_files["src"], build_dir / tokenizer_files["tgt"])
    dtypes = {"src": _token_dtype(tokenizer.src_vocab_size), "tgt": _token_dtype(tokenizer.tgt_vocab_size)}

    # pass 2: encode every split into token arrays (train: also the subword-length filters)
    split_entries = {}
    for split in sources:
        train = split == "train"
        files, keeps = _encode_split(tokenizer, text_files[split], build_dir, split, (src, tgt), dtypes, stats[split],
                                     cfg, train)
        if train and cfg.subword_samples:
            files["samples"] = _encode_samples(tokenizer, text_files[split], build_dir, (src, tgt), dtypes, keeps, cfg)
        if train:
            for path in text_files[split]:
                path.unlink()
        else:
            files["text"] = {"src": text_files[split][0].name, "tgt": text_files[split][1].name}
        split_entries[split] = {**stats[split].to_json(train), "files": files}
    if train_stats.pairs_kept == 0:
        raise MtkitError(f"{_describe(described['train'])}: no training pairs left after the subword filters "
                         f"({_filter_summary(train_stats)}); raise data.max_tokens or data.max_length_ratio")

    manifest = {
        "version": FORMAT_VERSION,
        "src_lang": src,
        "tgt_lang": tgt,
        "joint_vocab": cfg.joint_vocab,
        "tokenizer": tokenizer_files,
        "tokenizer_fingerprint": tokenizer.fingerprint(),
        "vocab_size": {"src": tokenizer.src_vocab_size, "tgt": tokenizer.tgt_vocab_size},
        "dtype": {side: np.dtype(dt).name for side, dt in dtypes.items()},
        "splits": split_entries,
        "inputs": described,
        "inputs_fingerprint": fingerprint,
        "config": cfg.model_dump(mode="json"),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    _write_text(build_dir / "manifest.json", json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
    return manifest


# ------------------------------------------------------------------------------------------ cleaning
def _normalise(text: str) -> str:
    """Strip and collapse every run of (Unicode) whitespace, line separators included, to one space."""
    return " ".join(text.split())


def _clean_split(pairs: Iterator[Pair], out_paths: tuple[Path, Path], stats: SplitStats, cfg, *, train: bool):
    """Stream pairs into two cleaned text files (one sentence per line).

    Train: drop empty pairs, pairs over max_chars and (dedup) repeats. Other splits keep every pair
    that could be decoded, empty lines included, so hypotheses and references stay aligned.
    """
    seen: set[bytes] = set()
    src_buf: list[str] = []
    tgt_buf: list[str] = []
    with open(out_paths[0], "w", encoding="utf-8", newline="\n") as fs, \
            open(out_paths[1], "w", encoding="utf-8", newline="\n") as ft:
        for pair in pairs:
            stats.pairs_read += 1
            if pair is None:
                stats.bad_lines_skipped += 1
                continue
            src, tgt = _normalise(pair[0]), _normalise(pair[1])
            if train:
                reason = None
                if not src or not tgt:
                    reason = "empty"
                elif len(src) > cfg.max_chars or len(tgt) > cfg.max_chars:
                    reason = "max_chars"
                elif cfg.dedup:
                    key = hashlib.blake2b(f"{src}\t{tgt}".encode("utf-8"), digest_size=16).digest()
                    if key in seen:
                        reason = "duplicate"
                    seen.add(key)
                if reason:
                    stats.filtered[reason] += 1
                    continue
            stats.pairs_kept += 1
            src_buf.append(src + "\n")
            tgt_buf.append(tgt + "\n")
            if len(src_buf) >= CHUNK_LINES:
                fs.writelines(src_buf)
                ft.writelines(tgt_buf)
                src_buf.clear()
                tgt_buf.clear()
        fs.writelines(src_buf)
        ft.writelines(tgt_buf)


# ------------------------------------------------------------------------------------------ encoding
def _token_dtype(vocab_size: int):
    return np.uint16 if vocab_size <= 65535 else np.int32


def _read_chunks(paths: tuple[Path, Path], size: int) -> Iterator[tuple[list[str], list[str]]]:
    """Line-aligned chunks of the two cleaned text files (lines without their newline)."""
    with open(paths[0], encoding="utf-8", newline="\n") as fs, open(paths[1], encoding="utf-8", newline="\n") as ft:
        while True:
            src = [line[:-1] for line in islice(fs, size)]
            tgt = [line[:-1] for line in islice(ft, size)]
            if not src:
                return
            yield src, tgt


def _encode_split(tokenizer: Tokenizer, text_paths, build_dir: Path, split: str, langs: tuple[str, str],
                  dtypes: dict, stats: SplitStats, cfg, train: bool) -> tuple[dict, Optional[list[np.ndarray]]]:
    """Encode one split into ``{split}.{lang}.bin`` + ``.idx``; return their names for the manifest and, for
    train, the subword filters' keep mask of each chunk (what ``_encode_samples`` keeps too)."""
    names = _array_names(split, langs)
    keeps = [] if train else None

    def chunks():
        for src_lines, tgt_lines in _read_chunks(text_paths, CHUNK_LINES):
            src_ids, tgt_ids = tokenizer.encode_src(src_lines), tokenizer.encode_tgt(tgt_lines)
            if train:
                keep = _subword_filter(_lengths(src_ids), _lengths(tgt_ids), cfg, stats)  # (chunk,) bool
                keeps.append(keep)
                src_ids, tgt_ids = list(compress(src_ids, keep)), list(compress(tgt_ids, keep))
            yield src_ids, tgt_ids

    counts = _write_arrays(chunks(), build_dir, names, dtypes)
    stats.src_tokens, stats.tgt_tokens = counts["src_tokens"], counts["tgt_tokens"]
    if train:
        stats.pairs_kept = counts["sentences"]
    return names, keeps


def _encode_samples(tokenizer: Tokenizer, text_paths, build_dir: Path, langs: tuple[str, str], dtypes: dict,
                    keeps: list[np.ndarray], cfg) -> list[dict]:
    """Write ``cfg.subword_samples`` copies of the training split, each with freshly sampled segmentations
    (``train.s{k}.{lang}.bin`` / ``.idx``) of exactly the pairs the deterministic encoding kept, in its order.

    A sampled copy can exceed data.max_tokens a little: the filters judge the deterministic segmentation, so
    that every copy holds the same sentences. Copy k is reproducible: the sampler is seeded with k + 1.
    """
    copies = []
    for k in range(cfg.subword_samples):
        seed_sampling(k + 1)

        def chunks():
            for (src_lines, tgt_lines), keep in zip(_read_chunks(text_paths, CHUNK_LINES), keeps):
                src_lines, tgt_lines = list(compress(src_lines, keep)), list(compress(tgt_lines, keep))
                yield (tokenizer.encode_src(src_lines, cfg.src_subword_alpha),
                       tokenizer.encode_tgt(tgt_lines, cfg.tgt_subword_alpha))

        names = _array_names(f"train.s{k}", langs)
        counts = _write_arrays(chunks(), build_dir, names, dtypes)
        copies.append({**names, "src_tokens": counts["src_tokens"], "tgt_tokens": counts["tgt_tokens"]})
    return copies


def _array_names(prefix: str, langs: tuple[str, str]) -> dict:
    return {side: {"bin": f"{prefix}.{lang}.bin", "idx": f"{prefix}.{lang}.idx"} for side, lang in zip(("src", "tgt"), langs)}


def _lengths(ids: list[list[int]]) -> np.ndarray:
    return np.fromiter(map(len, ids), np.int64, count=len(ids))  # (n,)


def _write_arrays(chunks: Iterator[tuple[list, list]], build_dir: Path, names: dict, dtypes: dict) -> dict:
    """Stream (src id lists, tgt id lists) chunks into the flat token files and their (N + 1,) int64 offsets."""
    lengths = {"src": [], "tgt": []}  # per chunk: (n,) int64
    with open(build_dir / names["src"]["bin"], "wb") as src_bin, open(build_dir / names["tgt"]["bin"], "wb") as tgt_bin:
        for src_ids, tgt_ids in chunks:
            for ids, out, side in ((src_ids, src_bin, "src"), (tgt_ids, tgt_bin, "tgt")):
                lens = _lengths(ids)
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


def _subword_filter(src_len: np.ndarray, tgt_len: np.ndarray, cfg, stats: SplitStats) -> np.ndarray:
    too_long = (src_len > cfg.max_tokens) | (tgt_len > cfg.max_tokens)
    ratio = np.maximum(src_len, tgt_len) / np.maximum(np.minimum(src_len, tgt_len), 1)
    bad_ratio = ~too_long & (ratio > cfg.max_length_ratio)
    stats.filtered["max_tokens"] += int(too_long.sum())
    stats.filtered["length_ratio"] += int(bad_ratio.sum())
    return ~(too_long | bad_ratio)


# ------------------------------------------------------------------------------------------- sources
def _input_files(cfg) -> list[Path]:
    """Every input file (checked to exist), for the fingerprint; errors name the config key."""
    files = []
    for split, spec in cfg.splits.items():
        for side in ("src", "tgt"):
            path = Path(getattr(spec, side))
            if not path.is_file():
                what = "is a directory" if path.is_dir() else "not found"
                raise MtkitError(f"data.splits.{split}.{side}: {path}: file {what}; fix the path in the config")
            files.append(path)
    if cfg.hf is not None:
        for path in _hf_paths(cfg.hf):
            if not path.exists():
                raise MtkitError(f"data.hf: {path}: not found; fix data.hf.path / data.hf.data_files")
            files.extend(sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path])
    return files


def _hf_paths(hf) -> list[Path]:
    """data_files are taken relative to ``path`` when that is a directory; without data_files, ``path``
    itself is the data (a save_to_disk directory, or one file / directory of files for the builder)."""
    base = Path(hf.path)
    if hf.format == "disk" or not hf.data_files:
        return [base]
    return [base / f if base.is_dir() else Path(f) for f in hf.data_files.values()]


def _inputs_fingerprint(cfg, files: list[Path]) -> str:
    config = cfg.model_dump(mode="json")
    config.pop("dir", None)
    for key in LATER_KEYS:  # keys added after FORMAT_VERSION 1: at 0 they change nothing, so data dirs stay valid
        if not config.get(key):
            config.pop(key, None)
    stamp = [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    blob = json.dumps({"version": FORMAT_VERSION, "config": config, "files": stamp}, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _open_sources(cfg, hf_cache: Path) -> tuple[dict[str, Iterator[Pair]], dict[str, dict]]:
    """split -> pair iterator (train first), and split -> a description for the manifest."""
    sources: dict[str, Iterator[Pair]] = {}
    described: dict[str, dict] = {}
    if cfg.hf is not None:
        for split, (dataset, where) in _load_hf(cfg, hf_cache).items():
            sources[split] = _hf_pairs(dataset, where, cfg)
            described[split] = {"hf": where}
    for split, spec in cfg.splits.items():  # files override a same-named HF split
        sources[split] = _file_pairs(Path(spec.src), Path(spec.tgt), cfg.skip_bad_lines)
        described[split] = {"src": spec.src, "tgt": spec.tgt}
    order = ["train"] + [s for s in sources if s != "train"]
    return {s: sources[s] for s in order}, {s: described[s] for s in order}


def _describe(source: dict) -> str:
    return source.get("hf") or f"{source['src']} / {source['tgt']}"


def _open_binary(path: Path):
    with open(path, "rb") as f:
        magic = f.read(2)
    return gzip.open(path, "rb") if magic == b"\x1f\x8b" else open(path, "rb", buffering=1 << 20)


def _decode(raw: bytes, path: Path, lineno: int, skip_bad: bool) -> Optional[str]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        if skip_bad:
            return None
        raise MtkitError(f"{path}:{lineno}: invalid UTF-8 (byte 0x{raw[err.start]:02x} at byte {err.start + 1} "
                         "of the line); fix the file or set data.skip_bad_lines: true") from None
    if lineno == 1 and text.startswith("\ufeff"):
        text = text[1:]  # UTF-8 byte order mark
    return text


def _file_pairs(src_path: Path, tgt_path: Path, skip_bad: bool) -> Iterator[Pair]:
    """Stream decoded line pairs of two line-aligned files; one line at a time, plain or gzip."""
    try:
        with _open_binary(src_path) as fs, _open_binary(tgt_path) as ft:
            for lineno, (raw_src, raw_tgt) in enumerate(zip_longest(fs, ft), 1):
                if raw_src is None or raw_tgt is None:
                    n_src = lineno - 1 + (raw_src is not None) + sum(1 for _ in fs)
                    n_tgt = lineno - 1 + (raw_tgt is not None) + sum(1 for _ in ft)
                    raise MtkitError(f"{src_path} has {n_src} lines but {tgt_path} has {n_tgt}; "
                                     "parallel files must be line-aligned")
                src = _decode(raw_src, src_path, lineno, skip_bad)
                tgt = _decode(raw_tgt, tgt_path, lineno, skip_bad)
                yield None if src is None or tgt is None else (src, tgt)
    except (gzip.BadGzipFile, EOFError, zlib.error) as err:
        raise MtkitError(f"{src_path} / {tgt_path}: corrupt gzip data ({err}); re-download or decompress it") from None


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
            paths = _hf_paths(hf)
            files = ({name: str(p) for name, p in zip(hf.data_files, paths)} if hf.data_files
                     else {"train": str(paths[0])})
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
        raise MtkitError(f"data.hf.splits.train: {hf.path} has no split {hf.splits.get('train', 'train')!r} "
                         f"(it has {', '.join(loaded)}); set data.hf.splits.train")
    return found


def _hf_pairs(dataset, where: str, cfg) -> Iterator[Pair]:
    hf, columns = cfg.hf, dataset.column_names
    if hf.src_field is None and hf.tgt_field is None and "translation" in columns:
        for batch in dataset.iter(batch_size=CHUNK_LINES):
            for row in batch["translation"]:
                row = row or {}
                for lang in (cfg.src_lang, cfg.tgt_lang):
                    if lang not in row:
                        raise MtkitError(f"{where}: 'translation' has no {lang!r} (it has {', '.join(row) or 'nothing'}); "
                                         "check data.src_lang / data.tgt_lang")
                yield _text(row[cfg.src_lang]), _text(row[cfg.tgt_lang])
        return
    src_field, tgt_field = hf.src_field or cfg.src_lang, hf.tgt_field or cfg.tgt_lang
    for key, field in (("src_field", src_field), ("tgt_field", tgt_field)):
        if field not in columns:
            raise MtkitError(f"{where}: no column {field!r} (columns: {', '.join(columns)}); set data.hf.{key} "
                             "or use a 'translation' column")
    for batch in dataset.iter(batch_size=CHUNK_LINES):
        for src, tgt in zip(batch[src_field], batch[tgt_field]):
            yield _text(src), _text(tgt)


def _text(value) -> str:
    return "" if value is None else value if isinstance(value, str) else str(value)


# --------------------------------------------------------------------------------- atomic directories
def _current_manifest(out_dir: Path, fingerprint: str) -> Optional[dict]:
    """The existing manifest if it was built from exactly these inputs and its files are all there."""
    try:
        manifest = json.loads((out_dir / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if manifest.get("version") != FORMAT_VERSION or manifest.get("inputs_fingerprint") != fingerprint:
        return None
    names = list(manifest.get("tokenizer", {}).values())
    for entry in manifest.get("splits", {}).values():
        files = entry.get("files", {})
        for copy in [files, *files.get("samples", [])]:  # the split's own files, then its sampled copies
            names.extend(copy[side][kind] for side in ("src", "tgt") for kind in ("bin", "idx"))
        names.extend(files.get("text", {}).values())
    return manifest if all((out_dir / n).is_file() for n in names) else None


def _check_replaceable(out_dir: Path):
    if out_dir.exists() and not out_dir.is_dir():
        raise MtkitError(f"data.dir: {out_dir} is a file; choose a directory path")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / "manifest.json").is_file():
        raise MtkitError(f"data.dir: {out_dir} exists and is not an mtkit data dir (no manifest.json); "
                         "choose another data.dir or remove it")


def _replace_dir(new: Path, target: Path):
    """Move the finished ``new`` dir to ``target``; an old ``target`` is moved aside first, then deleted."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}-{time.time_ns()}")
        os.rename(target, old)
    try:
        os.rename(new, target)
    except BaseException:
        if old is not None:
            os.rename(old, target)  # put the previous data back
        raise
    _fsync_dir(target.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _write_text(path: Path, text: str):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def _fsync_tree(root: Path):
    for path in root.rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
    _fsync_dir(root)


def _fsync_dir(path: Path):
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ------------------------------------------------------------------------------------------- summary
def _filter_summary(stats: SplitStats) -> str:
    parts = [f"{stats.pairs_read} read"]
    parts += [f"{n} {reason}" for reason, n in stats.filtered.items() if n]
    if stats.bad_lines_skipped:
        parts.append(f"{stats.bad_lines_skipped} invalid UTF-8")
    return ", ".join(parts)


def _print_summary(manifest: dict, out_dir: Path, seconds: float):
    from rich.console import Console
    from rich.table import Table

    vocab = manifest["vocab_size"]
    kind = "joint" if manifest["joint_vocab"] else "separate"
    table = Table(title=f"{out_dir} ({manifest['src_lang']}-{manifest['tgt_lang']})",
                  caption=f"{kind} vocab {vocab['src']}/{vocab['tgt']}, built in {seconds:.1f}s")
    for column in ("split", "read", "kept", "filtered", "bad UTF-8", "src tokens", "tgt tokens"):
        table.add_column(column, justify="left" if column == "split" else "right", no_wrap=True)
    reasons = []
    for split, entry in manifest["splits"].items():
        filtered = {r: n for r, n in entry["filtered"].items() if n}
        reasons += [f"{split} {r}: {n:,}" for r, n in filtered.items()]
        table.add_row(split, f"{entry['pairs_read']:,}", f"{entry['pairs_kept']:,}", f"{sum(filtered.values()):,}",
                      f"{entry['bad_lines_skipped']:,}", f"{entry['src_tokens']:,}", f"{entry['tgt_tokens']:,}")
    console = Console(highlight=False)
    console.print(table)
    if reasons:
        console.print("filtered: " + ", ".join(reasons))
    train = manifest["splits"]["train"]
    copies = train["files"].get("samples", [])
    if copies:
        mean = {side: sum(c[f"{side}_tokens"] for c in copies) / len(copies) for side in ("src", "tgt")}
        console.print(f"sampled segmentations: {len(copies)} copies of train, "
                      + ", ".join(f"{side} tokens {mean[side]:,.0f} on average ({mean[side] / max(train[f'{side}_tokens'], 1) - 1:+.0%})"
                                  for side in ("src", "tgt")))


# ================================================================================ trainer-side reading
class ParallelData:
    """One split of a data dir, memory-mapped: nothing is copied into Python lists.

    ``src_lengths`` / ``tgt_lengths``: (N,) int64 subword counts without BOS/EOS.
    ``src(i)`` / ``tgt(i)``: read-only numpy views of sentence i's ids.
    """

    def __init__(self, data_dir, split: str):
        self.data_dir = Path(data_dir)
        self.split = split
        self.manifest = read_manifest(self.data_dir)
        entry = self.manifest["splits"].get(split)
        if entry is None:
            raise MtkitError(f"{self.data_dir}: no split {split!r} (it has {', '.join(self.manifest['splits'])}); "
                             "add it to data.splits and rerun `mtkit prepare`")
        self.entry = entry
        self.samples = len(entry["files"].get("samples", []))  # sampled-segmentation copies (train only)
        self.sample: Optional[int] = None  # the copy in use; None: the deterministic segmentation
        self._load(entry["files"])

    def _load(self, files: dict, sentences: Optional[int] = None) -> None:
        """Map one copy's token files; ``sentences``: the count a sampled copy must hold (the split's own)."""
        self._tokens, self._offsets = {}, {}
        for side in ("src", "tgt"):
            offsets = np.fromfile(self.data_dir / files[side]["idx"], dtype=np.int64)  # (N + 1,)
            self._offsets[side] = offsets
            self._tokens[side] = _memmap(self.data_dir / files[side]["bin"], np.dtype(self.manifest["dtype"][side]))
            if len(self._tokens[side]) != offsets[-1]:
                raise MtkitError(f"{self.data_dir / files[side]['bin']}: has {len(self._tokens[side])} tokens, index "
                                 f"says {offsets[-1]}; rerun `mtkit prepare CONFIG --force`")
        if len(self._offsets["src"]) != len(self._offsets["tgt"]):
            raise MtkitError(f"{self.data_dir}: {self.split} source and target counts differ; rerun `mtkit prepare --force`")
        if sentences is not None and len(self._offsets["src"]) != sentences + 1:
            raise MtkitError(f"{self.data_dir}: sampled copy {self.sample} of {self.split} holds a different number "
                             "of sentences; rerun `mtkit prepare CONFIG --force`")
        self.src_lengths = np.diff(self._offsets["src"])  # (N,) int64
        self.tgt_lengths = np.diff(self._offsets["tgt"])  # (N,) int64

    def use_epoch(self, epoch: int) -> None:
        """Read the sampled copy of this epoch, (epoch - 1) % samples, when prepare wrote any (else no-op)."""
        if self.samples and (epoch - 1) % self.samples != self.sample:
            self.sample = (epoch - 1) % self.samples
            self._load(self.entry["files"]["samples"][self.sample], sentences=len(self))

    def __len__(self) -> int:
        return len(self.src_lengths)

    def src(self, i: int) -> np.ndarray:
        return self._tokens["src"][self._offsets["src"][i]:self._offsets["src"][i + 1]]

    def tgt(self, i: int) -> np.ndarray:
        return self._tokens["tgt"][self._offsets["tgt"][i]:self._offsets["tgt"][i + 1]]

    def text_path(self, side: str) -> Optional[Path]:
        """Cleaned raw text of a non-train split (``side`` 'src' or 'tgt'), e.g. validation references."""
        text = self.entry["files"].get("text")
        return self.data_dir / text[side] if text else None

    def reference_lines(self) -> list[str]:
        """The cleaned target text of this (non-train) split, one entry per example, for BLEU."""
        path = self.text_path("tgt")
        if path is None:
            raise MtkitError(f"{self.data_dir}: split {self.split!r} keeps no text (only non-train splits do)")
        with open(path, encoding="utf-8", newline="\n") as f:
            lines = [line[:-1] if line.endswith("\n") else line for line in f]
        if len(lines) != len(self):
            raise MtkitError(f"{path}: {len(lines)} lines for {len(self)} examples; rerun `mtkit prepare CONFIG --force`")
        return lines


def _memmap(path: Path, dtype) -> np.ndarray:
    if path.stat().st_size == 0:  # np.memmap refuses empty files
        return np.zeros(0, dtype)
    return np.memmap(path, dtype=dtype, mode="r")


# ============================================================================================ batches
def make_batches(src_lengths, tgt_lengths, batch_tokens: int, *, seed: int, epoch: int, shuffle: bool = True,
                 max_sentences: Optional[int] = None) -> list[np.ndarray]:
    """Group example indices into length-bucketed batches under a token budget.

    A batch of n examples costs n * max(padded source length, padded target length), where a padded
    length counts the EOS (source) / BOS (target) that ``collate`` adds. Examples are sorted by
    (target length, source length), ties broken by a seeded shuffle, and cut greedily into batches of
    cost <= batch_tokens; an example over budget on its own gets a batch to itself. With ``shuffle``
    the batch order is permuted. Same seed and epoch -> same batches.
    """
    src_len = np.asarray(src_lengths, dtype=np.int64) + 1  # (N,)
    tgt_len = np.asarray(tgt_lengths, dtype=np.int64) + 1  # (N,)
    if src_len.shape != tgt_len.shape:
        raise ValueError("src_lengths and tgt_lengths differ in size")
    rng = np.random.default_rng([seed, epoch])
    order = np.lexsort((rng.random(len(src_len)), src_len, tgt_len))  # last key is primary
    cost = np.maximum(src_len, tgt_len)[order]  # (N,) padded width of each example, in batch order
    limit = max_sentences or len(order)
    batches, start, n_total = [], 0, len(order)
    while start < n_total:
        # at most batch_tokens // cost[start] examples fit, since the running max only grows
        window = cost[start:start + max(1, min(limit, batch_tokens // cost[start]))]
        width = np.maximum.accumulate(window)  # (w,) running max
        sizes = width * np.arange(1, len(window) + 1)  # cost of taking the first k, nondecreasing
        n = max(1, int(np.searchsorted(sizes, batch_tokens, side="right")))
        batches.append(order[start:start + n])
        start += n
    if shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def shard_batches(batches: Sequence, rank: int, world_size: int) -> list:
    """Rank r gets batches r, r + W, ... of the epoch: disjoint shards, together holding every example.

    Every rank must get the same number of batches (a rank that ran out would leave the others waiting in
    their next gradient all-reduce), so when len(batches) is not a multiple of W the batches with the most
    sentences are cut in two (in place, so the order stays the same on every rank) until it is.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside world size {world_size}")
    batches = list(batches)
    sizes = [len(b) for b in batches]
    for _ in range(-len(batches) % world_size):
        i = int(np.argmax(sizes))
        if sizes[i] < 2:
            raise MtkitError(f"only {sum(sizes)} training sentences for {world_size} processes; "
                             "use fewer processes or more data")
        half = sizes[i] // 2
        batches[i : i + 1] = [batches[i][:half], batches[i][half:]]
        sizes[i : i + 1] = [half, sizes[i] - half]
    return batches[rank::world_size]


def padding_fraction(batches: Sequence[np.ndarray], src_lengths, tgt_lengths) -> float:
    """Share of padding in the src + tgt tensors ``collate`` would build for these batches."""
    src_len = np.asarray(src_lengths, dtype=np.int64) + 1
    tgt_len = np.asarray(tgt_lengths, dtype=np.int64) + 1
    real = padded = 0
    for idx in batches:
        s, t = src_len[idx], tgt_len[idx]
        real += int(s.sum() + t.sum())
        padded += len(idx) * int(s.max() + t.max())
    return 1.0 - real / padded if padded else 0.0


@dataclasses.dataclass
class Batch:
    src: "torch.Tensor"  # (B, S) int64: ids + [EOS], PAD-padded
    tgt_in: "torch.Tensor"  # (B, T) int64: [BOS] + ids, PAD-padded
    tgt_out: "torch.Tensor"  # (B, T) int64: ids + [EOS], PAD-padded
    src_tokens: int  # real (non-PAD) positions in src
    tgt_tokens: int  # real positions in tgt_out: the tokens the loss counts
    padding_fraction: float  # PAD share of src + tgt_out
    indices: np.ndarray  # (B,) example indices, to restore input order

    def __len__(self) -> int:
        return len(self.indices)


def _padded_rows(tokens: np.ndarray, offsets: np.ndarray, indices: np.ndarray, *, bos: bool) -> tuple[np.ndarray, np.ndarray]:
    """Gather sentences into one PAD-filled (B, max_len + 1) int64 matrix without a per-sentence loop.

    bos=False: ids + [EOS]; bos=True: [BOS] + ids. Returns the matrix and the (B,) sentence lengths.
    """
    starts = offsets[indices]  # (B,)
    lengths = offsets[indices + 1] - starts  # (B,)
    batch, total = len(indices), int(lengths.sum())
    out = np.full((batch, int(lengths.max(initial=0)) + 1), PAD, dtype=np.int64)  # (B, L + 1)
    rows = np.repeat(np.arange(batch), lengths)  # (total,) row of each token
    cols = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)  # (total,) position in its row
    out[rows, cols + int(bos)] = tokens[np.repeat(starts, lengths) + cols]
    if bos:
        out[:, 0] = BOS
    else:
        out[np.arange(batch), lengths] = EOS
    return out, lengths


def collate(data: ParallelData, indices, device=None) -> Batch:
    """Build the (B, S) / (B, T) int64 tensors of one batch; torch is imported here, not at module load."""
    import torch

    indices = np.asarray(indices, dtype=np.int64)
    src, src_len = _padded_rows(data._tokens["src"], data._offsets["src"], indices, bos=False)
    tgt_in, tgt_len = _padded_rows(data._tokens["tgt"], data._offsets["tgt"], indices, bos=True)
    tgt_out, _ = _padded_rows(data._tokens["tgt"], data._offsets["tgt"], indices, bos=False)
    src_tokens, tgt_tokens = int(src_len.sum()) + len(indices), int(tgt_len.sum()) + len(indices)
    fraction = 1.0 - (src_tokens + tgt_tokens) / (src.size + tgt_out.size) if len(indices) else 0.0
    tensors = [torch.from_numpy(a) for a in (src, tgt_in, tgt_out)]
    if device is not None:
        device = torch.device(device)
        if device.type == "cuda":
            tensors = [t.pin_memory().to(device, non_blocking=True) for t in tensors]
        else:
            tensors = [t.to(device) for t in tensors]
    return Batch(*tensors, src_tokens=src_tokens, tgt_tokens=tgt_tokens, padding_fraction=fraction, indices=indices)
