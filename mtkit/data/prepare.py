"""`mtkit prepare`: parallel text (plain/.gz files or a local Hugging Face dataset) -> a data dir.

    DIR/manifest.json                 what was built, from what, with per-split counts (written last)
    DIR/spm.model, spm.vocab          joint SentencePiece model (or spm.{src}.model + spm.{tgt}.model)
    DIR/{split}.{lang}.bin            all token ids of the split, concatenated; uint16 (vocab <= 65535) else int32
    DIR/{split}.{lang}.idx            int64 offsets, N+1 of them: sentence i is bin[idx[i]:idx[i+1]]
    DIR/{split}.{lang}.txt            cleaned text of non-train splits (references for validation BLEU)

No BOS/EOS is stored; ``data.collate`` adds them. Everything is built in a temp dir beside DIR and renamed
into place at the end, so an interrupted run never leaves a manifest pointing at partial data.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import time
from collections import Counter
from itertools import compress
from pathlib import Path
from typing import Iterator, Optional

import numpy as np

from mtkit.config import language_tag
from mtkit.data import filters as pair_filters
from mtkit.data.builddir import (
    check_not_distilled,
    check_replaceable,
    current_manifest,
    new_build,
    remove_stale_builds,
)
from mtkit.data.directions import MULTILINGUAL, check_language_tokens, manifest_entry, open_directions
from mtkit.data.encoding import (
    CHUNK_LINES,
    array_names,
    encode_samples,
    lengths_of,
    read_chunks,
    token_dtype,
    write_arrays,
)
from mtkit.data.sources import Pair, describe, hf_paths, mixed_train, open_sources
from mtkit.data.summary import print_prepare_summary
from mtkit.errors import MtkitError
from mtkit.files import current_umask, fsync_tree, replace_dir
from mtkit.manifest import FORMAT_VERSION, MANIFEST
from mtkit.tokenizer import Tokenizer, train_sentencepiece

# keys added after FORMAT_VERSION 1 (see _inputs_fingerprint)
LATER_KEYS = ("src_subword_alpha", "tgt_subword_alpha", "subword_samples", "filters", "mix", "user_symbols")
FILTER_REASONS = ("empty", "max_chars", "duplicate", "max_tokens", "length_ratio")  # train only; then data.filters


def prepare(
    data_cfg,
    *,
    force: bool = False,
    init_from: Optional[str] = None,
    tokenizer: Optional[Tokenizer] = None,
    extra: Optional[dict] = None,
) -> dict:
    """Build the data dir ``data_cfg.dir`` from the configured corpus.

    A rerun with unchanged inputs and data config leaves the dir as it is. A data dir that ``mtkit distill`` wrote
    is replaced only with ``force``.

    Args:
        data_cfg: the config's ``data`` section.
        force: rebuild even when the dir is up to date, or holds a distilled training set.
        init_from: a run dir (``model.init_from``) whose tokenizer encodes the corpus; none trains new
            SentencePiece models.
        tokenizer: the tokenizer that encodes the corpus (instead of ``init_from``'s; ``mtkit distill`` gives
            the teacher's).
        extra: entries added to the manifest (``mtkit distill``: ``distillation``).

    Returns:
        The data dir's manifest.

    Raises:
        MtkitError: a missing input, a bad data config, a foreign (or, without ``force``, distilled) dir in the
            way, or no training pair left.
    """
    tokenizer = tokenizer or (Tokenizer.from_run(init_from) if init_from else None)
    started = time.perf_counter()
    out_dir = Path(data_cfg.dir)
    if data_cfg.hf is None and "train" not in data_cfg.splits and not data_cfg.multilingual:
        raise MtkitError("data: needs splits.train (src and tgt files) or an hf section")
    if data_cfg.languages:
        raise MtkitError(
            "data.languages describes an imported many-to-many model, which mtkit prepare cannot encode a corpus "
            "for; to fine-tune it, give data.directions and model.init_from (docs/pretrained.md)"
        )
    if data_cfg.multilingual and not any("train" in d.splits for d in data_cfg.directions):
        raise MtkitError("data.directions: no direction has a train split; give at least one")
    for i, direction in enumerate(data_cfg.directions):
        if not direction.splits:
            raise MtkitError(f"data.directions[{i}] ({direction.name}): no splits; give its files or drop it")
    if data_cfg.src_lang == data_cfg.tgt_lang and not data_cfg.multilingual:
        raise MtkitError(f"data.src_lang and data.tgt_lang are both {data_cfg.src_lang!r}; they must differ")
    _filters(data_cfg, data_cfg.src_lang, data_cfg.tgt_lang)  # a bad data.filters fails before any work
    if tokenizer is not None and data_cfg.multilingual:
        check_language_tokens(data_cfg, tokenizer, init_from)
    inputs = input_files(data_cfg)
    fingerprint = _inputs_fingerprint(data_cfg, inputs, tokenizer.fingerprint() if tokenizer else None)
    if not force:
        current = current_manifest(out_dir, fingerprint)
        if current is not None:
            print(f"{out_dir}: up to date (inputs and data config unchanged); use --force to rebuild")
            return current
        check_not_distilled(out_dir)
    check_replaceable(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_builds(out_dir)
    build_dir = new_build(out_dir)
    try:
        os.chmod(build_dir, 0o777 & ~current_umask())  # mkdtemp makes it private; the data dir should not be
        manifest = _build(data_cfg, build_dir, fingerprint, tokenizer, extra or {})
        fsync_tree(build_dir)
        replace_dir(build_dir, out_dir)
    except BaseException:
        shutil.rmtree(build_dir, ignore_errors=True)
        raise
    print_prepare_summary(manifest, out_dir, time.perf_counter() - started)
    return manifest


@dataclasses.dataclass
class SplitStats:
    pairs_read: int = 0
    pairs_kept: int = 0
    filtered: Counter = dataclasses.field(default_factory=Counter)
    bad_lines_skipped: int = 0
    src_tokens: int = 0
    tgt_tokens: int = 0
    filter_names: tuple = ()  # data.filters' names, counted after FILTER_REASONS

    def to_json(self, train: bool) -> dict:
        reasons = FILTER_REASONS + self.filter_names if train else ()
        return dict(
            pairs_read=self.pairs_read,
            pairs_kept=self.pairs_kept,
            filtered={r: self.filtered.get(r, 0) for r in reasons},
            bad_lines_skipped=self.bad_lines_skipped,
            src_tokens=self.src_tokens,
            tgt_tokens=self.tgt_tokens,
        )


def _build(cfg, build_dir: Path, fingerprint: str, tokenizer: Optional[Tokenizer], extra: dict) -> dict:
    if cfg.multilingual:
        src, tgt = "src", "tgt"  # file names: train.src.bin ... (the manifest says MULTILINGUAL)
        sources, described = open_directions(cfg)
    else:
        src, tgt = cfg.src_lang, cfg.tgt_lang
        sources, described = open_sources(cfg, build_dir / ".hf_cache")
        if cfg.mix:  # the train split's pairs counted first: each part's share is a ratio of them
            train_pairs = sum(1 for _ in open_sources(cfg, build_dir / ".hf_cache")[0]["train"])
            sources["train"], parts = mixed_train(cfg, sources["train"], train_pairs)
            described["train"] = {**described["train"], "mix": parts}
    chosen = () if cfg.multilingual else _filters(cfg, src, tgt)
    stats = {split: SplitStats(filter_names=tuple(f.name for f in chosen)) for split in sources}

    # pass 1: read, clean and (train only) filter by characters / duplicates -> cleaned text files
    text_files = {}
    for split, pairs in sources.items():
        text_files[split] = (build_dir / f"{split}.{src}.txt", build_dir / f"{split}.{tgt}.txt")
        train = split == "train"
        _clean_split(pairs, text_files[split], stats[split], cfg, train=train, filters=chosen if train else ())
    train_stats = stats["train"]
    if train_stats.pairs_kept == 0:
        raise MtkitError(
            f"{describe(described['train'])}: no training pairs left after cleaning "
            f"({_filter_summary(train_stats)}); check the files or relax data.max_chars or data.filters"
        )
    shutil.rmtree(build_dir / ".hf_cache", ignore_errors=True)

    # SentencePiece on the cleaned training text (joint: both sides into one model)
    common = dict(
        vocab_size=cfg.vocab_size,
        model_type=cfg.spm_model_type,
        character_coverage=cfg.character_coverage,
        input_sentence_size=cfg.spm_input_sentence_size,
        user_symbols=_user_symbols(cfg),
    )
    train_src, train_tgt = text_files["train"]
    if tokenizer is not None:
        tokenizer_files = tokenizer.save(build_dir)
    elif cfg.joint_vocab:
        model = train_sentencepiece([train_src, train_tgt], build_dir / "spm", **common)
        tokenizer_files = {"src": model.name, "tgt": model.name}
    else:
        src_model = train_sentencepiece(
            [train_src], build_dir / f"spm.{src}", corpus_name="the source training text", **common
        )
        tgt_model = train_sentencepiece(
            [train_tgt], build_dir / f"spm.{tgt}", corpus_name="the target training text", **common
        )
        tokenizer_files = {"src": src_model.name, "tgt": tgt_model.name}
    tokenizer = Tokenizer.from_files(build_dir, tokenizer_files)
    dtypes = {"src": token_dtype(tokenizer.src_vocab_size), "tgt": token_dtype(tokenizer.tgt_vocab_size)}

    # pass 2: encode every split into token arrays (train: also the subword-length filters)
    split_entries = {}
    for split in sources:
        train = split == "train"
        files, keeps = _encode_split(
            tokenizer, text_files[split], build_dir, split, (src, tgt), dtypes, stats[split], cfg, train
        )
        if train and cfg.subword_samples:
            files["samples"] = encode_samples(tokenizer, text_files[split], build_dir, (src, tgt), dtypes, keeps, cfg)
        if train:
            for path in text_files[split]:
                path.unlink()
        else:
            files["text"] = {"src": text_files[split][0].name, "tgt": text_files[split][1].name}
        split_entries[split] = {**stats[split].to_json(train), "files": files}
    if train_stats.pairs_kept == 0:
        raise MtkitError(
            f"{describe(described['train'])}: no training pairs left after the subword filters "
            f"({_filter_summary(train_stats)}); raise data.max_tokens or data.max_length_ratio"
        )
    extra = {**(manifest_entry(cfg) if cfg.multilingual else {}), **extra}

    manifest = {
        "version": FORMAT_VERSION,
        "src_lang": MULTILINGUAL if cfg.multilingual else src,
        "tgt_lang": MULTILINGUAL if cfg.multilingual else tgt,
        "joint_vocab": tokenizer.joint,
        "tokenizer": tokenizer_files,
        "tokenizer_fingerprint": tokenizer.fingerprint(),
        "vocab_size": {"src": tokenizer.src_vocab_size, "tgt": tokenizer.tgt_vocab_size},
        "dtype": {side: np.dtype(dt).name for side, dt in dtypes.items()},
        "splits": split_entries,
        "inputs": described,
        "inputs_fingerprint": fingerprint,
        "config": cfg.model_dump(mode="json"),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **extra,
    }
    (build_dir / MANIFEST).write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return manifest


def _user_symbols(cfg) -> list[str]:
    """The pieces SentencePiece keeps whole: a multilingual dir's language tags, then data.user_symbols."""
    tags = [language_tag(lang, cfg.tag_template) for lang in cfg.targets] if cfg.multilingual else []
    return list(dict.fromkeys([*tags, *cfg.user_symbols]))


# ------------------------------------------------------------------------------------------ cleaning
def _filters(cfg, src: str, tgt: str) -> list:
    return pair_filters.build(cfg.filters, src, tgt, "data.filters", ("data.src_lang", "data.tgt_lang"))


def _normalise(text: str) -> str:
    """Strip and collapse every run of (Unicode) whitespace, line separators included, to one space."""
    return " ".join(text.split())


def _clean_split(
    pairs: Iterator[Pair], out_paths: tuple[Path, Path], stats: SplitStats, cfg, *, train: bool, filters=()
):
    """Stream pairs into two cleaned text files (one sentence per line).

    Train: drop empty pairs, pairs over max_chars and (dedup) repeats, then what ``filters`` (data.filters)
    remove. Other splits keep every pair that could be decoded, empty lines included, so hypotheses and
    references stay aligned.
    """
    seen: set[bytes] = set()
    src_buf: list[str] = []
    tgt_buf: list[str] = []
    reasons: dict[int, str] = {}  # pair number -> why prepare's own checks drop it (train)

    def judged_pair(item) -> Optional[tuple[str, str]]:
        """The normalised pair for data.filters, or None for a pair prepare's own checks drop (or bad UTF-8)."""
        number, pair = item
        stats.pairs_read += 1
        if pair is None:
            return None
        src, tgt = _normalise(pair[0]), _normalise(pair[1])
        if train:
            if not src or not tgt:
                reasons[number] = "empty"
            elif len(src) > cfg.max_chars or len(tgt) > cfg.max_chars:
                reasons[number] = "max_chars"
            elif cfg.dedup:
                key = hashlib.blake2b(f"{src}\t{tgt}".encode("utf-8"), digest_size=16).digest()
                if key in seen:
                    reasons[number] = "duplicate"
                seen.add(key)
        return None if number in reasons else (src, tgt)

    with (
        open(out_paths[0], "w", encoding="utf-8", newline="\n") as fs,
        open(out_paths[1], "w", encoding="utf-8", newline="\n") as ft,
    ):
        for (number, raw), pair, objection in pair_filters.judged(
            list(filters) if train else [], enumerate(pairs), judged_pair
        ):
            if raw is None:
                stats.bad_lines_skipped += 1
                continue
            reason = reasons.pop(number, None) or (objection and objection[0])
            if reason:
                stats.filtered[reason] += 1
                continue
            src, tgt = pair
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
def _encode_split(
    tokenizer: Tokenizer,
    text_paths,
    build_dir: Path,
    split: str,
    langs: tuple[str, str],
    dtypes: dict,
    stats: SplitStats,
    cfg,
    train: bool,
) -> tuple[dict, Optional[list[np.ndarray]]]:
    """Encode one split into ``{split}.{lang}.bin`` + ``.idx``; return their names for the manifest and, for
    train, the subword filters' keep mask of each chunk (what ``encode_samples`` keeps too)."""
    names = array_names(split, langs)
    keeps = [] if train else None

    def chunks():
        for src_lines, tgt_lines in read_chunks(text_paths, CHUNK_LINES):
            src_ids, tgt_ids = tokenizer.encode_src(src_lines), tokenizer.encode_tgt(tgt_lines)
            if train:
                keep = _subword_filter(lengths_of(src_ids), lengths_of(tgt_ids), cfg, stats)  # (chunk,) bool
                keeps.append(keep)
                src_ids, tgt_ids = list(compress(src_ids, keep)), list(compress(tgt_ids, keep))
            yield src_ids, tgt_ids

    counts = write_arrays(chunks(), build_dir, names, dtypes)
    stats.src_tokens, stats.tgt_tokens = counts["src_tokens"], counts["tgt_tokens"]
    if train:
        stats.pairs_kept = counts["sentences"]
    return names, keeps


def _subword_filter(src_len: np.ndarray, tgt_len: np.ndarray, cfg, stats: SplitStats) -> np.ndarray:
    too_long = (src_len > cfg.max_tokens) | (tgt_len > cfg.max_tokens)
    ratio = np.maximum(src_len, tgt_len) / np.maximum(np.minimum(src_len, tgt_len), 1)
    bad_ratio = ~too_long & (ratio > cfg.max_length_ratio)
    stats.filtered["max_tokens"] += int(too_long.sum())
    stats.filtered["length_ratio"] += int(bad_ratio.sum())
    return ~(too_long | bad_ratio)


# ------------------------------------------------------------------------------------------- inputs
def input_files(cfg) -> list[Path]:
    """Every input file of a ``data`` section, checked to exist.

    Args:
        cfg: the config's ``data`` section.

    Returns:
        The files of every split (and of ``data.hf``), in the config's order.

    Raises:
        MtkitError: a file that is missing or a directory, naming its config key.
    """
    files = []
    keyed = [(f"data.splits.{split}", spec) for split, spec in cfg.splits.items()]
    keyed += [
        (f"data.directions[{i}].splits.{s}", spec) for i, d in enumerate(cfg.directions) for s, spec in d.splits.items()
    ]
    keyed += [(f"data.mix[{i}]", part) for i, part in enumerate(getattr(cfg, "mix", []))]
    for key, spec in keyed:
        for side in ("src", "tgt"):
            path = Path(getattr(spec, side))
            if not path.is_file():
                what = "is a directory" if path.is_dir() else "not found"
                raise MtkitError(f"{key}.{side}: {path}: file {what}; fix the path in the config")
            files.append(path)
    if cfg.hf is not None:
        for path in hf_paths(cfg.hf):
            if not path.exists():
                raise MtkitError(f"data.hf: {path}: not found; fix data.hf.path / data.hf.data_files")
            files.extend(sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path])
    return files


def _inputs_fingerprint(cfg, files: list[Path], tokenizer: Optional[str] = None) -> str:
    config = cfg.model_dump(mode="json")
    config.pop("dir", None)
    for key in LATER_KEYS:  # keys added after FORMAT_VERSION 1: at 0 they change nothing, so data dirs stay valid
        if not config.get(key):
            config.pop(key, None)
    stamp = [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    inputs = {"version": FORMAT_VERSION, "config": config, "files": stamp}
    blob = json.dumps(inputs | ({"tokenizer": tokenizer} if tokenizer else {}), sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


# ------------------------------------------------------------------------------------------- summary
def _filter_summary(stats: SplitStats) -> str:
    parts = [f"{stats.pairs_read} read"]
    parts += [f"{n} {reason}" for reason, n in stats.filtered.items() if n]
    if stats.bad_lines_skipped:
        parts.append(f"{stats.bad_lines_skipped} invalid UTF-8")
    return ", ".join(parts)
