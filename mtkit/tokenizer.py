"""SentencePiece owns the vocabulary: training, loading, encoding and decoding subwords.

Every model is trained with the same fixed special ids (``PAD=0 UNK=1 BOS=2 EOS=3``, defined here only; see
``mtkit.models.base``), so token arrays, models and search agree without a second vocabulary class.
This module never imports torch.
"""

from __future__ import annotations

import json
import os
import re
from functools import cached_property
from pathlib import Path
from typing import Iterable, Optional, Sequence, Union

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
    user_symbols: Sequence[str] = (),
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
        num_threads=usable_cores(),
        minloglevel=2,  # errors only
        max_sentence_length=16384,  # bytes; longer lines are skipped for training, never an error
    )
    if user_symbols:  # pieces kept whole wherever they occur (language tags)
        options["user_defined_symbols"] = list(user_symbols)
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


# a run dir's (and an imported data dir's) copy of each ``model_bytes`` entry
FILES = {"src": "spm.src.model", "tgt": "spm.tgt.model", "vocab": "vocab.marian.json"}


def marian_order(size: int, pad: int, unk: int, eos: int, start: int) -> list[Optional[int]]:
    """The Marian id of each mtkit id: PAD, UNK, BOS (Marian's decoder start), EOS, then every other id in order.

    mtkit's special ids are one fixed convention shared by the data, the models and every search, so a Marian
    vocabulary is permuted into it rather than the convention made per run. Marian needs only three special
    rows where its decoder starts with the padding token (OPUS-MT's ``decoder_start_token_id == pad_token_id``):
    then that row becomes BOS and mtkit's PAD is a row of its own (None here), which the model never predicts
    (``hf.marian.PAD_LOGIT``). Where the decoder starts with the end-of-sentence token (fairseq's models: M2M-100,
    NLLB-200), BOS and EOS are the same row; the model never predicts BOS, so it takes no probability either.
    """
    head = [None if start == pad else pad, unk, start, eos]
    specials = {pad, unk, eos, start}
    return head + [i for i in range(size) if i not in specials]


class Vocab:
    """A Marian ``vocab.json`` (piece -> Marian id) shared by the source and target SentencePiece models, with
    its special ids, in mtkit's id order (``marian_order``): text is cut into pieces by SentencePiece and the
    pieces are looked up here (unknown ones are UNK), as Marian's tokenizer does."""

    def __init__(self, blob: bytes, name: str):
        try:
            data = json.loads(blob.decode("utf-8"))
            vocab, special = data["vocab"], data["special"]
            by_id = {int(i): piece for piece, i in vocab.items()}
            order = marian_order(len(vocab), special["pad"], special["unk"], special["eos"], special["start"])
        except (ValueError, KeyError, TypeError, AttributeError):
            raise MtkitError(f"{name}: unreadable vocabulary file; import the model again") from None
        self.blob, self.marian_ids, self.special = blob, order, special
        self.pieces = [None if i is None else by_id.get(i) for i in order]  # mtkit id -> piece
        self.ids = {piece: i for i, piece in enumerate(self.pieces) if i >= NUM_SPECIAL and piece is not None}
        # tokens read whole where a line starts with them (a many-to-many model's language tokens: __en__, eng_Latn)
        self.tags = frozenset(t for t in data.get("tags", ()) if t in self.ids)

    def leading_tag(self, line: str) -> str:
        """The language token a line starts with (``>>deu<<``, or one of ``tags`` followed by a space), or ""."""
        tag = _leading_tag(line)
        if tag or not self.tags:
            return tag
        word = line.split(" ", 1)[0]
        return word if word in self.tags else ""

    @staticmethod
    def encode_blob(vocab: dict[str, int], *, pad: int, unk: int, eos: int, start: int, **extra) -> bytes:
        """The vocabulary file; ``extra``: further keys (``tags``: tokens read whole at the start of a line; what
        an export needs to write the original tokenizer files back)."""
        special = {"pad": pad, "unk": unk, "eos": eos, "start": start}
        data = {"special": special, "vocab": vocab, **extra}
        return json.dumps(data, ensure_ascii=False, indent=0).encode("utf-8")

    def lookup(self, lines: Sequence[str], pieces: list[list[str]]) -> list[list[int]]:
        """Ids of each line's pieces; a leading language tag (``>>deu<<``) is one token, as in Marian."""
        out = []
        for line, line_pieces in zip(lines, pieces):
            tag = self.leading_tag(line)
            head = [self.ids.get(tag, UNK)] if tag else []
            out.append(head + [self.ids.get(p, UNK) for p in line_pieces])
        return out


def _leading_tag(line: str) -> str:
    end = line.find("<<") if line.startswith(">>") else -1
    return line[: end + 2] if end != -1 else ""


class Tokenizer:
    """One joint SentencePiece model, or a source and a target model (whose ids may go through a shared
    ``Vocab``, for imported Marian models).

    Ids are plain Python ints; ``encode_*`` adds no BOS/EOS (the batch collate does that).
    """

    def __init__(self, src_model: PathLike, tgt_model: PathLike | None = None, vocab: PathLike | None = None):
        src_path = Path(src_model)
        tgt_path = Path(tgt_model) if tgt_model is not None else src_path
        src_bytes = _read_model(src_path)
        tgt_bytes = src_bytes if tgt_path.resolve() == src_path.resolve() else _read_model(tgt_path)
        vocab_bytes = _read_model(Path(vocab)) if vocab is not None else None
        self._init(src_bytes, tgt_bytes, str(src_path), str(tgt_path), vocab_bytes)

    @classmethod
    def from_model_bytes(cls, blobs: dict[str, bytes]) -> "Tokenizer":
        """Rebuild a tokenizer from the models a checkpoint carries.

        Args:
            blobs: what ``model_bytes()`` returned: ``"src"``, and ``"tgt"`` and ``"vocab"`` where the tokenizer
                has them; a missing ``"tgt"`` means the joint model.

        Returns:
            The tokenizer.

        Raises:
            MtkitError: a blob is not a SentencePiece model or vocabulary.
        """
        tokenizer = cls.__new__(cls)
        src, tgt = blobs["src"], blobs.get("tgt", blobs["src"])
        tokenizer._init(src, tgt, "checkpoint (src)", "checkpoint (tgt)", blobs.get("vocab"))
        return tokenizer

    def _init(self, src_bytes: bytes, tgt_bytes: bytes, src_name: str, tgt_name: str, vocab_bytes=None):
        self._same = src_bytes == tgt_bytes
        self.vocab = None if vocab_bytes is None else Vocab(vocab_bytes, f"{src_name} (vocabulary)")
        self.joint = self._same or self.vocab is not None  # one id space for both sides
        self._src_bytes, self._tgt_bytes = src_bytes, tgt_bytes
        self._src = _processor(src_bytes, src_name)
        self._tgt = self._src if self._same else _processor(tgt_bytes, tgt_name)

    @classmethod
    def from_dir(cls, data_dir: PathLike) -> "Tokenizer":
        """Load the tokenizer named by ``data_dir/manifest.json`` (written by ``mtkit prepare``)."""
        data_dir = Path(data_dir)
        manifest = read_manifest(data_dir)
        try:
            files = manifest["tokenizer"]
            if not {"src", "tgt"} <= set(files):
                raise KeyError
        except (KeyError, TypeError):
            raise MtkitError(
                f"{data_dir / 'manifest.json'}: unreadable manifest; rerun `mtkit prepare CONFIG --force`"
            ) from None
        return cls.from_files(data_dir, files)

    @classmethod
    def from_files(cls, directory: PathLike, files: dict[str, str]) -> "Tokenizer":
        """The tokenizer of {"src": name, "tgt": name[, "vocab": name]} in ``directory`` (``save``'s answer)."""
        vocab = files.get("vocab")
        return cls(
            Path(directory) / files["src"], Path(directory) / files["tgt"], Path(directory) / vocab if vocab else None
        )

    @classmethod
    def from_run(cls, run_dir: PathLike, where: str = "model.init_from") -> "Tokenizer":
        """The tokenizer a run dir holds (``save``: written by mtkit train and mtkit import-hf)."""
        run_dir = Path(run_dir)
        if not (run_dir / FILES["src"]).is_file():
            raise MtkitError(
                f"{where}: {run_dir} holds no {FILES['src']}; give a run directory of mtkit train or mtkit import-hf"
            )
        tgt, vocab = run_dir / FILES["tgt"], run_dir / FILES["vocab"]
        return cls(run_dir / FILES["src"], tgt if tgt.is_file() else None, vocab if vocab.is_file() else None)

    def save(self, directory: PathLike, write=None) -> dict[str, str]:
        """Write the ``model_bytes`` files into ``directory`` (names: ``FILES``); {side: file name} as a data dir's
        manifest lists them ("tgt" names the source model when there is one)."""
        names = {}
        for side, blob in self.model_bytes().items():
            (write or _write)(Path(directory) / FILES[side], blob)
            names[side] = FILES[side]
        return {"tgt": FILES["src"], **names}

    def model_bytes(self) -> dict[str, bytes]:
        """The files: {"src": bytes} for one SentencePiece model, else {"src": ..., "tgt": ...}; plus "vocab"."""
        blobs = {"src": self._src_bytes} if self._same else {"src": self._src_bytes, "tgt": self._tgt_bytes}
        return blobs if self.vocab is None else {**blobs, "vocab": self.vocab.blob}

    # ------------------------------------------------------------------ sizes
    @property
    def src_vocab_size(self) -> int:
        return len(self.vocab.pieces) if self.vocab else self._src.get_piece_size()

    @property
    def tgt_vocab_size(self) -> int:
        return len(self.vocab.pieces) if self.vocab else self._tgt.get_piece_size()

    # --------------------------------------------------------------- encoding
    def encode_src(self, lines: Sequence[str], alpha: float = 0.0) -> list[list[int]]:
        """alpha > 0 samples a segmentation (see ``_encode``) instead of the usual one."""
        return _encode(self._src, lines, alpha, self.vocab)

    def encode_tgt(self, lines: Sequence[str], alpha: float = 0.0) -> list[list[int]]:
        return _encode(self._tgt, lines, alpha, self.vocab)

    def decode_tgt(self, ids: Sequence[Sequence[int]]) -> list[str]:
        """Detokenize target id lists; ids outside the vocabulary and the special ids 0-3 are dropped."""
        return _decode(self._tgt, ids, self.vocab)

    def decode_src(self, ids: Sequence[Sequence[int]]) -> list[str]:
        return _decode(self._src, ids, self.vocab)

    # ------------------------------------------------------------ inspection
    @cached_property
    def _src_table(self) -> list[str]:
        """Source subwords by id, built on first use."""
        return _piece_table(self._src, self.vocab)

    @cached_property
    def _tgt_table(self) -> list[str]:
        """Target subwords by id: the source's table for one joint model."""
        return self._src_table if self._same else _piece_table(self._tgt, self.vocab)

    def src_pieces(self, ids: Sequence[int]) -> list[str]:
        """Subword strings for one source id list (labels of attention plots)."""
        return _pieces(self._src_table, ids)

    def tgt_pieces(self, ids: Sequence[int]) -> list[str]:
        return _pieces(self._tgt_table, ids)

    def fingerprint(self) -> str:
        """sha256 over the model file bytes: a checkpoint records it to detect a different vocabulary."""
        import hashlib  # here: translating never needs it, and it costs a process a millisecond

        digest = hashlib.sha256(self._src_bytes)
        if not self._same:
            digest.update(self._tgt_bytes)
        if self.vocab is not None:
            digest.update(self.vocab.blob)
        return digest.hexdigest()


def _write(path: Path, blob: bytes) -> None:
    path.write_bytes(blob)


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


def _decode(sp: spm.SentencePieceProcessor, ids: Sequence[Sequence[int]], vocab: Optional[Vocab] = None) -> list[str]:
    size = len(vocab.pieces) if vocab else sp.get_piece_size()
    kept = []
    for seq in ids:
        seq = seq.tolist() if hasattr(seq, "tolist") else seq  # numpy arrays / torch tensors
        kept.append([i for i in map(int, seq) if NUM_SPECIAL <= i < size])
    if vocab is not None:  # as MarianTokenizer: the word-start marks of pieces the model lacks become spaces too
        # language tokens (``tags``) are special tokens: not text, as transformers' skip_special_tokens has them
        pieces = [
            [p for p in map(vocab.pieces.__getitem__, seq) if p is not None and p not in vocab.tags] for seq in kept
        ]
        return [sp.decode_pieces(seq).replace("\u2581", " ").strip() for seq in pieces]
    # one call per sequence for a few: SentencePiece's batch call starts threads each time, which costs a lone
    # sentence far more than decoding it (docs/benchmarks.md, section 2); many pay for them
    if len(kept) < BATCH_ENCODE_FROM:
        return [sp.decode(seq) for seq in kept]
    return sp.decode(kept, num_threads=usable_cores())


def seed_sampling(seed: int) -> None:
    """Seed SentencePiece's (process-wide) sampler: the same seed gives the same sampled segmentations."""
    spm.set_random_generator_seed(seed)


def _encode(
    sp: spm.SentencePieceProcessor, lines: Sequence[str], alpha: float = 0.0, vocab: Optional[Vocab] = None
) -> list[list[int]]:
    """Deterministic segmentation, or with alpha > 0 a sampled one: BPE-dropout for bpe models (each merge
    skipped with probability alpha, Provilkov et al. 2020), subword regularisation for unigram models (a
    segmentation drawn from all of them, smoothed by alpha, Kudo 2018). Sampling runs on one thread, since
    SentencePiece's draws are reproducible from ``seed_sampling`` only then.
    """
    if not lines:
        return []
    if vocab is not None:  # SentencePiece cuts the text after any language tag; the vocabulary numbers the pieces
        texts = [line[len(vocab.leading_tag(line)) :] for line in lines]
        sampling = dict(enable_sampling=True, alpha=alpha, nbest_size=-1, num_threads=1) if alpha > 0 else {}
        return vocab.lookup(lines, sp.encode(texts, out_type=str, **({"num_threads": usable_cores()} | sampling)))
    if alpha > 0:
        out = sp.encode(list(lines), out_type=int, enable_sampling=True, alpha=alpha, nbest_size=-1, num_threads=1)
    elif len(lines) < BATCH_ENCODE_FROM:  # see _decode: threads cost more than they give on a few lines
        out = [sp.encode(line, out_type=int) for line in lines]
    else:
        out = sp.encode(list(lines), out_type=int, num_threads=usable_cores())
    return _tag_first(sp, lines, out)


LANGUAGE_TAG = re.compile(r"<2[^<>\s]+>|>>[^<>\s]+<<")  # a multilingual model's language token (languages.language_tag)


def _tag_first(sp: spm.SentencePieceProcessor, lines: Sequence[str], out: list[list[int]]) -> list[list[int]]:
    """A line that starts with a language tag starts with the tag's token, not with the word-start piece
    SentencePiece puts before it."""
    space = sp.piece_to_id("\u2581")
    if sp.id_to_piece(space) != "\u2581" or not any(line.startswith(("<2", ">>")) for line in lines):
        return out
    for i, (line, ids) in enumerate(zip(lines, out)):
        if (
            line.startswith(("<2", ">>"))
            and len(ids) > 1
            and ids[0] == space
            and LANGUAGE_TAG.fullmatch(sp.id_to_piece(ids[1]))
        ):
            out[i] = ids[1:]
    return out


BATCH_ENCODE_FROM = 256  # lines from which SentencePiece's threaded batch encoding pays for its threads


def usable_cores() -> int:
    """The cores this process may use (SentencePiece's threads for training and batch encoding)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no sched_getaffinity (macOS)
        return os.cpu_count() or 1


def _piece_table(sp: spm.SentencePieceProcessor, vocab: Optional[Vocab] = None) -> list[str]:
    """Every subword by id (a list lookup per subword is far cheaper than a call into SentencePiece)."""
    if vocab is not None:
        return [p or "<pad>" for p in vocab.pieces]
    return sp.id_to_piece(list(range(sp.get_piece_size())))  # a list in one call: a third of the time of a loop


def _pieces(table: list[str], ids: Sequence[int]) -> list[str]:
    size = len(table)
    if isinstance(ids, list) and (not ids or (min(ids) >= 0 and max(ids) < size)):  # the usual case, at list speed
        return [table[i] for i in ids]
    return [table[i] if 0 <= i < size else f"<{i}>" for i in map(int, ids)]
