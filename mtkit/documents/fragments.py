"""What several document formats share: a format's library imported with one line when missing, and texts
that carry inline codes (tags, placeholders, line breaks) as HTML fragments through the markup path and back."""

from __future__ import annotations

import html
import importlib
import re
from typing import Optional

from mtkit.documents.formats import Translate
from mtkit.errors import MtkitError
from mtkit.text import markup

_TAG = re.compile(r"</?([A-Za-z][A-Za-z0-9:-]*)(?:\s[^<>]*)?/?>")


def library(module: str, kind: str, package: Optional[str] = None):
    """The module ``module`` of the library (``package``, default: the module's name) that reads ``kind`` files,
    one of mtkit's ``documents`` extras.

    Raises:
        MtkitError: it is not installed.
    """
    try:
        return importlib.import_module(module)
    except ImportError:
        package = package or module
        raise MtkitError(f"{kind} files need {package}: pip install {package}") from None


# ----------------------------------------------------------------------- messages through the markup path
def translate_fragments(fragments: list[str], translate: Translate) -> list[str]:
    """Translate a document's HTML fragments in one call: as ``"html"`` where any of them holds a tag, else as
    plain ``"text"`` (which every engine translates; ``"html"`` needs the torch engine's alignments).

    Args:
        fragments: HTML fragments, their text escaped.
        translate: the model (``formats.Translate``).

    Returns:
        The translations, as HTML fragments either way.
    """
    if any("<" in fragment for fragment in fragments):
        return translate(fragments, "html")
    found = translate([html.unescape(fragment) for fragment in fragments], "text")
    return [html.escape(text, quote=False) for text in found]


def to_html(text: str, keep: Optional[re.Pattern] = None) -> tuple[str, list]:
    """``text`` as an HTML fragment for the markup path (``text.markup``), and what its markers stand for.

    Its HTML tags stay tags (a start tag with its end tag further on: an element around its words; any other
    tag: kept as it is), what ``keep`` matches and line breaks become markers (``data-keep`` elements kept
    verbatim), and the rest is text, escaped.

    Args:
        text: a message, a subtitle: plain text that may hold HTML tags.
        keep: what to keep verbatim besides unpaired tags (placeholders).

    Returns:
        The fragment, and per marker its source and the whitespace the source had before and after it (None
        for a line break); ``from_html`` puts them back.
    """
    pattern = f"(?P<tag>{_TAG.pattern})|(?P<newline>\\r\\n|\\r|\\n)"
    if keep is not None:
        pattern = f"(?P<keep>{keep.pattern})|{pattern}"
    pieces: list[tuple[str, str]] = []  # ("text" | "tag" | "newline" | "keep", source)
    position = 0
    for found in re.finditer(pattern, text):
        if found.start() > position:
            pieces.append(("text", text[position : found.start()]))
        kind = "tag" if found.group("tag") is not None else "newline" if found.group("newline") else "keep"
        pieces.append((kind, found.group()))
        position = found.end()
    if position < len(text):
        pieces.append(("text", text[position:]))
    paired = _paired_tags(pieces)
    kept: list = []
    parts = []
    for i, (kind, source) in enumerate(pieces):
        if kind == "text":
            parts.append(html.escape(source, quote=False))
        elif i in paired:
            parts.append(source)
        elif kind == "newline":
            kept.append((source, None))
            parts.append(f'<br data-keep="{len(kept) - 1}">')
        else:
            before = pieces[i - 1][1] if i and pieces[i - 1][0] == "text" else ""
            after = pieces[i + 1][1] if i + 1 < len(pieces) and pieces[i + 1][0] == "text" else ""
            kept.append((source, (before[len(before.rstrip()) :], after[: len(after) - len(after.lstrip())])))
            parts.append(f'<code data-keep="{len(kept) - 1}"></code>')
    return "".join(parts), kept


def _paired_tags(pieces: list[tuple[str, str]]) -> set[int]:
    """The indexes of the tags that open an element closed further on, and of their end tags."""
    paired: set[int] = set()
    stack: list[tuple[str, int]] = []
    for i, (kind, source) in enumerate(pieces):
        if kind != "tag":
            continue
        name = _TAG.match(source).group(1).lower()
        if source.startswith("</"):
            if stack and stack[-1][0] == name:
                paired.update((stack.pop()[1], i))
            else:
                stack.clear()  # a stray end tag: nothing before it pairs across it
        elif not source.endswith("/>") and name not in markup.VOID:
            stack.append((name, i))
    return paired


def from_html(fragment: str, kept: list) -> str:
    """The text of a translated fragment made by ``to_html``: text unescaped, markers back to their source
    with the whitespace they had around them, elements with their tags as written."""
    return _joined(markup.parse(fragment).children, kept)


def _joined(children: list, kept: list) -> str:
    items = []
    for node in children:
        if isinstance(node, markup.Text):
            items.append((node.text, None, True))
        elif isinstance(node, markup.Raw):
            items.append((node.raw, None, False))
        else:
            index = node.attrs.get("data-keep")
            if index is not None and index.isdigit() and int(index) < len(kept):
                items.append((*kept[int(index)], False))
            else:
                items.append((node.open + _joined(node.children, kept) + node.close, None, False))
    return respace(items)


def respace(items: list[tuple[str, Optional[tuple[str, str]], bool]]) -> str:
    """Siblings of a translation joined, each marker with the whitespace its source had before and after it
    (``respaced``)."""
    return "".join(respaced(items))


def respaced(items: list[tuple[str, Optional[tuple[str, str]], bool]]) -> list[str]:
    """The text of each sibling of a translation, each marker given the whitespace its source had around it.

    The markup path puts a marker right before the target word aligned to the source word after it, whatever
    whitespace lay around it; here the text next to a marker gets that whitespace back (and where an element
    or another marker is next to it, the marker's own text gets it).

    Args:
        items: per sibling, in order: its text, the (before, after) whitespace of a marker (None for anything
            else), and whether it is text.

    Returns:
        The siblings' texts, in order.
    """
    texts = [text for text, _, _ in items]
    last = len(items) - 1
    for k, (_, spacing, _) in enumerate(items):
        if spacing is None:
            continue
        before, after = spacing
        if k > 0 and items[k - 1][2]:
            previous = texts[k - 1]
            inner = previous.strip() or k - 1 > 0  # whitespace only at the very start stays nothing
            texts[k - 1] = previous.rstrip() + (before if inner else "")
        elif k > 0 and items[k - 1][1] is None and not texts[k - 1][-1:].isspace():  # after an element
            texts[k] = before + texts[k]
        if k < last and items[k + 1][2]:
            following = texts[k + 1]
            inner = following.strip() or k + 1 < last
            texts[k + 1] = (after if inner else "") + following.lstrip()
        elif k < last and not texts[k + 1][:1].isspace():  # before an element or another marker
            texts[k] += after
    return texts
