"""Whether a teacher fits a student config (``mtkit distill``): a distilled data dir is encoded with the teacher's
tokenizer, so every tokenizer setting the config pins (writes out) must be the teacher's, and so must its languages.

The SentencePiece model type is read from the model file itself (its ``trainer_spec``), with a reader of the
protobuf wire format: the tokenizer settings need nothing beyond ``sentencepiece``.
"""

from __future__ import annotations

from typing import Iterator, Optional

from mtkit.errors import MtkitError
from mtkit.tokenizer import Tokenizer

SPM_MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}  # TrainerSpec.ModelType


def check_vocabulary(cfg, teacher) -> None:
    """Refuse, naming the config key, a teacher whose vocabulary or languages the student config contradicts.

    Args:
        cfg: the student's config; of its ``data`` section only the keys written in the file (or set with
            ``--set``) are compared, since the others are defaults the teacher's tokenizer replaces.
        teacher: the loaded teacher (``tokenizer``, ``languages``, ``targets``, ``members``).

    Raises:
        MtkitError: data.joint_vocab, data.vocab_size or data.spm_model_type pinned to another value than the
            teacher's; model.init_from with another vocabulary; data.src_lang / data.tgt_lang that are not the
            teacher's (where the teacher names its languages).
    """
    data, tok = cfg.data, teacher.tokenizer
    who = f"the teacher ({' + '.join(m['path'] for m in teacher.members)})"
    pinned = data.model_fields_set
    if "joint_vocab" in pinned and data.joint_vocab != tok.joint:
        kind = "one joint vocabulary" if tok.joint else "a source and a target vocabulary"
        raise MtkitError(
            f"data.joint_vocab = {data.joint_vocab}, but {who} has {kind}; the student shares the teacher's "
            f"vocabulary: set data.joint_vocab: {str(tok.joint).lower()} or drop it"
        )
    sizes = sorted({tok.src_vocab_size, tok.tgt_vocab_size})
    if "vocab_size" in pinned and sizes != [data.vocab_size]:
        raise MtkitError(
            f"data.vocab_size = {data.vocab_size}, but {who} has {' and '.join(map(str, sizes))} subwords; the "
            "student shares the teacher's vocabulary: set data.vocab_size to the teacher's or drop it"
        )
    types = {spm_model_type(blob) for side, blob in tok.model_bytes().items() if side != "vocab"} - {None}
    if "spm_model_type" in pinned and types and types != {data.spm_model_type}:
        raise MtkitError(
            f"data.spm_model_type = {data.spm_model_type}, but {who} has a {'/'.join(sorted(types))} "
            "SentencePiece model; set data.spm_model_type to the teacher's or drop it"
        )
    init_from = getattr(cfg.model, "init_from", None)
    if init_from and Tokenizer.from_run(init_from).fingerprint() != tok.fingerprint():
        raise MtkitError(
            f"model.init_from: {init_from} has another vocabulary than {who}; a distilled data dir is encoded "
            "with the teacher's: start from a run that shares it, or drop model.init_from"
        )
    src, tgt = teacher.languages
    if teacher.targets:  # a multilingual teacher: the student's target must be one of its targets
        if data.tgt_lang not in teacher.targets:
            raise MtkitError(
                f"data.tgt_lang = {data.tgt_lang}, but {who} translates into {', '.join(teacher.targets)}; "
                "set data.tgt_lang to one of them"
            )
        tgt = data.tgt_lang
    if src and tgt and (src, tgt) != (data.src_lang, data.tgt_lang):
        raise MtkitError(
            f"data.src_lang / data.tgt_lang are {data.src_lang} / {data.tgt_lang}, but {who} translates "
            f"{src} into {tgt}; set them to the teacher's"
        )


def spm_model_type(blob: bytes) -> Optional[str]:
    """The model type a SentencePiece model file was trained with.

    Args:
        blob: the bytes of a ``.model`` file (a serialised ``ModelProto``).

    Returns:
        ``unigram``, ``bpe``, ``word`` or ``char``; None where the bytes cannot be read.
    """
    try:
        for number, value in _fields(blob):
            if number == 2:  # ModelProto.trainer_spec
                for inner, kind in _fields(value):
                    if inner == 3:  # TrainerSpec.model_type
                        return SPM_MODEL_TYPES.get(kind)
                return "unigram"  # the field's default
    except (IndexError, ValueError, TypeError):
        return None
    return None


def _varint(blob: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = blob[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, pos


def _fields(blob: bytes) -> Iterator[tuple[int, object]]:
    """(field number, value) of each field of a protobuf message: an int (varint) or bytes (anything else)."""
    pos = 0
    while pos < len(blob):
        key, pos = _varint(blob, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(blob, pos)
        elif wire == 2:
            size, pos = _varint(blob, pos)
            value, pos = blob[pos : pos + size], pos + size
        elif wire in (1, 5):
            width = 8 if wire == 1 else 4
            value, pos = blob[pos : pos + width], pos + width
        else:
            raise ValueError(f"protobuf wire type {wire}")
        if pos > len(blob):
            raise ValueError("truncated")
        yield number, value
