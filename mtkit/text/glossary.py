"""Glossaries: term pairs whose source forms, found in a sentence, must appear translated as their target forms.

``Glossary.parse("Fahrrad\\tbicycle\\n", "tsv")`` reads entries as tab- or comma-separated values (the formats
DeepL's API takes), ``Glossary.terms(sentence)`` gives the target terms a sentence needs: its source terms found
as whole words, case-insensitively, the longest first, a term overlapping one already found dropped. A sentence
with no term needs nothing, and is translated as without the glossary. A glossary of ``Name -> Name`` keeps a
name untranslated. The bounds (entries, characters of a term, bytes of a glossary) hold wherever a glossary is
read: a file, a request, a stored glossary.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Iterable

from mtkit.errors import MtkitError

MAX_ENTRIES = 10_000  # per glossary
MAX_TERM_CHARS = 1024  # per source or target term
MAX_BYTES = 1 << 20  # a glossary's entries written as TSV, UTF-8
FORMATS = ("tsv", "csv")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]")


@dataclass(frozen=True)
class Glossary:
    """Entries (source term, target term), in the order given; hashable, so a batch key may hold one.

    Args:
        entries: the pairs; each source term once (case-insensitively).
        name, source, target: what a stored glossary is called and its languages ("" where not said).
    """

    entries: tuple[tuple[str, str], ...]
    name: str = ""
    source: str = ""
    target: str = ""

    def __post_init__(self):
        check_entries(self.entries)

    @classmethod
    def parse(cls, text: str, fmt: str = "tsv", **about) -> "Glossary":
        """A glossary from entries written as ``fmt`` (``tsv``: ``source<TAB>target`` a line; ``csv``:
        ``source,target`` a record, quoted as CSV, a third and fourth field naming the languages allowed).

        Raises:
            MtkitError: an unknown format, a line that is not an entry, an empty or duplicate term, a bound passed.
        """
        return cls(parse_entries(text, fmt), **about)

    @classmethod
    def read(cls, path: Path) -> "Glossary":
        """A glossary from a file: ``.csv`` as CSV, anything else as TSV.

        Raises:
            MtkitError: a file that cannot be read, or is not a glossary (naming the file).
        """
        path = Path(path)
        try:
            data = path.read_bytes()
        except OSError as err:
            raise MtkitError(f"{path}: cannot read the glossary ({err.strerror or err})") from None
        if len(data) > MAX_BYTES:
            raise MtkitError(f"{path}: {len(data)} bytes; a glossary holds at most {MAX_BYTES}")
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise MtkitError(f"{path}: not UTF-8 text; save the glossary as UTF-8") from None
        try:
            return cls.parse(text, "csv" if path.suffix.lower() == ".csv" else "tsv", name=path.stem)
        except MtkitError as err:
            raise MtkitError(f"{path}: {err}") from None

    @property
    def tsv(self) -> str:
        """The entries as TSV, one ``source<TAB>target`` a line."""
        return "".join(f"{s}\t{t}\n" for s, t in self.entries)

    def terms(self, sentence: str) -> tuple[str, ...]:
        """The target terms of the entries whose source terms ``sentence`` holds (see ``matches``), each once, in
        the order they stand in the sentence."""
        return tuple(dict.fromkeys(self.entries[i][1] for _, _, i in self.matches(sentence)))

    def matches(self, sentence: str) -> list[tuple[int, int, int]]:
        """Where ``sentence`` holds source terms: (start, end, entry index), by start. A term matches as whole
        words (no letter, digit or underscore on either side), ignoring case; where two matches overlap the
        longer one stays (the first in the sentence between equals)."""
        if not self.entries or not sentence:
            return []
        found = [(m.start(), m.start() + len(m.group(1)), m.group(1)) for m in self._regex.finditer(sentence)]
        kept: list[tuple[int, int, int]] = []
        taken = [False] * len(sentence)
        for start, end, text in sorted(found, key=lambda x: (x[0] - x[1], x[0])):  # longest first
            if not any(taken[start:end]):
                taken[start:end] = [True] * (end - start)
                kept.append((start, end, self._entry_of(text)))
        return sorted(kept)

    def _entry_of(self, text: str) -> int:
        """The entry whose source term ``text`` (as found in a sentence) is."""
        found = self._index.get(text.casefold())
        if found is None:  # a case the regex folds another way than casefold (a dotted capital I...)
            found = next(i for i, (s, _) in enumerate(self.entries) if re.fullmatch(re.escape(s), text, re.IGNORECASE))
        return found

    @cached_property
    def _index(self) -> dict[str, int]:
        return {s.casefold(): i for i, (s, _) in enumerate(self.entries)}

    @cached_property
    def _regex(self) -> re.Pattern:
        # at each position the longest term starting there (the alternatives longest first), found through a
        # lookahead so that matches may overlap; overlaps are resolved by ``matches``
        terms = sorted({s for s, _ in self.entries}, key=lambda s: (-len(s), s))
        return re.compile(r"(?<!\w)(?=(" + "|".join(map(re.escape, terms)) + r")(?!\w))", re.IGNORECASE)


def check_term(term: str, where: str) -> str:
    """``term`` if it can be one: not empty, within ``MAX_TERM_CHARS``, no tab, line break or control character,
    no space at either end."""
    if not isinstance(term, str) or not term.strip():
        raise MtkitError(f"{where}: an empty term")
    if len(term) > MAX_TERM_CHARS:
        raise MtkitError(f"{where}: a term of {len(term)} characters; at most {MAX_TERM_CHARS}")
    if _CONTROL.search(term):
        raise MtkitError(f"{where}: a term holds a tab, line break or control character")
    if term != term.strip():
        raise MtkitError(f"{where}: the term {term!r} starts or ends with a space")
    return term


def check_entries(entries: Iterable[tuple[str, str]]) -> None:
    """Raise ``MtkitError`` for entries a glossary cannot hold: see ``check_term``, a source term given twice
    (case-insensitively), more than ``MAX_ENTRIES``, more than ``MAX_BYTES`` as TSV."""
    seen: dict[str, int] = {}
    size = 0
    for n, entry in enumerate(entries, 1):
        if n > MAX_ENTRIES:
            raise MtkitError(f"more than {MAX_ENTRIES} entries; a glossary holds at most {MAX_ENTRIES}")
        if not (isinstance(entry, tuple) and len(entry) == 2):
            raise MtkitError(f"entry {n}: expected a (source, target) pair")
        source, target = (check_term(t, f"entry {n}") for t in entry)
        key = source.casefold()
        if key in seen:
            raise MtkitError(f"entry {n}: the source term {source!r} is also entry {seen[key]}")
        seen[key] = n
        size += len(source.encode()) + len(target.encode()) + 2
        if size > MAX_BYTES:
            raise MtkitError(f"more than {MAX_BYTES} bytes of entries; a glossary holds at most {MAX_BYTES}")


def parse_entries(text: str, fmt: str = "tsv") -> tuple[tuple[str, str], ...]:
    """Entries written as ``fmt`` (see ``Glossary.parse``); blank lines are skipped, a term's surrounding spaces
    dropped."""
    if fmt not in FORMATS:
        raise MtkitError(f"entries format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if len(text.encode()) > MAX_BYTES:
        raise MtkitError(f"more than {MAX_BYTES} bytes of entries; a glossary holds at most {MAX_BYTES}")
    if fmt == "tsv":
        rows = [(n, line.split("\t")) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    else:
        try:
            rows = [(n, row) for n, row in enumerate(csv.reader(io.StringIO(text, newline="")), 1) if row]
        except csv.Error as err:
            raise MtkitError(f"entries: not valid CSV ({err})") from None
    entries = []
    for n, row in rows:
        if len(row) != 2 and not (fmt == "csv" and len(row) == 4):
            shape = "source<TAB>target" if fmt == "tsv" else "source,target"
            raise MtkitError(f"line {n}: expected {shape}, found {len(row)} field{'s' if len(row) != 1 else ''}")
        entries.append((row[0].strip(), row[1].strip()))
        if len(entries) > MAX_ENTRIES:
            raise MtkitError(f"more than {MAX_ENTRIES} entries; a glossary holds at most {MAX_ENTRIES}")
    if not entries:
        raise MtkitError("no entries; a glossary holds one or more source/target pairs")
    check_entries(entries)
    return tuple(entries)
