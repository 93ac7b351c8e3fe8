"""SubRip subtitles (``.srt``), read and written with srt.

Translated: each subtitle's text. A subtitle of several lines is one text to the model (its lines joined with a
space, so that a sentence running over two lines is translated as one), and its translation is wrapped again
into as many lines, broken between words where the line lengths come out most even (a little less even where
that puts the break after a sentence or a clause). Dialogue, a subtitle whose every line starts with a dash
(``- Hello.`` / ``- Hi.``), is translated line by line instead, each speaker's line staying on its own line.
Formatting tags (``<i>``, ``<b>``, ``<u>``, ``<font color=...>``) go around the target words aligned to the words
they enclosed; position codes such as ``{\\an8}`` are kept. A file without any goes to the model as plain text
(``"text"``, which every engine translates).

Kept as they are: the subtitles' order, numbers and timings (written back by srt, as ``HH:MM:SS,mmm``), any
text after a timing, empty subtitles, the byte-order mark and the line endings (CRLF or LF). The file is read
and written as UTF-8.
"""

from __future__ import annotations

import re

from mtkit.documents.formats import Translate
from mtkit.documents.fragments import from_html, library, to_html, translate_fragments
from mtkit.documents.plain import decode_utf8
from mtkit.errors import MtkitError

_CODES = re.compile(r"\{\\[^{}]*\}")  # SSA/ASS override codes some players read in SRT: {\an8}, {\i1}
_DASH = re.compile(r"\s*(?:<[^<>]*>\s*)*[-\u2013\u2014]")  # a dialogue line: a dash after any opening tags
_PIECE = re.compile(r"<[^<>]*>|\s+|[^<\s]+|<")
_TAGS = re.compile(r"<[^<>]*>")
_CLAUSE_END = re.compile(r"[.!?,;:\u2026](?:<[^<>]*>)*[\"'\u201d\u2019)\]]?(?:<[^<>]*>)*$")


def translate_document(data: bytes, translate: Translate) -> bytes:
    """Translate the text of every subtitle of an SRT file.

    Args:
        data: the file's bytes (UTF-8, a byte-order mark kept).
        translate: the model (``formats.Translate``), called once with every subtitle's text.

    Returns:
        The translated file's bytes.

    Raises:
        MtkitError: bytes that are not UTF-8, or not a sequence of SRT blocks; srt not installed.
    """
    srt = library("srt", "SRT")
    text, bom = decode_utf8(data)
    eol = "\r\n" if "\r\n" in text else "\n"
    try:
        subtitles = list(srt.parse(text))
    except srt.SRTParseError as err:
        where = text[err.expected_start : err.expected_start + 40]
        raise MtkitError(
            f"not a valid SRT file (no subtitle block at character {err.expected_start}: {where!r}); "
            "each block needs a number, a line 'HH:MM:SS,mmm --> HH:MM:SS,mmm' and its text"
        ) from None
    except ValueError as err:  # srt.TimestampParseError
        raise MtkitError(f"not a valid SRT file ({err}); timings are written HH:MM:SS,mmm") from None
    plans = []  # per subtitle: (first text, number of texts, lines to wrap into; 0 for dialogue)
    texts: list[str] = []
    for subtitle in subtitles:
        lines = [line.strip() for line in subtitle.content.splitlines() if line.strip()]
        if not lines:
            plans.append(None)
        elif len(lines) > 1 and all(_DASH.match(line) for line in lines):
            plans.append((len(texts), len(lines), 0))
            texts += lines
        else:
            plans.append((len(texts), 1, len(lines)))
            texts.append(" ".join(lines))
    if not texts:
        return data
    fragments = [to_html(t, _CODES) for t in texts]
    translated = translate_fragments([fragment for fragment, _ in fragments], translate)
    found = [" ".join(from_html(t, kept).split()) for t, (_, kept) in zip(translated, fragments)]
    for subtitle, plan in zip(subtitles, plans):
        if plan is None:
            continue
        first, count, lines = plan
        if lines == 0:
            subtitle.content = "\n".join(found[first : first + count])
        else:
            subtitle.content = "\n".join(wrap(found[first], lines))
    return bom + srt.compose(subtitles, reindex=False, eol=eol).encode("utf-8")


def wrap(text: str, lines: int) -> list[str]:
    """``text`` broken between words into ``lines`` lines (fewer if it has fewer words) whose lengths, tags
    not counted, are as even as breaking between words allows; a break after a sentence or a clause (``.``,
    ``,`` ...) is taken over one up to a fifth of a line's length more even, and punctuation standing alone
    (``word .``) stays on the line of the word before it.

    Args:
        text: one line; its tags may hold spaces (``<font color="red">``), never broken inside.
        lines: how many lines.

    Returns:
        The lines, each without outer whitespace, words separated by one space.
    """
    words: list[str] = []  # punctuation standing alone stays with the word before it
    current = ""
    for piece in [*_PIECE.findall(text), " "]:
        if not piece.isspace():
            current += piece
            continue
        if current and words and not any(c.isalnum() for c in _TAGS.sub("", current)):
            words[-1] += " " + current
        elif current:
            words.append(current)
        current = ""
    if lines <= 1 or len(words) <= 1:
        return [" ".join(words)]
    lines = min(lines, len(words))
    sizes = [len(_TAGS.sub("", word)) for word in words]
    ends = []  # cumulative length (with one space between words) after each word
    total = -1
    for size in sizes:
        total += size + 1
        ends.append(total)
    bonus = 0.2 * total / lines  # how much less even a break after a sentence or clause may be
    cuts = []  # index of the first word of each line after the first
    previous = 0
    for k in range(1, lines):
        goal = total * k / lines
        lowest, highest = previous + 1, len(words) - (lines - k)  # leave at least a word for each line to come
        cut = min(
            range(lowest, highest + 1), key=lambda c: abs(ends[c - 1] - goal) - bonus * _ends_clause(words[c - 1])
        )
        cuts.append(cut)
        previous = cut
    bounds = [0, *cuts, len(words)]
    return [" ".join(words[a:b]) for a, b in zip(bounds, bounds[1:])]


def _ends_clause(word: str) -> bool:
    return bool(_CLAUSE_END.search(word))
