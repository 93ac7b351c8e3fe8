"""Word documents (``.docx``, python-docx) and PowerPoint presentations (``.pptx``, python-pptx), translated
paragraph by paragraph with their formatting kept.

A paragraph's runs are gathered into groups: adjacent runs with the same formatting (and the same hyperlink,
tracked insertion or content control) form one group. A paragraph of one group goes to the model as plain text;
one of several groups as an HTML fragment with a ``<span data-g="N">`` around the text of group N, which the
model's markup path (``text.markup``) puts around the target words aligned to that group's words. Each group's
translation is written into the text of its runs: the first run holds it all and the others become empty, so a
run keeps its formatting and a bold word's translation stays bold. Nothing else in a paragraph changes: its
properties, style, numbering, pictures, fields, footnote references, bookmarks and comment anchors stay where
they are. Tabs and line breaks end a sentence (they are ``<br>`` in the fragment), so the text on each side of
one stays on that side. All the paragraphs of a document are translated in one call per markup.

Word: the paragraphs of the body (tables, nested tables, text boxes and content controls included), headers,
footers, footnotes, endnotes and comments. Left as they are: the text of fields (page numbers, dates, tables of
contents, cross-references, field hyperlinks: Word computes it anew), deleted text of tracked changes,
equations, charts, SmartArt and the document's properties (title, author). Hyperlinks (``w:hyperlink``) are
groups of their own and keep their target.

PowerPoint: the paragraphs of every slide's shapes (grouped shapes and table cells included) and of its speaker
notes. Left as they are: slide masters and layouts (their placeholder prompts), fields (slide numbers, dates),
charts, SmartArt and the presentation's properties. A hyperlink belongs to a run's properties, so it stays with
the text of its group.

Either function raises ``MtkitError`` for a file that is not a readable document of its kind: not a ZIP archive
(truncated, another kind of file), an archive without the document's parts, broken XML, or an encrypted
(password-protected) file or an older binary Office file (both are OLE compound files, not ZIP archives).
"""

from __future__ import annotations

import html
import importlib
import io
import re
import zipfile
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Optional

from lxml import etree

from mtkit.documents.formats import Translate
from mtkit.errors import MtkitError
from mtkit.text import markup

OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"  # the start of an OLE compound file (encrypted OOXML, .doc, .ppt)
ENCRYPTED_STREAM = "EncryptedPackage".encode("utf-16-le")  # a stream name only encrypted OOXML files hold

W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"

WORD_PARTS = frozenset(
    "application/vnd.openxmlformats-officedocument.wordprocessingml." + name
    for name in ("document.main+xml", "header+xml", "footer+xml", "footnotes+xml", "endnotes+xml", "comments+xml")
)
SLIDE_PARTS = frozenset(
    "application/vnd.openxmlformats-officedocument.presentationml." + name for name in ("slide+xml", "notesSlide+xml")
)

# In a Word paragraph: elements whose runs are part of the paragraph's text (w:sdt, a content control, too: its
# w:sdtContent holds them); each is a group boundary, so a hyperlink's text stays in the hyperlink.
_W_CONTAINERS = frozenset(W + n for n in "hyperlink ins smartTag customXml moveTo dir bdo sdtContent".split())
_W_SKIPPED = frozenset(W + n for n in ("pPr", "proofErr", "sdtPr", "sdtEndPr"))  # neither text nor a mark
_W_BREAKS = frozenset(W + n for n in ("tab", "ptab", "br", "cr"))  # end a sentence
_W_RUN_SKIPPED = frozenset(W + n for n in ("rPr", "lastRenderedPageBreak"))
# Run property attributes PowerPoint sets per run without changing how it looks (spelling errors, edit state).
_A_NOISE = ("dirty", "err", "smtClean", "smtId", "noProof")
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")

# A paragraph, as a sequence of items: ("text", text element, group key), ("break", None, None) (a tab or a line
# break: it ends the sentence before it) or ("mark", None, None) (a picture, a field, a bookmark, ...: it ends a
# group, so the text on each side of it is placed by alignment).
Item = tuple[str, Optional[etree._Element], Optional[tuple]]


# -------------------------------------------------------------------------------------------------- paragraphs
@dataclass
class _Paragraph:
    """A paragraph to translate: its groups of text elements, and its layout (group numbers, None for a break)."""

    groups: list[list[etree._Element]]
    layout: list[Optional[int]]

    @property
    def texts(self) -> list[str]:
        return ["".join(element.text or "" for element in group) for group in self.groups]

    @property
    def markup(self) -> str:
        """``text`` for one group and no break, else ``html``."""
        return "text" if len(self.groups) == 1 and None not in self.layout else "html"

    def source(self) -> str:
        """What the model translates: the text of its one group, or an HTML fragment of its groups and breaks."""
        texts = self.texts
        if self.markup == "text":
            return texts[0]
        return "".join(
            "<br>" if g is None else f'<span data-g="{g}">{html.escape(texts[g], quote=False)}</span>'
            for g in self.layout
        )

    def write(self, translated: str) -> None:
        """Put ``translated`` (the model's output for ``source()``) into the text elements."""
        found = [translated] if self.markup == "text" else _distribute(translated, self.texts)
        for group, text in zip(self.groups, found):
            for i, element in enumerate(group):
                element.text = _XML_ILLEGAL.sub("", text) if i == 0 else ""
                if element.tag == W + "t":
                    element.set(XML_SPACE, "preserve")


def _paragraph(items: Iterable[Item]) -> Optional[_Paragraph]:
    """The paragraph of ``items``; None if it has no text to translate (no text, or whitespace only)."""
    groups: list[list[etree._Element]] = []
    layout: list[Optional[int]] = []
    key = None  # the group key of the text just before, None after a break or a mark
    for kind, element, group_key in items:
        if kind == "text":
            if not element.text:
                continue
            if key is not None and group_key == key:
                groups[-1].append(element)
            else:
                groups.append([element])
                layout.append(len(groups) - 1)
                key = group_key
        else:
            key = None
            if kind == "break":
                layout.append(None)
    paragraph = _Paragraph(groups, layout)
    if not any(text.strip() for text in paragraph.texts):
        return None
    return paragraph


def _distribute(fragment: str, sources: list[str]) -> list[str]:
    """The text that landed in each ``<span data-g="N">`` of a translated fragment (N < len(sources), the source
    texts of the groups). Text outside every group joins the nearest group before it, else the nearest after it
    (looking past a break only when there is none between the breaks around it), else the first group; whitespace
    between two groups is shared as their sources had it (the one before takes up to as much as its source ended
    with, the one after the rest if its source started with whitespace)."""
    pieces: list[tuple[Optional[int], str]] = []  # (group or None for outside, text); (None, None) for a break

    def visit(node, group: Optional[int]) -> None:
        if isinstance(node, markup.Text):
            pieces.append((group, node.text))
        elif isinstance(node, markup.Element):
            number = node.attrs.get("data-g") if node.tag == "span" else None
            if number is not None and number.isdigit() and int(number) < len(sources):
                group = int(number)
                pieces.append((group, ""))  # where the group is, even if empty
            elif node.tag == "br" and group is None:
                pieces.append((None, None))
            for child in node.children:
                visit(child, group)

    visit(markup.parse(fragment), None)
    found: list[list[str]] = [[] for _ in sources]
    for i, (group, text) in enumerate(pieces):
        if text is None:
            continue
        if group is None:
            before, after = _neighbour(pieces, i, -1), _neighbour(pieces, i, 1)
            if before is None and after is None:  # alone between breaks: the nearest group across them
                before, after = _neighbour(pieces, i, -1, True), _neighbour(pieces, i, 1, True)
            if before is None or after is None:  # a group on one side only, or none at all (then the first)
                side = before if before is not None else after
                found[side if side is not None else 0].append(text)
            elif text.isspace() and sources[after][:1].isspace():  # as much as the source had on each side
                keep = len(sources[before]) - len(sources[before].rstrip())
                found[before].append(text[:keep])
                found[after].append(text[keep:])
            else:
                found[before].append(text)
            continue
        found[group].append(text)
    return ["".join(parts) for parts in found]


def _neighbour(pieces: list, i: int, step: int, across: bool = False) -> Optional[int]:
    """The group of the nearest piece from ``i`` in direction ``step`` that is in a group; stopping at a break
    unless ``across``."""
    i += step
    while 0 <= i < len(pieces):
        group, text = pieces[i]
        if group is not None:
            return group
        if text is None and not across:
            return None
        i += step
    return None


def _translate(paragraphs: list[_Paragraph], translate: Translate) -> None:
    """Translate ``paragraphs`` in one call per markup and write each translation back."""
    for kind in ("text", "html"):
        chosen = [p for p in paragraphs if p.markup == kind]
        if not chosen:
            continue
        translated = translate([p.source() for p in chosen], kind)
        for paragraph, text in zip(chosen, translated):
            paragraph.write(text)


# -------------------------------------------------------------------------------------------------- opening
def _open(data: bytes, kind: str, opener: Callable[[io.BytesIO], object]):
    """``opener(data)``; any failure becomes an ``MtkitError`` saying what is wrong with the ``kind`` file."""
    if data.startswith(OLE_MAGIC):
        if ENCRYPTED_STREAM in data:
            raise MtkitError(f"encrypted (password-protected) {kind}; remove the password first")
        raise MtkitError(
            f"not a {kind} file but an older binary Office file (such as .doc or .ppt); save it as .{kind.lower()}"
        )
    if not zipfile.is_zipfile(io.BytesIO(data)):
        raise MtkitError(
            f"not a valid {kind} file (it is not a ZIP archive); it may be truncated or another kind of file"
        )
    try:
        return opener(io.BytesIO(data))
    except KeyError as err:
        missing = re.search(r"named '([^']+)'", str(err))
        what = f"has no {missing.group(1)}" if missing else f"lacks a part ({err})"
        raise MtkitError(f"not a valid {kind} file (the ZIP archive {what})") from None
    except etree.XMLSyntaxError as err:
        raise MtkitError(f"not a valid {kind} file (broken XML: {err})") from None
    except ValueError as err:
        found = re.search(r"content type is '([^']+)'", str(err))
        if found:
            raise MtkitError(f"not a {kind} file (its main part has content type {found.group(1)})") from None
        raise MtkitError(f"not a valid {kind} file ({err})") from None
    except Exception as err:  # zlib, zipfile and the libraries' own errors: all mean a damaged file
        raise MtkitError(f"not a valid {kind} file ({type(err).__name__}: {err})") from None


def _roots(package, content_types: frozenset, kind: str) -> Iterator[tuple[etree._Element, Callable[[], None]]]:
    """The XML root of each part of ``package`` with one of ``content_types``, and what stores it after a change
    (parts the library does not model are plain bytes: parsed here, written back as bytes)."""
    for part in package.iter_parts():
        if part.content_type not in content_types:
            continue
        element = getattr(part, "_element", None)
        if element is not None:
            yield element, lambda: None
            continue
        try:
            root = etree.fromstring(part.blob, etree.XMLParser(resolve_entities=False, no_network=True))
        except etree.XMLSyntaxError as err:
            raise MtkitError(f"not a valid {kind} file (broken XML in {part.partname}: {err})") from None

        def store(part=part, root=root) -> None:
            part._blob = etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=True)

        yield root, store


def _library(module: str, package: str, kind: str):
    """The module ``module`` of the library that reads ``kind`` files.

    Raises:
        MtkitError: it is not installed.
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MtkitError(f"{kind} files need {package}: pip install {package}") from None


def _save(document) -> bytes:
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


# -------------------------------------------------------------------------------------------------- Word
def _word_items(paragraph: etree._Element, fields: list[int]) -> Iterator[Item]:
    """The items of a Word paragraph (``w:p``); ``fields[0]``: how deep inside complex fields the text is (a field
    may span paragraphs), updated as the paragraph's field characters go by."""
    for child in paragraph:
        yield from _word_inline(child, fields)


def _word_inline(element: etree._Element, fields: list[int]) -> Iterator[Item]:
    tag = element.tag
    if tag == W + "r":
        yield from _word_run(element, fields)
    elif tag in _W_CONTAINERS or tag == W + "sdt":  # a group ends where one of these starts or ends
        yield "mark", None, None
        for child in element:
            yield from _word_inline(child, fields)
        yield "mark", None, None
    elif tag not in _W_SKIPPED:
        yield "mark", None, None  # bookmarks, comment anchors, simple fields, deletions, equations, ...


def _word_run(run: etree._Element, fields: list[int]) -> Iterator[Item]:
    properties = run.find(W + "rPr")
    key = (b"" if properties is None else etree.tostring(properties),)
    for child in run:
        tag = child.tag
        if tag == W + "fldChar":
            state = child.get(W + "fldCharType")
            if state == "begin":
                fields[0] += 1
            elif state == "end":
                fields[0] = max(fields[0] - 1, 0)
            yield "mark", None, None
        elif tag in _W_RUN_SKIPPED:
            continue
        elif fields[0]:
            yield "mark", None, None  # a field's instruction or result
        elif tag == W + "t":
            yield "text", child, key
        elif tag in _W_BREAKS:
            yield "break", None, None
        else:
            yield "mark", None, None  # pictures, symbols, footnote references, hyphens, ...


def translate_document(data: bytes, translate: Translate) -> bytes:
    """Translate a Word document (``.docx``), keeping its structure and formatting.

    Args:
        data: the document's bytes.
        translate: the model (``formats.Translate``); called once per markup (``text``, ``html``) with all the
            paragraphs of that markup.

    Returns:
        The translated document's bytes.

    Raises:
        MtkitError: a file that is not a readable DOCX (truncated, not a ZIP archive, without
            ``word/document.xml``, broken XML, encrypted, an old ``.doc``).
    """
    docx = _library("docx", "python-docx", "DOCX")
    document = _open(data, "DOCX", docx.Document)
    paragraphs, stores = [], []
    for root, store in _roots(document.part.package, WORD_PARTS, "DOCX"):
        stores.append(store)
        fields = [0]
        for element in root.iter(W + "p"):
            paragraph = _paragraph(_word_items(element, fields))
            if paragraph is not None:
                paragraphs.append(paragraph)
    _translate(paragraphs, translate)
    for store in stores:
        store()
    return _save(document)


# -------------------------------------------------------------------------------------------------- PowerPoint
def _slide_items(paragraph: etree._Element) -> Iterator[Item]:
    """The items of a DrawingML paragraph (``a:p``)."""
    for child in paragraph:
        tag = child.tag
        if tag == A + "r":
            text = child.find(A + "t")
            if text is not None:
                yield "text", text, _slide_key(child.find(A + "rPr"))
        elif tag == A + "br":
            yield "break", None, None
        elif tag not in (A + "pPr", A + "endParaRPr"):
            yield "mark", None, None  # fields (slide number, date), equations


def _slide_key(properties: Optional[etree._Element]) -> tuple:
    if properties is None:
        return (b"",)
    properties = etree.fromstring(etree.tostring(properties))
    for name in _A_NOISE:
        properties.attrib.pop(name, None)
    return (etree.tostring(properties),)


def translate_presentation(data: bytes, translate: Translate) -> bytes:
    """Translate a PowerPoint presentation (``.pptx``): the text of its slides and speaker notes, keeping
    layout and formatting.

    Args:
        data: the presentation's bytes.
        translate: the model (``formats.Translate``); called once per markup (``text``, ``html``) with all the
            paragraphs of that markup.

    Returns:
        The translated presentation's bytes.

    Raises:
        MtkitError: a file that is not a readable PPTX (truncated, not a ZIP archive, missing parts, broken XML,
            encrypted, an old ``.ppt``).
    """
    pptx = _library("pptx", "python-pptx", "PPTX")
    presentation = _open(data, "PPTX", pptx.Presentation)
    paragraphs, stores = [], []
    for root, store in _roots(presentation.part.package, SLIDE_PARTS, "PPTX"):
        stores.append(store)
        for element in root.iter(A + "p"):
            paragraph = _paragraph(_slide_items(element))
            if paragraph is not None:
                paragraphs.append(paragraph)
    _translate(paragraphs, translate)
    for store in stores:
        store()
    return _save(presentation)
