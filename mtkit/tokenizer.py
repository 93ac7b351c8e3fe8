"""SentencePiece owns the vocabulary: training, loading, encoding and decoding subwords.

Every model is trained with the same fixed special ids (``PAD=0 UNK=1 BOS=2 EOS=3``, defined here only; see
``mtkit.models.base``), so token arrays, models and search agree without a second vocabulary class.
This module never imports torch.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Iterable, Sequence, Union

import sentencepiece as spm

from mtkit.errors import MtkitError
from mtkit.manifest import read_manifest

PAD, UNK, BOS, EOS = 0, 1, 2, 3  # the only definition: models, data and search import them from here
NUM_SPECIAL = 4

PathLike = Union[str, Path]


def train_sentencepiece(
    lines_or_files: Union[Iterable[str], Sequence[PathLike]],
    model_prefix: PathLike,
    vocab_size: int,
    model_type: str = "bpe",
    character_coverage: float = 1.0,
    input_sentence_size: int = 2_000_000,
    *,
    corpus_name: str = "the training text",
) -> Path:
    """Train a SentencePiece model and return the path of ``{model_prefix}.model``.

    ``lines_or_files`` is either a list of text file paths (one sentence per line) or an iterable of
    sentences. SentencePiece's own errors about the vocabulary size become one ``MtkitError`` line
    naming ``corpus_name`` and the config key data.vocab_size.
    """
    options = dict(
        model_prefix=str(model_prefix),
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=character_coverage,
        input_sentence_size=input_sentence_size,
        shuffle_input_sentence=True,
        pad_id=PAD,
        unk_id=UNK,
        bos_id=BOS,
        eos_id=EOS,
        num_threads=_threads(),
        minloglevel=2,  # errors only
        max_sentence_length=16384,  # bytes; longer lines are skipped for training, never an error
    )
    items = list(lines_or_files) if isinstance(lines_or_files, (list, tuple)) else None
    if items and all(isinstance(item, (str, Path)) and Path(item).is_file() for item in items):
        options["input"] = [str(item) for item in items]
    else:
        options["sentence_iterator"] = iter(items if items is not None else lines_or_files)
    try:
        spm.SentencePieceTrainer.train(**options)
    except RuntimeError as err:
        raise MtkitError(_explain_training_error(str(err), vocab_size, corpus_name)) from None
    return Path(f"{model_prefix}.model")


def _explain_training_error(message: str, vocab_size: int, corpus_name: str) -> str:
    too_high = re.search(r"Vocabulary size (?:is )?too high.*?<=\s*(\d+)", message)
    if too_high:
        return (
            f"data.vocab_size = {vocab_size} is too large for {corpus_name}: SentencePiece allows at most "
            f"{too_high.group(1)}; lower data.vocab_size"
        )
    too_small = re.search(r"smaller than required_chars\.\s*(\d+) vs (\d+)", message)
    if too_small:
        return (
            f"data.vocab_size = {vocab_size} is smaller than the {too_small.group(2)} characters and special "
            f"tokens {corpus_name} needs; raise data.vocab_size or lower data.character_coverage"
        )
    last = message.strip().splitlines()[-1] if message.strip() else "unknown error"
    return f"SentencePiece training failed: {last}"


class Tokenizer:
    """One joint SentencePiece model, or a source and a target model.

    Ids are plain Python ints; ``encode_*`` adds no BOS/EOS (the batch collate does that).
    """

    def __init__(self, src_model: PathLike, tgt_model: PathLike | None = None):
        src_path = Path(src_model)
        tgt_path = Path(tgt_model) if tgt_model is not None else src_path
        src_bytes = _read_model(src_path)
        tgt_bytes = src_bytes if tgt_path.resolve() == src_path.resolve() else _read_model(tgt_path)
        self._init(src_bytes, tgt_bytes, str(src_path), str(tgt_path))

    @classmethod
    def from_model_bytes(cls, blobs: dict[str, bytes]) -> "Tokenizer":
        """Rebuild from ``model_bytes()`` (the models a checkpoint carries): {"src": ...[, "tgt": ...]}."""
        tokenizer = cls.__new__(cls)
        tokenizer._init(blobs["src"], blobs.get("tgt", blobs["src"]), "checkpoint (src)", "checkpoint (tgt)")
        return tokenizer

    def _init(self, src_bytes: bytes, tgt_bytes: bytes, src_name: str, tgt_name: str):
        self.joint = src_bytes == tgt_bytes
        self._src_bytes, self._tgt_bytes = src_bytes, tgt_bytes
        self._src = _processor(src_bytes, src_name)
        self._tgt = self._src if self.joint else _processor(tgt_bytes, tgt_name)

    @classmethod
    def from_dir(cls, data_dir: PathLike) -> "Tokenizer":
        """Load the tokenizer named by ``data_dir/manifest.json`` (written by ``mtkit prepare``)."""
        data_dir = Path(data_dir)
        manifest = read_manifest(data_dir)
        try:
            files = manifest["tokenizer"]
            src, tgt = files["src"], files["tgt"]
        except (KeyError, TypeError):
            raise MtkitError(
                f"{data_dir / 'manifest.json'}: unreadable manifest; rerun `mtkit prepare CONFIG --force`"
            ) from None
        return cls(data_dir / src, data_dir / tgt)

    def model_bytes(self) -> dict[str, bytes]:
        """The SentencePiece model file(s): {"src": bytes} when joint, else {"src": ..., "tgt": ...}."""
        return {"src": self._src_bytes} if self.joint else {"src": self._src_bytes, "tgt": self._tgt_bytes}

    # ------------------------------------------------------------------ sizes
    @property
    def src_vocab_size(self) -> int:
        return self._src.get_piece_size()

    @property
    def tgt_vocab_size(self) -> int:
        return self._tgt.get_piece_size()

    # --------------------------------------------------------------- encoding
    def encode_src(self, lines: Sequence[str], alpha: float = 0.0) -> list[list[int]]:
        """alpha > 0 samples a segmentation (see ``_encode``) instead of the usual one."""
        return _encode(self._src, lines, alpha)

    def encode_tgt(self, lines: Sequence[str], alpha: float = 0.0) -> list[list[int]]:
        return _encode(self._tgt, lines, alpha)

    def decode_tgt(self, ids: Sequence[Sequence[int]]) -> list[str]:
        """Detokenize target id lists; ids outside the vocabulary and the special ids 0-3 are dropped."""
        return _decode(self._tgt, ids)

    def decode_src(self, ids: Sequence[Sequence[int]]) -> list[str]:
        return _decode(self._src, ids)

    # ------------------------------------------------------------ inspection
    def src_pieces(self, ids: Sequence[int]) -> list[str]:
        """Subword strings for one source id list (labels of attention plots)."""
        return _pieces(self._src, ids)

    def tgt_pieces(self, ids: Sequence[int]) -> list[str]:
        return _pieces(self._tgt, ids)

    def fingerprint(self) -> str:
        """sha256 over the model file bytes: a checkpoint records it to detect a different vocabulary."""
        digest = hashlib.sha256(self._src_bytes)
        if not self.joint:
            digest.update(self._tgt_bytes)
        return digest.hexdigest()


def _read_model(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        raise MtkitError(f"{path}: SentencePiece model not found; run `mtkit prepare CONFIG` first") from None


def _processor(blob: bytes, name: str) -> spm.SentencePieceProcessor:
    try:
        return spm.SentencePieceProcessor(model_proto=blob)
    except (OSError, RuntimeError, TypeError):
        raise MtkitError(f"{name}: not a SentencePiece model; rerun `mtkit prepare CONFIG --force`") from None


def _decode(sp: spm.SentencePieceProcessor, ids: Sequence[Sequence[int]]) -> list[str]:
    size = sp.get_piece_size()
    kept = []
    for seq in ids:
        seq = seq.tolist() if hasattr(seq, "tolist") else seq  # numpy arrays / torch tensors
        kept.append([int(i) for i in seq if NUM_SPECIAL <= int(i) < size])
    # one call per sequence: SentencePiece's batch call starts threads each time, which costs a lone sentence
    # far more than decoding it (0.2-1.7 ms against microseconds, 2026-11-24, AMD EPYC)
    return [sp.decode(seq) for seq in kept]


def seed_sampling(seed: int) -> None:
    """Seed SentencePiece's (process-wide) sampler: the same seed gives the same sampled segmentations."""
    spm.set_random_generator_seed(seed)


def _encode(sp: spm.SentencePieceProcessor, lines: Sequence[str], alpha: float = 0.0) -> list[list[int]]:
    """Deterministic segmentation, or with alpha > 0 a sampled one: BPE-dropout for bpe models (each merge
    skipped with probability alpha, Provilkov et al. 2020), subword regularisation for unigram models (a
    segmentation drawn from all of them, smoothed by alpha, Kudo 2018). Sampling runs on one thread, since
    SentencePiece's draws are reproducible from ``seed_sampling`` only then.
    """
    if not lines:
        return []
    if alpha > 0:
        return sp.encode(list(lines), out_type=int, enable_sampling=True, alpha=alpha, nbest_size=-1, num_threads=1)
    if len(lines) < BATCH_ENCODE_FROM:  # see _decode: threads cost more than they give on a few lines
        return [sp.encode(line, out_type=int) for line in lines]
    return sp.encode(list(lines), out_type=int, num_threads=_threads())


BATCH_ENCODE_FROM = 256  # lines from which SentencePiece's threaded batch encoding pays for its threads


def _threads() -> int:
    """Threads for SentencePiece's training and batch encoding: the cores this process may use."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no sched_getaffinity (macOS)
        return os.cpu_count() or 1


def _pieces(sp: spm.SentencePieceProcessor, ids: Sequence[int]) -> list[str]:
    size = sp.get_piece_size()
    return [sp.id_to_piece(int(i)) if 0 <= int(i) < size else f"<{int(i)}>" for i in ids]
