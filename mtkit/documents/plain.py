"""Plain text (``.txt``): each line is a paragraph, translated sentence by sentence; line endings, blank lines,
indentation and a byte-order mark stay as they are."""

from __future__ import annotations

from mtkit.documents.formats import Translate
from mtkit.errors import MtkitError

BOM = b"\xef\xbb\xbf"


def decode_utf8(data: bytes) -> tuple[str, bytes]:
    """The text of UTF-8 bytes, and the byte-order mark they started with (b"" if none).

    Raises:
        MtkitError: bytes that are not UTF-8.
    """
    bom = BOM if data.startswith(BOM) else b""
    try:
        return data[len(bom) :].decode("utf-8"), bom
    except UnicodeDecodeError as err:
        raise MtkitError(f"not UTF-8 text (byte {err.start + len(bom)}); convert it to UTF-8 first") from None


def translate_document(data: bytes, translate: Translate) -> bytes:
    text, bom = decode_utf8(data)
    lines = text.splitlines(keepends=True)
    bodies = [line.rstrip("\r\n") for line in lines]
    wanted = [i for i, body in enumerate(bodies) if body.strip()]
    found = translate([bodies[i] for i in wanted], "text")
    for i, translation in zip(wanted, found):
        lines[i] = translation + lines[i][len(bodies[i]) :]
    return bom + "".join(lines).encode("utf-8")
