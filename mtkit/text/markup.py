"""HTML with its inline markup: the text a model translates, and the tags put back around the target words
aligned to the source words they enclosed.

``parse(fragment)`` reads HTML as a browser would forgive it (stray end tags dropped, open elements closed at
the end, ``<p>`` and ``<li>`` closing their open predecessor) into a tree whose every untranslated part keeps
its source spelling. ``runs(tree)`` cuts it into runs of inline content: block elements (``p``, ``div``,
``li``, headings, table cells, ``br`` ...) end a run, inline elements (``b``, ``i``, ``a``, ``span`` ...) stay
inside it, so a sentence that spans tags is one sentence. Void elements (``img``), comments and elements left
as they are (``code``, ``pre``, ``script``, ``style``, ``textarea``, anything with ``translate="no"``) are
markers: kept verbatim and placed before the target word aligned to the source word that followed them.
``Run.render`` writes a run back with the translation of its text, given each sentence's target words and
their alignment to the source words (``AlignedSentence``).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from typing import Optional, Sequence, Union

from mtkit.text.sentences import Split

VOID = frozenset(
    "area base br col embed hr img input link meta param source track wbr".split()
)  # elements without content or end tag
BLOCK = frozenset(
    """address article aside blockquote body caption center dd details dialog dir div dl dt fieldset figcaption
    figure footer form h1 h2 h3 h4 h5 h6 head header hgroup hr html li main menu nav ol optgroup option p
    section summary table tbody td tfoot th thead title tr ul br""".split()
)  # elements that end a run of text (br included: a line break ends a sentence)
KEEP = frozenset("code pre script style textarea kbd samp var math svg noscript template".split())  # not translated
_CLOSES = {"p": {"p"}, "li": {"li"}, "dt": {"dt", "dd"}, "dd": {"dt", "dd"}, "tr": {"tr", "td", "th"}}
_CLOSES.update({"td": {"td", "th"}, "th": {"td", "th"}, "option": {"option"}})
_SCOPE = {"ul", "ol", "table", "dl", "select", "div", "body", "html"}  # an implied close stops at these


@dataclass
class Element:
    tag: str
    open: str  # the start tag as written
    close: str = ""  # the end tag as written ("" for a void element, one written here when the source had none)
    attrs: dict = field(default_factory=dict)
    children: list = field(default_factory=list)
    kept: bool = False  # left as it is (KEEP, translate="no"): rendered from its source

    def source(self) -> str:
        return self.open + "".join(_source(c) for c in self.children) + self.close


@dataclass
class Text:
    text: str  # with entities decoded
    raw: str  # as written


@dataclass
class Raw:
    raw: str  # a comment, a declaration, a processing instruction: kept as written


Node = Union[Element, Text, Raw]


def _source(node: Node) -> str:
    return node.source() if isinstance(node, Element) else node.raw


class _Parser(HTMLParser):
    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.source_text = text
        self.root = Element("#root", "")
        self.stack = [self.root]
        self.line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.events: list[tuple[int, str, tuple]] = []  # (source offset, kind, arguments): built after the parse

    def _at(self) -> int:
        line, column = self.getpos()
        return self.line_starts[line - 1] + column

    def handle_starttag(self, tag, attrs):
        self.events.append((self._at(), "start", (tag, attrs)))

    def handle_startendtag(self, tag, attrs):
        self.events.append((self._at(), "void", (tag, attrs)))

    def handle_endtag(self, tag):
        self.events.append((self._at(), "end", (tag,)))

    def handle_data(self, data):
        self.events.append((self._at(), "data", (data,)))

    def handle_comment(self, data):
        self.events.append((self._at(), "raw", ()))

    handle_decl = handle_pi = unknown_decl = handle_comment


def parse(fragment: str) -> Element:
    """The tree of an HTML fragment (or document); ``tree.source()`` gives back the fragment, up to end tags
    added where the source left elements open and stray end tags dropped."""
    parser = _Parser(fragment)
    parser.feed(fragment)
    parser.close()
    events = parser.events
    stack = [parser.root]
    for i, (start, kind, args) in enumerate(events):
        end = events[i + 1][0] if i + 1 < len(events) else len(fragment)
        raw = fragment[start:end]
        top = stack[-1]
        if kind == "data":
            top.children.append(Text(args[0], raw))
        elif kind == "raw":
            top.children.append(Raw(raw))
        elif kind == "void" or (kind == "start" and args[0] in VOID):
            top.children.append(Element(args[0], raw, "", dict(args[1]), kept=_kept(args[0], args[1], stack)))
        elif kind == "start":
            tag, attrs = args
            _close_implied(stack, tag)
            element = Element(tag, raw, "", dict(attrs), kept=_kept(tag, attrs, stack))
            stack[-1].children.append(element)
            stack.append(element)
        elif kind == "end":
            tag = args[0]
            depth = next((d for d in range(len(stack) - 1, 0, -1) if stack[d].tag == tag), None)
            if depth is None:
                continue  # a stray end tag: dropped, as a browser does
            for open_element in stack[depth + 1 :]:
                open_element.close = f"</{open_element.tag}>"
            stack[depth].close = raw
            del stack[depth:]
    for open_element in stack[1:]:
        open_element.close = f"</{open_element.tag}>"
    return parser.root


def _kept(tag: str, attrs, stack: list[Element]) -> bool:
    return tag in KEEP or dict(attrs).get("translate") == "no" or any(e.kept for e in stack)


def _close_implied(stack: list[Element], tag: str) -> None:
    closes = _CLOSES.get(tag)
    if not closes:
        return
    for depth in range(len(stack) - 1, 0, -1):
        if stack[depth].tag in _SCOPE:
            return
        if stack[depth].tag in closes:
            for open_element in stack[depth:]:
                open_element.close = f"</{open_element.tag}>"
            del stack[depth:]
            return


# ---------------------------------------------------------------------------------------------------- runs
@dataclass
class Span:
    """An inline element over characters ``[start, end)`` of its run's text, with the spans inside it."""

    element: Element
    start: int
    end: int
    children: list = field(default_factory=list)  # Spans and Markers, in source order


@dataclass
class Marker:
    """Something kept verbatim at position ``at`` of the run's text."""

    html: str
    at: int


@dataclass
class Run:
    """A stretch of inline content: its text (entities decoded) and its markup over that text."""

    text: str
    root: Span
    source: str  # the run's HTML as written

    @property
    def translatable(self) -> bool:
        return bool(self.text.strip())

    def render(self, split: Split, sentences: Sequence["AlignedSentence"]) -> str:
        """The run's HTML with each sentence of ``split`` (the run's text cut into sentences) replaced by its
        translation and every span and marker placed by the alignments."""
        return _render(self, split, sentences)


def runs(tree: Element) -> list[Union[Run, str]]:
    """The tree as a list of runs to translate and HTML strings to keep as they are (block tags, kept
    elements between blocks), which joined in order are the tree's HTML."""
    out: list[Union[Run, str]] = []
    _collect(tree, out, top=True)
    return out


def _has_block(element: Element) -> bool:
    return any(isinstance(c, Element) and (c.tag in BLOCK or _has_block(c)) for c in element.children)


def _collect(container: Element, out: list, top: bool = False) -> None:
    if not top:
        out.append(container.open)
    pending: list[Node] = []
    for child in container.children:
        if isinstance(child, Element) and not child.kept and (child.tag in BLOCK or _has_block(child)):
            _flush(pending, out)
            pending = []
            _collect(child, out)
        else:
            pending.append(child)
    _flush(pending, out)
    if not top:
        out.append(container.close)


def _flush(nodes: list[Node], out: list) -> None:
    if not nodes:
        return
    parts: list[str] = []
    root = Span(Element("#run", ""), 0, 0)
    _inline(nodes, root, parts)
    root.end = len("".join(parts))
    out.append(Run("".join(parts), root, "".join(_source(n) for n in nodes)))


def _inline(nodes: list[Node], parent: Span, parts: list[str]) -> None:
    for node in nodes:
        at = sum(map(len, parts))
        if isinstance(node, Text):
            parts.append(node.text)
        elif isinstance(node, Raw) or node.kept or node.tag in VOID:
            parent.children.append(Marker(_source(node), at))
        else:
            span = Span(node, at, at)
            parent.children.append(span)
            _inline(node.children, span, parts)
            span.end = sum(map(len, parts))


# ------------------------------------------------------------------------------------------- placement
@dataclass(frozen=True)
class AlignedSentence:
    """One translated sentence: its source units (character spans in the source sentence), its target text
    and units (character spans in it), and ``weights[t][s]``: how much target unit t attends to source unit s
    (None: no alignment; the sentence's markup then goes around the whole translation)."""

    source_units: tuple[tuple[int, int], ...]
    target: str
    target_units: tuple[tuple[int, int], ...]
    weights: Optional[tuple[tuple[float, ...], ...]]


def _render(run: Run, split: Split, sentences: Sequence[AlignedSentence]) -> str:
    # the source and target units of the run's sentences, numbered across sentences, with the target text
    src_units: list[tuple[int, int]] = []
    tgt_units: list[tuple[int, int]] = []
    src_sentence: list[int] = []  # source unit -> its sentence
    tgt_sentence: list[int] = []  # target unit -> its sentence
    links: list[int] = []  # target unit -> the source unit it attends to most (-1: its sentence has no alignment)
    back: list[int] = []  # source unit -> the target unit that attends to it most
    aligned: list[bool] = []  # per sentence
    target_parts = [split.gaps[0]]
    src_at = tgt_at = len(split.gaps[0])
    for k, (sentence, translated, gap) in enumerate(zip(split.sentences, sentences, split.gaps[1:])):
        src_base, tgt_base = len(src_units), len(tgt_units)
        units = translated.source_units or ((0, len(sentence)),)
        t_units = translated.target_units or ((0, len(translated.target)),)
        src_units += [(src_at + a, src_at + b) for a, b in units]
        tgt_units += [(tgt_at + a, tgt_at + b) for a, b in t_units]
        src_sentence += [k] * len(units)
        tgt_sentence += [k] * len(t_units)
        weights = translated.weights
        aligned.append(weights is not None and bool(translated.source_units) and bool(translated.target_units))
        if aligned[-1]:
            links += [src_base + max(range(len(row)), key=row.__getitem__) for row in weights]
            back += [tgt_base + max(range(len(weights)), key=lambda t: weights[t][s]) for s in range(len(units))]
        else:
            links += [-1] * len(t_units)
            back += [tgt_base] * len(units)
        target_parts += [translated.target, gap]
        src_at += len(sentence) + len(gap)
        tgt_at += len(translated.target) + len(gap)
    target = "".join(target_parts)

    def targets(span: Span) -> Optional[tuple[int, int]]:
        sources = [i for i, (a, b) in enumerate(src_units) if a < span.end and b > span.start]
        if not sources:
            return None
        chosen = {t for t, s in enumerate(links) if s in sources}
        unaligned = {src_sentence[s] for s in sources if not aligned[src_sentence[s]]}
        chosen.update(t for t, k in enumerate(tgt_sentence) if k in unaligned)  # all of such a sentence
        if not chosen:
            chosen = {back[s] for s in sources}
        return min(chosen), max(chosen)

    opens: dict[int, list[str]] = {}  # target character offset -> HTML to insert there, in order
    closes: dict[int, list[str]] = {}
    text = run.text

    def put(at: int, markup_html: str, lo: int, hi: int) -> None:
        """Insert something kept verbatim that stood at source offset ``at``, inside target units [lo, hi], with
        the spacing it had: in the whitespace before the first word or after the last it keeps its distance from
        that end; glued to the word before it, it follows that word's translation; between two spaces it keeps
        a space on each side."""
        if lo == 0 and (not src_units or at <= min(src_units[0][0], len(split.gaps[0]))):
            _insert(opens, at if src_units else min(at, len(target)), markup_html)
            return
        if hi == len(tgt_units) - 1 and src_units and at >= src_units[-1][1]:
            _insert(opens, max(len(target) - (len(text) - at), tgt_units[-1][1]), markup_html)
            return
        unit = _marker_unit(at, src_units, links, back, lo, hi)
        space_before = at > 0 and text[at - 1].isspace()
        space_after = at < len(text) and text[at].isspace()
        if space_after and not space_before and unit > lo:
            _insert(opens, tgt_units[unit - 1][1], markup_html)
        elif space_after and space_before and unit <= hi:
            _insert(opens, _unit_start(unit, tgt_units, target), markup_html + " ")
        else:
            _insert(opens, _unit_start(unit, tgt_units, target), markup_html)

    def place(span: Span, lo: int, hi: int) -> None:
        """Place ``span``'s children inside target units [lo, hi] (inclusive; hi < lo: an empty range at lo).
        Siblings keep the target order their words took (a reordering moves them); where two would overlap, the
        later one starts after the earlier, and one left with no unit stays as an empty element there."""
        ranges = []
        for child in span.children:
            if isinstance(child, Marker):
                put(child.at, child.html, lo, hi)
                continue
            found = targets(child)
            if found is None:  # encloses no word: an empty element where it stood
                put(child.start, child.element.open + _empty(child), lo, hi)
                continue
            ranges.append((max(found[0], lo), min(found[1], hi), child))
        end = lo - 1
        for a, b, child in sorted(ranges, key=lambda r: (r[0], r[1])):
            a = max(a, end + 1)
            if b < a:  # crowded out by its siblings: empty, after the one before it
                at = _unit_start(min(end + 1, hi + 1), tgt_units, target)
                _insert(opens, at, child.element.open + _empty(child))
                continue
            _insert(opens, tgt_units[a][0], child.element.open)
            place(child, a, b)
            closes.setdefault(tgt_units[b][1], []).append(child.element.close)  # inner ones first
            end = b

    place(run.root, 0, len(tgt_units) - 1)
    out, previous = [], 0
    for offset in sorted(set(opens) | set(closes)):
        out.append(html.escape(target[previous:offset], quote=False))
        out += closes.get(offset, [])
        out += opens.get(offset, [])
        previous = offset
    out.append(html.escape(target[previous:], quote=False))
    return "".join(out)


def _empty(span: Span) -> str:
    inner = "".join(c.html for c in span.children if isinstance(c, Marker))
    return inner + span.element.close


def _insert(where: dict[int, list[str]], offset: int, text: str) -> None:
    where.setdefault(offset, []).append(text)


def _unit_start(unit: int, tgt_units: list[tuple[int, int]], target: str) -> int:
    if unit >= len(tgt_units):
        return tgt_units[-1][1] if tgt_units else len(target)
    return tgt_units[unit][0]


def _marker_unit(at: int, src_units, links, back, lo: int, hi: int) -> int:
    """The target unit a marker at source offset ``at`` goes before: the one the next source unit maps to (its
    first aligned target unit), or after the range when no source unit follows."""
    following = next((i for i, (a, _) in enumerate(src_units) if a >= at), None)
    if following is None:
        return hi + 1
    aligned = [t for t, s in enumerate(links) if s == following]
    unit = min(aligned) if aligned else back[following]
    return min(max(unit, lo), hi + 1)
