"""gettext catalogs (``.po``, ``.pot``), read and written with polib.

Translated: each entry that has a ``msgid``, is not obsolete and has no translation yet gets a ``msgstr`` (a
plural entry: ``msgstr[0]`` from ``msgid``, every other form from ``msgid_plural``, as many forms as the entry
has, else as the header's ``Plural-Forms`` says, else two). An entry that already has a translation (any
non-empty ``msgstr``, fuzzy or not) is kept as it is, so a catalog can be translated again after new strings
were added without touching what people translated. The new translations carry no ``fuzzy`` flag.

Kept as they are: the header entry (its comments and metadata), every entry's comments, flags, references,
context (``msgctxt``), previous ``msgid`` and its ``msgid`` itself, obsolete entries, and the file's charset
(the header's ``Content-Type``) and its line endings. polib writes the catalog back in its own layout: long
strings are re-wrapped at 78 columns, as ``msgmerge`` does.

Inside a message, placeholders (``%s``, ``%(name)d``, ``%1$s``, ``{name}``, ``%1``), character references
(``&amp;``) and HTML tags are kept verbatim and placed by alignment, an element's start and end tags around the
target words aligned to the source words they enclosed; line breaks stay where they were. A catalog without any
of these goes to the model as plain text (``"text"``, which every engine translates).

``to_html``, ``from_html``, ``respace`` and ``translate_fragments`` take texts with inline tags through the
markup path for the other formats too.
"""

from __future__ import annotations

import codecs
import re
from typing import TYPE_CHECKING, Optional

from mtkit.documents.formats import Translate
from mtkit.documents.fragments import from_html, library, to_html, translate_fragments
from mtkit.documents.plain import decode_utf8
from mtkit.errors import MtkitError

if TYPE_CHECKING:
    import polib

PLACEHOLDER = re.compile(
    r"%(?:\(\w+\)|\d+\$)?[-+#0]*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|q|j|z|t)?[diouxXeEfFgGaAcspn%]"
    r"|%\d+|\{[^{}\s]*\}|&(?:#\d+|#[xX][0-9a-fA-F]+|\w+);"
)  # printf and Qt placeholders, Python format fields, character references
_CHARSET = re.compile(rb"charset=([A-Za-z0-9._:-]+)")
_NPLURALS = re.compile(r"nplurals\s*=\s*(\d+)")
_KEYWORD = re.compile(r"(?:msgctxt|msgid_plural|msgid|msgstr(?:\[\d+\])?)\s+")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_EMPTY_HEADER = re.compile(r'\A((?:#.*\n)*)msgid ""\nmsgstr ""\n\n')


def translate_document(data: bytes, translate: Translate) -> bytes:
    """Translate the untranslated entries of a PO or POT catalog.

    Args:
        data: the catalog's bytes, in the charset its header names (UTF-8 when it names none).
        translate: the model (``formats.Translate``), called once with every message to translate.

    Returns:
        The catalog with the new translations, in its own charset.

    Raises:
        MtkitError: bytes that are not text in the catalog's charset, a catalog polib cannot read, a
            translation its charset cannot hold, or polib not installed.
    """
    charset = _charset(data)
    if charset == "utf-8":
        text, bom = decode_utf8(data)
    else:
        bom = b""
        try:
            text = data.decode(charset)
        except UnicodeDecodeError as err:
            raise MtkitError(
                f"not {charset} text as its header says (byte {err.start}); fix the header's charset"
            ) from None
    if "\n" not in text:  # polib reads a string without a line break that names an existing file as that file
        text += "\n"
    _check_strings(text)
    polib = library("polib", "PO")
    try:
        catalog = polib.pofile(text, encoding=charset)
    except (OSError, ValueError, IndexError, KeyError) as err:
        raise MtkitError(f"not a valid PO file ({err}); check it with msgfmt --check") from None
    forms = _plural_forms(catalog)
    wanted: list[tuple[polib.POEntry, Optional[list]]] = []  # (entry, its plural forms or None)
    texts: list[str] = []
    for entry in catalog:
        if entry.obsolete or not entry.msgid or _translated(entry):
            continue
        if entry.msgid_plural:
            keys = sorted(entry.msgstr_plural) or list(range(forms))
            wanted.append((entry, keys))
            texts += [entry.msgid, entry.msgid_plural]
        else:
            wanted.append((entry, None))
            texts.append(entry.msgid)
    if not wanted:
        return data
    fragments = [to_html(t, PLACEHOLDER) for t in texts]
    translated = translate_fragments([fragment for fragment, _ in fragments], translate)
    found = iter(from_html(t, kept) for t, (_, kept) in zip(translated, fragments))
    for entry, keys in wanted:
        if keys is None:
            entry.msgstr = next(found)
            continue
        one, other = next(found), next(found)
        entry.msgstr_plural = {key: one if key == 0 else other for key in keys}
    written = str(catalog)
    if not catalog.header and not re.match(r"#\s*$", text.split("\n", 1)[0]):
        written = written.removeprefix("#\n")  # polib writes "#" for a header without comments
    if not _has_header(text):
        # polib writes an empty header entry where the source had none, after the comments it took from the
        # first entry as the file's: without it they are that entry's again
        written = _EMPTY_HEADER.sub(r"\1", written, count=1)
    if "\r\n" in text:
        written = written.replace("\n", "\r\n")  # a string's own line breaks are written \n: only lines change
    try:
        return bom + written.encode(charset)
    except UnicodeEncodeError as err:
        raise MtkitError(
            f"the translation has characters charset {charset} cannot hold ({err.object[err.start : err.end]!r}); "
            "convert the catalog to UTF-8 first (msgconv --to-code=UTF-8)"
        ) from None


def _has_header(text: str) -> bool:
    """Whether the catalog's first entry is a header (``msgid ""`` then ``msgstr``)."""
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return len(lines) > 1 and re.fullmatch(r'msgid\s+""', lines[0]) is not None and lines[1].startswith("msgstr")


def _check_strings(text: str) -> None:
    """Raise ``MtkitError`` for a string without its closing quote (polib would cut its last character)."""
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if line.startswith(("#~", "#|")):
            line = line[2:].lstrip()
        elif line.startswith("#"):
            continue
        keyword = _KEYWORD.match(line)
        rest = line[keyword.end() :] if keyword else line
        if rest.startswith('"') and not _STRING.fullmatch(rest):
            raise MtkitError(
                f"not a valid PO file (line {number}: a string without its closing quote); check it with msgfmt --check"
            )


def _charset(data: bytes) -> str:
    """The codec of the charset the catalog's header names (utf-8 for none, ``CHARSET`` or an unknown one)."""
    found = _CHARSET.search(data[:4096])
    if found is None:
        return "utf-8"
    try:
        return codecs.lookup(found.group(1).decode("ascii")).name
    except LookupError:
        return "utf-8"


def _plural_forms(catalog: polib.POFile) -> int:
    found = _NPLURALS.search(catalog.metadata.get("Plural-Forms", ""))
    return max(int(found.group(1)), 1) if found else 2


def _translated(entry: polib.POEntry) -> bool:
    return bool(entry.msgstr) or any(entry.msgstr_plural.values())
