"""Segments as people write them, translated sentence by sentence: a paragraph is cut into sentences
(``text.sentences``), an HTML fragment into runs of inline text and then sentences (``text.markup``); the
sentences of every segment of a call are translated together, in the same batches, and each segment is put
back from its sentences' translations with the source's own whitespace and, for HTML, its markup.

``plan`` makes a ``Plan``: the sentences to translate (``Plan.sentences``) and how to rebuild each segment
(``Plan.rebuild``). A segment that is one sentence without surrounding whitespace comes back exactly as the
engine translated it.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Sequence, Union

from mtkit.errors import MtkitError
from mtkit.inference.results import Hypothesis, Translation
from mtkit.inference.segments import Segment
from mtkit.text.sentences import Split, split, whole

if TYPE_CHECKING:
    from mtkit.text import markup  # imported where HTML is read: html.parser is start-up a plain line never needs

FORMATS = ("text", "html")


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise MtkitError(f"format {fmt!r}: expected one of {', '.join(FORMATS)}")


@dataclass
class _Text:
    split: Split
    first: int  # index of its first sentence in Plan.sentences


@dataclass
class _Html:
    parts: list  # markup.runs' output: runs (with their Split and first sentence) and kept HTML strings


@dataclass
class Plan:
    """What a call translates (``sentences``) and how each segment is made again from their translations."""

    segments: list[Segment]
    sentences: list[Segment]
    shapes: list[Union[_Text, _Html, int]]  # per segment: an index into sentences (as it is), or its pieces
    origin: list[Optional[int]]  # per sentence: the segment it is (instructions and all), None for a piece of one
    attention: list[bool]  # per sentence: its alignments place markup (an HTML run with tags or kept elements)

    def rebuild(self, found: Sequence[Translation]) -> list[Translation]:
        """One ``Translation`` per segment from ``found``, one per entry of ``sentences``."""
        out = []
        for segment, shape in zip(self.segments, self.shapes):
            if isinstance(shape, int):
                out.append(found[shape])
            elif isinstance(shape, _Text):
                parts = found[shape.first : shape.first + len(shape.split.sentences)]
                out.append(_joined(segment.text, shape.split, parts))
            else:
                out.append(_html(segment.text, shape.parts, found))
        return out


def plan(segments: list[Segment], lang: str, *, split_sentences: bool, fmt: str = "text") -> Plan:
    """The sentences of ``segments`` (source language ``lang``).

    Args:
        segments: the call's segments; those with instructions (prefix, constraints, avoid) are one sentence.
        lang: the source language, for the sentence splitter.
        split_sentences: cut segments into sentences (False: each segment is one, its outer whitespace kept).
        fmt: ``text`` or ``html`` (each segment an HTML fragment).

    Raises:
        MtkitError: an HTML segment with instructions.
    """
    check_format(fmt)
    sentences: list[Segment] = []
    shapes: list = []
    origin: list[Optional[int]] = []
    attention: list[bool] = []
    for i, segment in enumerate(segments):
        if fmt == "html":
            from mtkit.text import markup

            if not segment.plain:
                raise MtkitError(f"line {i + 1}: prefix, constraints and avoid apply to plain text, not to HTML")
            parts = []
            for part in markup.runs(markup.parse(segment.text)):
                if isinstance(part, markup.Run) and part.translatable:
                    cut = split(part.text, lang, line_breaks=False) if split_sentences else whole(part.text)
                    parts.append((part, cut, len(sentences)))
                    sentences += [Segment(s, target=segment.target) for s in cut.sentences]
                    origin += [None] * len(cut.sentences)
                    attention += [bool(part.root.children)] * len(cut.sentences)
                else:
                    parts.append(part.source if isinstance(part, markup.Run) else part)
            shapes.append(_Html(parts))
            continue
        cut = split(segment.text, lang) if split_sentences else whole(segment.text)
        if not segment.plain or not cut.sentences or cut.sentences == (segment.text,):
            shapes.append(len(sentences))  # as it is: instructions hold for the line as written
            sentences.append(segment)
            origin.append(i)
            attention.append(False)
        else:
            shapes.append(_Text(cut, len(sentences)))
            sentences += [Segment(s, target=segment.target) for s in cut.sentences]
            origin += [None] * len(cut.sentences)
            attention += [False] * len(cut.sentences)
    return Plan(segments, sentences, shapes, origin, attention)


def _joined(source: str, cut: Split, parts: Sequence[Translation]) -> Translation:
    """A segment's translation from its sentences': the k-th hypothesis joins each sentence's k-th (or its
    last, where it has fewer); tokens and token_log_probs are concatenated, log_prob and score summed; a
    segment of one sentence (with whitespace around it) keeps its alignment."""
    ranks = max((len(p.hypotheses) for p in parts), default=0)
    hyps = []
    for k in range(ranks):
        picked = [p.hypotheses[min(k, len(p.hypotheses) - 1)] if p.hypotheses else None for p in parts]
        texts = [h.text if h is not None else "" for h in picked]
        chosen = [h for h in picked if h is not None]
        scored = all(h.score is not None for h in chosen)
        hyps.append(
            Hypothesis(
                text=cut.join(texts),
                tokens=tuple(t for h in chosen for t in h.tokens),
                score=sum(h.score for h in chosen) if scored else None,
                log_prob=sum(h.log_prob for h in chosen) if scored else None,
                token_log_probs=tuple(x for h in chosen for x in h.token_log_probs) if scored else None,
                alignment=chosen[0].alignment if len(parts) == 1 and chosen else None,  # one sentence: its own
                confidence=_joined_confidence(chosen) if scored else None,
                word_confidences=tuple(w for h in chosen for w in h.word_confidences or ()) if scored else None,
            )
        )
    sentences = tuple(parts) if len(parts) > 1 else ()
    return Translation(
        source=source,
        source_tokens=tuple(t for p in parts for t in p.source_tokens),
        hypotheses=tuple(hyps),
        sentences=sentences,
    )


def _html(source: str, parts: list, found: Sequence[Translation]) -> Translation:
    out, used = [], []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
            continue
        run, cut, first = part
        translations = found[first : first + len(cut.sentences)]
        used += translations
        aligned = [aligned_sentence(s, t) for s, t in zip(cut.sentences, translations)]
        out.append(run.render(cut, aligned))
    text = "".join(out)
    best = [t.best for t in used if t.best is not None]
    return Translation(
        source=source,
        source_tokens=tuple(t for u in used for t in u.source_tokens),
        hypotheses=(Hypothesis(text=text, tokens=tuple(t for h in best for t in h.tokens)),),
        sentences=tuple(used),
    )


def _joined_confidence(hyps: list[Hypothesis]) -> Optional[float]:
    """A paragraph's confidence: its sentences' confidences weighted by their subwords (EOS included)."""
    weights = [len(h.tokens) + 1 for h in hyps if h.confidence is not None]
    values = [h.confidence for h in hyps if h.confidence is not None]
    return sum(w * v for w, v in zip(weights, values)) / sum(weights) if weights else None


# ------------------------------------------------------------------------------------- word alignments
def aligned_sentence(source: str, translation: Translation) -> markup.AlignedSentence:
    """The units of a translated sentence (words, with punctuation as units of its own) and how much each
    target unit attends to each source unit, from the best hypothesis's subwords and cross-attention."""
    from mtkit.text import markup

    best = translation.best
    if best is None:
        return markup.AlignedSentence((), "", (), None)
    src_units, src_of = _units(translation.source_tokens, source)
    tgt_units, tgt_of = _units(best.tokens, best.text)
    if best.alignment is None or not src_units or not tgt_units:
        return markup.AlignedSentence(tuple(src_units), best.text, tuple(tgt_units), None)
    weights = [[0.0] * len(src_units) for _ in tgt_units]
    for t, row in enumerate(best.alignment[: len(best.tokens)]):  # the last row is EOS's
        tu = tgt_of[t]
        if tu is None:
            continue
        for s, w in enumerate(row[: len(translation.source_tokens)]):  # the last column is EOS
            su = src_of[s]
            if su is not None:
                weights[tu][su] += w
    return markup.AlignedSentence(tuple(src_units), best.text, tuple(tgt_units), tuple(map(tuple, weights)))


def _units(pieces: Sequence[str], text: str) -> tuple[list[tuple[int, int]], list[Optional[int]]]:
    """The units of ``text`` as ``pieces`` (SentencePiece subwords) cut it: a unit starts at a subword that
    starts a word and at a subword of punctuation or symbols, and ends before the next such; each unit is a
    character span of ``text``. Also, per subword, the index of its unit (None: a subword not found in
    ``text``, such as a byte or an unknown piece)."""
    units: list[list[int]] = []
    of: list[Optional[int]] = []
    cursor = 0
    previous_punct = True
    for piece in pieces:
        core = piece.replace("\u2581", " ").strip()
        at = text.find(core, cursor) if core else -1
        if at < 0 or text[cursor:at].strip():
            of.append(None)
            continue
        punct = all(unicodedata.category(c)[0] in "PS" for c in core)
        if not units or piece.startswith("\u2581") or punct or previous_punct or text[cursor:at]:
            units.append([at, at + len(core)])
        else:
            units[-1][1] = at + len(core)
        of.append(len(units) - 1)
        cursor = at + len(core)
        previous_punct = punct
    return [tuple(u) for u in units], of
