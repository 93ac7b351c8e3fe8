"""A segment of text cut into sentences, and put back together around their translations with the source's
own whitespace.

``split("  A man rides. Two dogs play.\\n\\nA cat.  ", "en")`` gives the sentences ``A man rides.``,
``Two dogs play.`` and ``A cat.`` and the four gaps around them (``"  "``, ``" "``, ``"\\n\\n"``, ``"  "``);
``Split.join`` puts any list of translations between the same gaps. A line break always ends a sentence; inside
a line the sentences are found by the Moses rules with their non-breaking prefixes (``sentence-splitter``) for
the 24 languages that have a prefix list, and by sentencex (Wikimedia's splitter, with fallbacks for some 240
languages) for the others. docs/documents.md has the comparison behind the choice: on paragraphs that trip
splitters (titles, ordinals, abbreviations) the Moses rules never cut inside a sentence.
"""

from __future__ import annotations

import importlib.util
import re
import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

_LINE_BREAK = re.compile(r"\s*[\r\n\v\f\u2028\u2029]\s*")  # a run of whitespace holding a line break
_WHITESPACE = re.compile(r"\s")


@dataclass(frozen=True)
class Split:
    """A text as ``gaps[0] + sentences[0] + gaps[1] + ... + sentences[-1] + gaps[-1]``.

    Every sentence starts and ends with a non-space character; ``gaps`` has one more entry than ``sentences``.
    A text of whitespace only has no sentence and one gap (the text itself)."""

    sentences: tuple[str, ...]
    gaps: tuple[str, ...]

    def join(self, translations) -> str:
        """``translations`` (one per sentence, in order) between the source's gaps."""
        translations = list(translations)
        if len(translations) != len(self.sentences):
            raise ValueError(f"{len(translations)} translations for {len(self.sentences)} sentences")
        parts = [self.gaps[0]]
        for text, gap in zip(translations, self.gaps[1:]):
            parts += [text, gap]
        return "".join(parts)


def whole(text: str) -> Split:
    """``text`` as one sentence with its outer whitespace as gaps (no splitting inside)."""
    core = text.strip()
    if not core:
        return Split((), (text,))
    start = text.index(core[0])
    return Split((core,), (text[:start], text[start + len(core) :]))


def split(text: str, lang: str, *, line_breaks: bool = True) -> Split:
    """The sentences of ``text`` in language ``lang`` (an ISO 639 code) and the whitespace between them.

    Args:
        text: any text: a line, a paragraph, several paragraphs.
        lang: the language of ``text``; a code without rules of its own falls back as sentencex decides
            (ultimately to English rules).
        line_breaks: a line break ends a sentence (False: it is a space, as in HTML source).

    Returns:
        The ``Split``; ``Split.join(split.sentences)`` is ``text`` again.
    """
    if _one_moses_sentence(text, lang) and not (line_breaks and _LINE_BREAK.search(text)):
        return whole(text)  # one sentence to the Moses rules (most lines): what the general path below gives it
    sentences: list[str] = []
    gaps: list[str] = []
    pending = ""  # whitespace since the last sentence
    position = 0
    breaks = list(_LINE_BREAK.finditer(text)) if line_breaks else []
    for line_break in [*breaks, None]:
        end = line_break.start() if line_break is not None else len(text)
        line, cursor = text[position:end], 0
        flat = _WHITESPACE.sub(" ", line)  # tabs, line breaks: spaces to the splitter; same length, same spans
        for start, stop in _sentence_spans(flat, lang):
            gaps.append(pending + line[cursor:start])
            sentences.append(line[start:stop])
            pending, cursor = "", stop
        pending += line[cursor:]
        if line_break is not None:
            pending += line_break.group()
            position = line_break.end()
    gaps.append(pending)
    if not sentences:
        return Split((), (text,))
    return Split(tuple(sentences), tuple(gaps))


def _sentence_spans(line: str, lang: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence of a line without line breaks, trimmed of whitespace, in order and not
    overlapping. The splitter's sentences are found in ``line`` by their non-space characters, so a splitter that
    folds whitespace still gives exact spans; should one change other characters, the rest of the line from there
    is one sentence."""
    core = line.strip()
    if not core:
        return []
    pieces = _segment(lang, line)
    if len(pieces) == 1 and pieces[0].strip() == core:  # one sentence, unchanged (most lines): no offsets needed
        start = len(line) - len(line.lstrip())
        return [(start, start + len(core))]
    visible = [i for i, c in enumerate(line) if not c.isspace()]  # offsets of the non-space characters
    spans: list[tuple[int, int]] = []
    used = 0  # non-space characters of line taken by the sentences so far
    for piece in pieces:
        chars = [c for c in piece if not c.isspace()]
        if not chars:
            continue
        if [line[i] for i in visible[used : used + len(chars)]] != chars:
            break  # the splitter changed the text: what is left stays one sentence
        spans.append((visible[used], visible[used + len(chars) - 1] + 1))
        used += len(chars)
    if used < len(visible):
        spans.append((visible[used], visible[-1] + 1))
    return spans


# Where the Moses rules can end a sentence: a full stop, question or exclamation mark and the rest of its word
# (group 1), with more text after the space (group 2: its first character). A line without one is a single
# sentence to them, so most lines (one sentence each) skip the splitter.
_MOSES_CANDIDATE = re.compile(r"([.?!]\S*)\s+(?=(\S))")
# A word the Moses rules never end a sentence after when a letter or digit follows: one that ends in an
# upper-case acronym ("U.S.", "E.S.E.") with one full stop at its end.
_ACRONYM = re.compile(r"\.[A-Z\-]+\.\Z")


def _moses_may_cut(text: str) -> bool:
    """Whether the Moses rules could end a sentence inside ``text``: at a candidate (above) followed by neither a
    lower-case letter (every rule wants an upper-case letter, another script's letter or a digit to start the
    next sentence, after any opening quote or bracket) nor, after an acronym, a letter or digit (the rules keep
    acronyms, and no quote or bracket stands between).

    A candidate starts at its word's first mark, so its group 1 holds any acronym the word ends in."""
    for found in _MOSES_CANDIDATE.finditer(text):
        kind = unicodedata.category(found.group(2))
        if kind == "Ll" or (kind[0] in "LN" and _ACRONYM.search(found.group(1))):
            continue
        return True
    return False


@lru_cache(maxsize=64)
def _segmenter(lang: str):
    from sentence_splitter import SentenceSplitter, SentenceSplitterException

    try:
        moses = SentenceSplitter(language=lang).split
    except SentenceSplitterException:  # no prefix list for this language
        from sentencex import segment

        return lambda text: segment(lang, text)
    return lambda text: moses(text) if _moses_may_cut(text) else [text]


@lru_cache(maxsize=64)
def _has_moses_rules(lang: str) -> bool:
    """Whether sentence-splitter has a prefix list for ``lang``, looked for as it looks (a two-letter code, a file
    in its package) but without importing it: with the regex module it takes 14 ms, a tenth of the start-up of
    a CTranslate2 translation, and a line without a candidate end never needs it."""
    spec = importlib.util.find_spec("sentence_splitter")
    if spec is None or spec.origin is None or not re.fullmatch("[a-z][a-z]", lang):
        return False
    return (Path(spec.origin).parent / "non_breaking_prefixes" / f"{lang}.txt").is_file()


def _one_moses_sentence(text: str, lang: str) -> bool:
    """Whether ``lang`` has Moses rules and ``text`` has no candidate sentence end for them: one sentence, found
    without loading the splitter."""
    return _has_moses_rules(lang.lower() or "en") and not _moses_may_cut(text)


def _segment(lang: str, text: str) -> list[str]:
    if _one_moses_sentence(text, lang):
        return [text]  # what the Moses rules give such a line (_segmenter)
    return list(_segmenter(lang.lower() or "en")(text))
