"""Markdown (``.md``), read with markdown-it-py (CommonMark with GitHub's tables and strikethrough).

Translated: the text of paragraphs, headings (ATX and setext), list items, blockquotes and table cells. Each
one is handed to the model as an HTML fragment of its inline content, so that formatting follows the words it
was on: ``**bold**``, ``*em*`` and ``~~struck~~`` become ``strong``, ``em`` and ``s``, ``[text](url)`` an ``a``
whose link text is translated; a code span becomes a ``code`` element, kept; images, autolinks and inline HTML
are kept verbatim and placed by alignment. The translation is written back as Markdown with the source's own
delimiters, link destinations, titles and reference labels (a shortcut reference ``[Text]`` becomes
``[translated text][Text]`` so that it still finds its definition), and the text escaped where it would
otherwise read as Markdown syntax. A document without any inline formatting goes to the model as plain text
(``"text"``, which every engine translates).

Kept as they are: everything outside that text, line by line: code blocks and fences, HTML blocks, thematic
breaks, link reference definitions, front matter (``---`` YAML or ``+++`` TOML at the top of the file), blank
lines, line endings, and each block line's prefix (``#``, ``>``, list markers, indentation, table pipes).

A paragraph whose lines were wrapped comes back on one line (its soft line breaks are spaces to the model); a
hard line break (two trailing spaces or a backslash) is kept, the text after it on the next line with that
line's prefix. Image descriptions (``![alt]``) are not translated. The file is read and written as UTF-8.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Optional

from markdown_it import MarkdownIt, rules_inline

from mtkit.documents.formats import Translate
from mtkit.documents.fragments import respace, translate_fragments
from mtkit.documents.plain import decode_utf8
from mtkit.errors import MtkitError
from mtkit.text import markup

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)?")
_FRONT = {"---": ("---", "..."), "+++": ("+++",)}  # front matter's opening line -> its closing lines
_SPANS = {"strong_open": "strong", "em_open": "em", "s_open": "s"}
_CLOSES = {"strong_close": "strong", "em_close": "em", "s_close": "s", "link_close": "a"}
_START_TAG = re.compile(r"<([A-Za-z][A-Za-z0-9-]*)(?:\s[^<>]*)?>\Z")
_END_TAG = re.compile(r"</([A-Za-z][A-Za-z0-9-]*)\s*>\Z")
_ESCAPE = re.compile(r"[\\`*_\[\]<>|~]|&(?=#?\w+;)")  # read as Markdown anywhere in a line
_LINE_START = re.compile(r"[#>+=-]|\d{1,9}(?=[.)])")  # read as a block marker at the start of a line
_ESCAPE_HEADING = re.compile(r"[\\`*_\[\]<>|~#]|&(?=#?\w+;)")  # and "#", which could close an ATX heading


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    """CommonMark with tables and strikethrough, its inline rules recording where in the inline source each
    token they make came from (``meta["at"]``: offset, ``meta["source"]``: the text the rule consumed)."""
    md = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    rules = {
        "autolink": rules_inline.autolink,
        "backticks": rules_inline.backtick,
        "escape": rules_inline.escape,
        "html_inline": rules_inline.html_inline,
        "image": rules_inline.image,
        "link": rules_inline.link,
        "newline": rules_inline.newline,
    }
    for name, rule in rules.items():
        md.inline.ruler.at(name, _recording(rule))
    return md


def _recording(rule):
    """``rule`` (an inline rule of markdown-it-py) recording the source of the tokens it makes; for a link, its
    label and what follows the label (``meta["label"]``, ``meta["tail"]``)."""

    def recorded(state, silent: bool) -> bool:
        start, count = state.pos, len(state.tokens)
        if not rule(state, silent):
            return False
        if not silent:
            source = state.src[start : state.pos]
            for token in state.tokens[count:]:
                if "source" not in token.meta:
                    token.meta.update(at=start, source=source)
                if token.type == "link_open" and token.markup != "autolink":
                    label_end = state.md.helpers.parseLinkLabel(state, start, True)
                    if label_end > start:
                        token.meta.update(
                            label=state.src[start + 1 : label_end], tail=state.src[label_end + 1 : state.pos]
                        )
        return True

    return recorded


@dataclass
class _Inline:
    """One block's inline content to translate: its HTML fragment and how to write the translation back."""

    fragment: str
    # per data-md index: ("wrap", delimiter), ("link", label, tail), ("html", start tag, end tag, spacing),
    # ("keep", source, spacing) or ("br",); spacing: the whitespace before and after it in the source
    pieces: list
    lines: list[int]  # the document line of each hard-break-separated segment's start
    breaks: list[str]  # the hard-break marker ending each segment but the last
    start: tuple[int, int]  # (line, column) where the replaced text starts
    end: tuple[int, int]  # (line, column) where it ends
    heading: bool = False  # an ATX heading: "#" that could close it is escaped
    table: bool = False  # a table cell: "|" escaped with a backslash (elsewhere as &#124;, no table's pipe)
    prefixes: list[str] = field(default_factory=list)  # per segment after the first: the prefix of its line


def translate_document(data: bytes, translate: Translate) -> bytes:
    """Translate a Markdown document.

    Args:
        data: the document's bytes (UTF-8, a byte-order mark kept).
        translate: the model (``formats.Translate``), called once with every text of the document.

    Returns:
        The translated document's bytes.

    Raises:
        MtkitError: bytes that are not UTF-8.
    """
    text, bom = decode_utf8(data)
    lines = _LINE.findall(text)[:-1] if text else []  # the last match is always the empty string
    parsed = [line.rstrip("\r\n") for line in lines]
    masked = list(parsed)
    for i in range(_front_matter(parsed)):
        masked[i] = ""
    try:
        tokens = _parser().parse("\n".join(masked))
    except Exception as err:  # markdown-it-py documents no error type of its own
        raise MtkitError(f"not a Markdown document markdown-it-py can read ({err})") from None
    found = []
    cursors: dict[int, int] = {}  # table row line -> column after its last cell found
    for i, token in enumerate(tokens):
        if token.type != "inline" or not token.map or i == 0:
            continue
        block = tokens[i - 1]
        if block.type in ("paragraph_open", "heading_open", "th_open", "td_open"):
            inline = _plan(token, block, parsed, cursors)
            if inline is not None:
                found.append(inline)
    if not found:
        return data
    translations = translate_fragments([inline.fragment for inline in found], translate)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    edits = []
    for inline, translated in zip(found, translations):
        replacement = _written(inline, translated, lines)
        if replacement is not None:
            (a_line, a_col), (b_line, b_col) = inline.start, inline.end
            edits.append((starts[a_line] + a_col, starts[b_line] + b_col, replacement))
    out = text
    for start, end, replacement in sorted(edits, reverse=True):
        out = out[:start] + replacement + out[end:]
    return bom + out.encode("utf-8")


def _front_matter(lines: list[str]) -> int:
    """How many lines at the top are front matter (0 if none)."""
    if not lines or lines[0].rstrip() not in _FRONT:
        return 0
    closing = _FRONT[lines[0].rstrip()]
    for i in range(1, len(lines)):
        if lines[i].rstrip() in closing:
            return i + 1
    return 0


# ------------------------------------------------------------------------------------ source -> fragment
def _plan(token, block, lines: list[str], cursors: dict[int, int]) -> Optional[_Inline]:
    """The fragment of an inline token and where its text lies in the document (``lines``, without their line
    endings); None when it has no text or its text cannot be found in its lines."""
    content = token.content
    if not content.strip():
        return None
    built = _fragment(token.children or [], content)
    if built is None:
        return None
    fragment, pieces, breaks_at = built

    content_lines = content.split("\n")
    first = token.map[0]
    if first + len(content_lines) > len(lines):
        return None
    if block.type in ("th_open", "td_open"):
        return _in_table(token, lines, cursors, fragment, pieces)
    heading = block.type == "heading_open" and block.markup.startswith("#")
    spans = []  # per content line: (start column, end column) of its text
    for j, piece in enumerate(content_lines):
        line = lines[first + j]
        if heading:
            marker = line.find(block.markup)
            start = line.find(piece, marker + len(block.markup)) if marker >= 0 else -1
            if start < 0:
                return None
            spans.append((start, start + len(piece)))
            continue
        core, trimmed = piece.strip(), line.rstrip()
        if not core or not trimmed.endswith(core):
            return None
        spans.append((len(trimmed) - len(core), len(trimmed)))
    segment_lines = [first] + [first + j + 1 for j in breaks_at]
    breaks = []  # the source's own: trailing spaces, else a backslash
    for j in breaks_at:
        trailing = lines[first + j][spans[j][1] :]
        breaks.append(trailing if len(trailing) >= 2 else "\\")
    prefixes = [lines[n][: spans[n - first][0]] for n in segment_lines[1:]]
    return _Inline(
        fragment,
        pieces,
        segment_lines,
        breaks,
        (first, spans[0][0]),
        (first + len(content_lines) - 1, spans[-1][1]),
        heading=heading,
        prefixes=prefixes,
    )


def _fragment(children: list, content: str) -> Optional[tuple[str, list, list[int]]]:
    """The HTML fragment of an inline token's children, its pieces (what each ``data-md`` element stands for)
    and the content line of each hard break; None when a child cannot be written back."""
    pieces: list = []
    parts: list[str] = []
    breaks_at: list[int] = []
    texts: set[int] = set()  # the parts that are text
    kept: dict[int, list[int]] = {}  # piece kept as it is, or inline HTML -> its first and last part
    pairs = _html_pairs(children)
    closing: dict[int, tuple[str, int]] = {}  # index of an end tag -> its name and its start tag's piece
    i = 0
    while i < len(children):
        child = children[i]
        kind = child.type
        if kind in ("text", "softbreak"):
            texts.add(len(parts))
            parts.append(html.escape(child.content, quote=False) if kind == "text" else " ")
        elif kind == "hardbreak":
            breaks_at.append(content.count("\n", 0, child.meta.get("at", 0)))
            parts.append(_tag("br", pieces, ("br",)))
        elif kind in _SPANS:
            parts.append(_tag(_SPANS[kind], pieces, ("wrap", child.markup)))
        elif kind in _CLOSES:
            parts.append(f"</{_CLOSES[kind]}>")
        elif kind == "link_open" and child.markup == "autolink":
            if "source" not in child.meta:
                return None
            kept[len(pieces)] = [len(parts), len(parts)]
            parts.append(_tag("img", pieces, ("keep", child.meta["source"])))
            while i < len(children) and children[i].type != "link_close":
                i += 1
        elif kind == "link_open":
            label, tail = child.meta.get("label"), child.meta.get("tail")
            if label is None:
                return None
            attrs = {"href": child.attrs.get("href", "")}
            if child.attrs.get("title"):
                attrs["title"] = child.attrs["title"]
            parts.append(_tag("a", pieces, ("link", label, tail), attrs))
        elif kind == "code_inline":
            if "source" not in child.meta:
                return None
            kept[len(pieces)] = [len(parts), len(parts)]
            opened = _tag("code", pieces, ("keep", child.meta["source"]))
            parts.append(opened + html.escape(child.content, quote=False) + "</code>")
        elif i in pairs:  # inline HTML that opens an element closed further on: an element around its words
            name = child.meta["name"]
            kept[len(pieces)] = [len(parts), len(parts)]
            closing[pairs[i]] = (name, len(pieces))
            pieces.append(("html", child.content, children[pairs[i]].content))
            tag = name if name not in markup.BLOCK else "span"
            rest = child.content[1 + len(name) : -1].rstrip()
            parts.append(f'<{tag}{rest} data-md="{len(pieces) - 1}">')
        elif i in closing:
            name, piece = closing[i]
            kept[piece][1] = len(parts)
            parts.append(f"</{name if name not in markup.BLOCK else 'span'}>")
        elif kind in ("image", "html_inline"):
            if "source" not in child.meta:
                return None
            kept[len(pieces)] = [len(parts), len(parts)]
            parts.append(_tag("img", pieces, ("keep", child.meta["source"])))
        else:  # a token this module does not know how to write back
            return None
        i += 1
    for piece, (first, last) in kept.items():  # the whitespace around each, given back after translation
        before = parts[first - 1] if first - 1 in texts else ""
        after = parts[last + 1] if last + 1 in texts else ""
        spacing = (before[len(before.rstrip()) :], after[: len(after) - len(after.lstrip())])
        pieces[piece] = (*pieces[piece], spacing)
    return "".join(parts), pieces, breaks_at


def _html_pairs(children: list) -> dict[int, int]:
    """Inline HTML start and end tags of one element at the same depth of Markdown emphasis and links: index
    of the start tag -> index of its end tag (each start tag's name put in its ``meta["name"]``)."""
    pairs: dict[int, int] = {}
    stack: list[tuple[str, int, int]] = []  # (name, index, depth) of start tags not yet closed
    depth = 0
    for i, child in enumerate(children):
        if child.nesting:
            depth += child.nesting
            stack = [entry for entry in stack if entry[2] <= depth]
            continue
        if child.type != "html_inline":
            continue
        opened, closed = _START_TAG.match(child.content), _END_TAG.match(child.content)
        if opened and not child.content.endswith("/>") and opened.group(1).lower() not in markup.VOID:
            stack.append((opened.group(1), i, depth))
        elif closed and stack and stack[-1][0].lower() == closed.group(1).lower() and stack[-1][2] == depth:
            name, start, _ = stack.pop()
            children[start].meta["name"] = name
            pairs[start] = i
    return pairs


def _in_table(token, lines: list[str], cursors: dict[int, int], fragment: str, pieces: list) -> Optional[_Inline]:
    """A table cell's inline, found in its row's line after the cells before it (``cursors``)."""
    n = token.map[0]
    line = lines[n]
    for written in (token.content.replace("|", "\\|"), token.content):
        start = line.find(written, cursors.get(n, 0))
        if start >= 0:
            cursors[n] = start + len(written)
            return _Inline(fragment, pieces, [n], [], (n, start), (n, start + len(written)), table=True)
    return None


def _tag(name: str, pieces: list, piece: tuple, attrs: Optional[dict] = None) -> str:
    pieces.append(piece)
    written = "".join(f' {key}="{html.escape(value)}"' for key, value in (attrs or {}).items())
    return f'<{name}{written} data-md="{len(pieces) - 1}">'


# ---------------------------------------------------------------------------------- fragment -> Markdown
def _written(inline: _Inline, translated: str, lines: list[str]) -> Optional[str]:
    """The Markdown replacing ``inline``'s text: its segments with the hard breaks and line prefixes between
    them; None (the source kept) when the translation is empty."""
    tree = markup.parse(translated)
    pattern = _ESCAPE_HEADING if inline.heading else _ESCAPE
    pipe = "\\|" if inline.table else "&#124;"  # a "|" outside a table would make a setext heading a table

    def escape(text: str) -> str:
        return pattern.sub(lambda m: pipe if m.group() == "|" else "\\" + m.group(), text.replace("\n", " "))

    pieces = inline.pieces
    if inline.table:  # the cell's "\\|" came to its tokens as "|": escaped again, in code spans and links too
        pieces = [tuple(p.replace("|", "\\|") if isinstance(p, str) else p for p in piece) for piece in pieces]
    text = _markdown_of(tree.children, pieces, escape)
    segments = text.split("\n")
    if len(segments) != len(inline.lines):  # hard breaks lost: the text on one line
        segments = [" ".join(segments)]
    segments = [_line_start(segment.strip()) for segment in segments]
    if not "".join(segments).strip():
        return None
    if len(segments) == 1:
        return segments[0]
    out = [segments[0]]
    for k, segment in enumerate(segments[1:]):
        ending_line = lines[inline.lines[k + 1] - 1]
        newline = ending_line[len(ending_line.rstrip("\r\n")) :] or "\n"
        out.append(inline.breaks[k] + newline + inline.prefixes[k] + segment)
    return "".join(out)


def _markdown_of(nodes: list, pieces: list, escape: Callable[[str], str]) -> str:
    """The Markdown of sibling nodes of the translated fragment, kept pieces with the whitespace they had."""
    items = []
    for node in nodes:
        index = node.attrs.get("data-md", "") if isinstance(node, markup.Element) else ""
        piece = pieces[int(index)] if index.isdigit() and int(index) < len(pieces) else None
        if piece is not None and piece[0] == "keep":
            items.append((piece[1], piece[2], False))
        elif piece is not None and piece[0] == "html" and node.kept:  # inline HTML left as it is (<kbd>)
            items.append((_markdown(node, piece, pieces, escape), piece[3], False))
        else:
            written = _markdown(node, piece, pieces, escape)
            if piece is not None and piece[0] == "link" and items and items[-1][2] and items[-1][0].endswith("!"):
                items[-1] = (items[-1][0][:-1] + "\\!", None, True)  # "!" right before a link makes it an image
            items.append((written, None, isinstance(node, markup.Text)))
    return respace(items)


def _markdown(node, piece: Optional[tuple], pieces: list, escape: Callable[[str], str]) -> str:
    """The Markdown of a node of the translated fragment (``piece``: what it stands for, if anything): text
    escaped, elements written from their pieces."""
    if isinstance(node, markup.Text):
        return escape(node.text)
    if isinstance(node, markup.Raw):
        return ""
    inner = _markdown_of(node.children, pieces, escape)
    if piece is None:
        return inner
    if piece[0] == "br":
        return "\n"
    if piece[0] == "html":
        return piece[1] + inner + piece[2]
    if piece[0] == "link":
        _, label, tail = piece
        if tail in ("", "[]"):  # a shortcut or collapsed reference: the label still names the definition
            tail = f"[{label}]"
        return f"[{inner}]{tail}"
    core = inner.strip()
    if not core:  # emphasis around no word: dropped
        return inner
    lead, trail = inner[: len(inner) - len(inner.lstrip())], inner[len(inner.rstrip()) :]
    return f"{lead}{piece[1]}{core}{piece[1]}{trail}"


def _line_start(segment: str) -> str:
    """``segment`` escaped where its start would read as a block marker (a heading, a quote, a list item, a
    setext underline)."""
    found = _LINE_START.match(segment)
    if found is None:
        return segment
    if found.group().isdigit():
        return segment[: found.end()] + "\\" + segment[found.end() :]
    return "\\" + segment
