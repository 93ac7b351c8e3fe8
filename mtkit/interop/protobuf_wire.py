"""The protobuf wire format, as far as mtkit writes and edits protobuf files itself (an ONNX model, a SentencePiece
model) without the ``protobuf`` package: varints, length-delimited fields, and a reader of one message's fields."""

from __future__ import annotations

from typing import Iterable, Iterator

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5  # the wire types mtkit meets (groups, 3 and 4, are obsolete)


def varint(value: int) -> bytes:
    """Encode a base-128 varint.

    Args:
        value: an integer; a negative one is taken as an int64 (ten bytes, as protobuf writes it).

    Returns:
        The bytes.
    """
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def int_field(field: int, value: int) -> bytes:
    """Encode a varint field (int32, int64, enum, bool).

    Args:
        field: the field number.
        value: its value.

    Returns:
        The key and the value, as written in a message.
    """
    return varint(field << 3 | VARINT) + varint(value)


def bytes_field(field: int, value: bytes | str) -> bytes:
    """Encode a length-delimited field: a string (UTF-8), bytes or an embedded message.

    Args:
        field: the field number.
        value: a str (written as UTF-8) or bytes.

    Returns:
        The key, the length and the bytes, as written in a message.
    """
    data = value.encode("utf-8") if isinstance(value, str) else value
    return varint(field << 3 | LENGTH) + varint(len(data)) + data


def int_fields(field: int, values: Iterable[int]) -> bytes:
    """Encode a repeated varint field, one entry per value (unpacked, which every reader accepts).

    Args:
        field: the field number.
        values: its values, in order.

    Returns:
        The entries, as written in a message.
    """
    return b"".join(int_field(field, v) for v in values)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("truncated or overlong varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def fields(data: bytes) -> Iterator[tuple[int, int, int | bytes, bytes]]:
    """The fields of one message in the order they are written.

    Args:
        data: the serialized message.

    Returns:
        An iterator of (field number, wire type, value, the field's bytes as written): the value is an int for a
        varint, the payload bytes for the other wire types.

    Raises:
        ValueError: the bytes are not a well-formed message.
    """
    pos = 0
    while pos < len(data):
        start = pos
        key, pos = _read_varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == VARINT:
            value, pos = _read_varint(data, pos)
        elif wire in (FIXED64, FIXED32):
            size = 8 if wire == FIXED64 else 4
            value, pos = data[pos : pos + size], pos + size
        elif wire == LENGTH:
            size, pos = _read_varint(data, pos)
            value, pos = data[pos : pos + size], pos + size
        else:
            raise ValueError(f"wire type {wire} of field {number} is not supported")
        if pos > len(data) or number == 0:
            raise ValueError("truncated message")
        yield number, wire, value, data[start:pos]


# ------------------------------------------------------------------------------- SentencePiece's ModelProto
SPM_PIECES, SPM_PIECE, SPM_TYPE = 1, 1, 3  # ModelProto.pieces; each SentencePiece's piece and type
SPM_CONTROL, SPM_USER_DEFINED = 3, 4  # piece types: a control symbol (decodes to no text), one kept whole in text


def spm_with_pieces(model: bytes, pieces: Iterable[str], piece_type: int) -> bytes:
    """A SentencePiece ``ModelProto`` with ``pieces`` added after its last piece, each of ``piece_type``, and every
    other byte as it was.

    Raises:
        ValueError: the bytes are not a protobuf message.
    """
    parts = list(fields(model))
    last = max((i for i, (number, *_) in enumerate(parts) if number == SPM_PIECES), default=-1)
    new = b"".join(
        bytes_field(SPM_PIECES, bytes_field(SPM_PIECE, piece) + int_field(SPM_TYPE, piece_type)) for piece in pieces
    )
    return b"".join(raw for *_, raw in parts[: last + 1]) + new + b"".join(raw for *_, raw in parts[last + 1 :])
