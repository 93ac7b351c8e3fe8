"""The document formats ``mtkit translate-file`` reads and writes, and what each format module provides.

A format module turns a document's bytes into the bytes of its translation, handing the model all of the
document's texts in one call so that their sentences share batches::

    def translate_document(data: bytes, translate: Translate) -> bytes

``translate(texts, markup)`` returns one translation per text, in order; ``markup`` is ``"text"`` (plain text:
a paragraph is cut into sentences, its whitespace kept) or ``"html"`` (an HTML fragment whose inline tags are
carried across; ``text.markup``). A module raises ``MtkitError`` saying what is wrong with a document it cannot
read (without the file's name: the caller adds it), and only that.
"""

from __future__ import annotations

import importlib
from typing import Callable

from mtkit.errors import MtkitError

Translate = Callable[[list, str], list]

# format name -> (module under mtkit.documents:its function, file name endings)
FORMATS: dict[str, tuple[str, tuple[str, ...]]] = {
    "txt": ("plain:translate_document", (".txt",)),
    "md": ("markdown:translate_document", (".md", ".markdown")),
    "html": ("webpage:translate_document", (".html", ".htm", ".xhtml")),
    "docx": ("office:translate_document", (".docx",)),
    "pptx": ("office:translate_presentation", (".pptx",)),
    "srt": ("subtitles:translate_document", (".srt",)),
    "po": ("gettext:translate_document", (".po", ".pot")),
    "xliff": ("xliff:translate_document", (".xliff", ".xlf")),
}


def format_of(name: str, given: str | None = None) -> str:
    """The format of a file called ``name``: ``given`` (``--format``) if set, else from its ending.

    Raises:
        MtkitError: an unknown ``given`` format, or an ending no format has.
    """
    names = ", ".join(FORMATS)
    if given:
        if given not in FORMATS:
            raise MtkitError(f"--format {given!r}: expected one of {names}")
        return given
    lower = name.lower()
    for fmt, (_, endings) in FORMATS.items():
        if lower.endswith(endings):
            return fmt
    raise MtkitError(f"{name}: unknown document format; name it with --format (one of {names})")


def translator_of(fmt: str) -> Callable[[bytes, Translate], bytes]:
    """The function that translates a document of format ``fmt``."""
    module, function = FORMATS[fmt][0].split(":")
    return getattr(importlib.import_module(f"mtkit.documents.{module}"), function)
