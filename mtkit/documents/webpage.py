"""HTML pages (``.html``): the whole page through the markup path (``text.markup``): text of every block
translated, inline tags carried across, ``head`` metadata, scripts, styles, code and ``translate="no"`` left as
they are. The page is read and written as UTF-8."""

from __future__ import annotations

from mtkit.documents.formats import Translate
from mtkit.documents.plain import decode_utf8


def translate_document(data: bytes, translate: Translate) -> bytes:
    text, bom = decode_utf8(data)
    if not text.strip():
        return data
    [translated] = translate([text], "html")
    return bom + translated.encode("utf-8")
