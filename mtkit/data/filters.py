"""Filters for noisy (web-crawled) parallel text: each judges one pair, and the first that objects removes it.

Every filter is a small class with a ``name``, its options (a dataclass, each field's ``doc`` in its metadata)
and a docstring; ``FILTERS`` registers them in the order they run (cheap ones first, the duplicate check last, so
that its hashes hold only the pairs every other filter kept). ``build`` turns a spec (a list of names, or a
mapping name -> options) into ready filters, checking names, options and language codes first, so that a bad
spec fails before any line is read. ``mtkit prepare`` runs them on the training split (``data.filters``) and
``mtkit clean`` (mtkit/data/clean.py) on a corpus alone; docs/data.md lists them with their defaults.

A filter's ``check(src, tgt)`` gets whitespace-normalised text and returns None to keep the pair, or a few words
saying why it goes (shown with the examples of the report).
"""

from __future__ import annotations

import dataclasses
import difflib
import itertools
import re
from collections import Counter
from typing import ClassVar, Union

from mtkit.data.dcce import DualCrossEntropy
from mtkit.data.filter_base import Filter, first_objection, judged, option, option_key, option_setting  # noqa: F401
from mtkit.data.filter_text import (
    ALIASES,
    SCRIPTS,
    HashSet64,
    fold,
    hash64,
    identifier,
    identifier_code,
    letters,
    script_share,
)
from mtkit.errors import MtkitError

Spec = Union[list, dict, None]


# ------------------------------------------------------------------------------------------------ filters
@dataclasses.dataclass
class Length(Filter):
    """Each side has between min_chars and max_chars characters (after whitespace normalisation)."""

    name: ClassVar[str] = "length"
    min_chars: int = option(1, "a shorter side removes the pair (1: only empty sides)")
    max_chars: int = option(1000, "a longer side removes the pair")

    def __post_init__(self):
        if self.min_chars < 0 or self.max_chars < max(self.min_chars, 1):
            raise self.bad("max_chars", f"must be at least min_chars and 1 (got {self.min_chars}..{self.max_chars})")

    def check(self, src, tgt):
        for side, text in (("src", src), ("tgt", tgt)):
            if not self.min_chars <= len(text) <= self.max_chars:
                return f"{side}: {len(text)} characters"
        return None


@dataclasses.dataclass
class CharRatio(Filter):
    """The longer side has at most max_ratio times the characters of the shorter one. Pairs whose longer side
    is under min_chars are not judged (short pairs vary too much); raise max_ratio for languages whose scripts
    differ in density (Chinese against English: about 3 to 4 characters of English per character)."""

    name: ClassVar[str] = "char_ratio"
    max_ratio: float = option(3.0, "the largest character-length ratio kept")
    min_chars: int = option(10, "pairs whose longer side is shorter are kept")

    def __post_init__(self):
        self.positive("max_ratio")

    def check(self, src, tgt):
        short, long = sorted((len(src), len(tgt)))
        if long >= self.min_chars and long > self.max_ratio * max(short, 1):
            return f"{len(src)} vs {len(tgt)} characters"
        return None


_URL_RE = re.compile(r"\b(?:https?://|ftp://|www\.)\S+|\b[\w.+-]+@[\w-]+\.[\w.-]+", re.IGNORECASE)
_HTML_RE = re.compile(r"</?[A-Za-z][A-Za-z0-9]*(?:\s[^<>]*)?/?>|&(?:[A-Za-z]{2,8}|#[0-9]{1,6}|#x[0-9A-Fa-f]{1,6});")
_BOILERPLATE = re.compile(  # matched against the lower-cased side
    r"all rights reserved"
    r"|©|\(c\)\s*(?:19|20)\d\d|copyright\s+(?:©\s*)?(?:19|20)\d\d"
    r"|(?:this|our) (?:web)?site uses cookies|accept (?:all )?cookies|cookie (?:policy|settings)"
    r"|enable javascript|javascript (?:is )?(?:disabled|required)"
    r"|click here|read more\s*(?:»|>>|\.\.\.)|lorem ipsum"
)
_MENU_RE = re.compile(r"(?:\s[|»•·]\s[^|»•·]*){3}")  # three or more items separated by | » • ·
_SEPARATORS = "|»•·"


@dataclasses.dataclass
class Url(Filter):
    """Web leftovers: a side that is mostly URLs or e-mail addresses, holds HTML tags or entities, or matches a
    boilerplate pattern (copyright notices, cookie and JavaScript banners, "click here", menus of items separated
    by | » • ·; English patterns plus any given in ``patterns``)."""

    name: ClassVar[str] = "url"
    max_url_share: float = option(0.5, "a side whose URLs and e-mail addresses cover more of its characters goes")
    html: bool = option(True, "remove sides with HTML tags (<p>, </a>) or entities (&amp;)")
    boilerplate: bool = option(True, "remove sides matching the built-in boilerplate patterns")
    patterns: list = option([], "more regular expressions (case-insensitive); a side matching one goes")

    def __post_init__(self):
        self.positive("max_url_share", at_most=1.0)
        extra = []
        for i, pattern in enumerate(self.patterns):
            try:
                extra.append(re.compile(str(pattern), re.IGNORECASE))
            except re.error as err:
                raise self.bad(f"patterns[{i}]", f"not a regular expression ({err})") from None
        self._patterns = extra

    def check(self, src, tgt):
        for side, text in (("src", src), ("tgt", tgt)):
            if ("@" in text or "/" in text or "www" in text) and self.max_url_share < 1.0:
                covered = sum(m.end() - m.start() for m in _URL_RE.finditer(text))
                if covered > self.max_url_share * len(text):
                    return f"{side}: mostly URLs"
            if self.html and ("<" in text or "&" in text) and _HTML_RE.search(text):
                return f"{side}: HTML"
            found = None
            if self.boilerplate:
                found = _BOILERPLATE.search(text.lower())
                if not found and sum(map(text.count, _SEPARATORS)) >= 3:
                    found = _MENU_RE.search(text)
            for pattern in self._patterns:
                found = found or pattern.search(text)
            if found:
                return f"{side}: {found.group(0).strip()[:30]!r}"
        return None


@dataclasses.dataclass
class Repeat(Filter):
    """One word repeated many times: more than max_run times in a row, or more than max_share of the words of a
    side with at least min_words words (words case-folded, punctuation and digits dropped)."""

    name: ClassVar[str] = "repeat"
    max_run: int = option(4, "the most times in a row one word may appear")
    max_share: float = option(0.5, "the largest share of a side's words one word may be")
    min_words: int = option(8, "sides with fewer words are not judged by max_share")

    def __post_init__(self):
        self.positive("max_run", "min_words")
        self.positive("max_share", at_most=1.0)

    def check(self, src, tgt):
        for side, text in (("src", src), ("tgt", tgt)):
            words = fold(text).split()
            if len(words) <= self.max_run:
                continue
            word, count = Counter(words).most_common(1)[0]
            if count > self.max_run:  # else no word can run longer
                longest = max(len(list(run)) for _, run in itertools.groupby(words))
                if longest > self.max_run:
                    return f"{side}: a word {longest} times in a row"
            if len(words) >= self.min_words and count > self.max_share * len(words):
                return f"{side}: {word!r} is {count} of {len(words)} words"
        return None


@dataclasses.dataclass
class Copy(Filter):
    """The target is the source copied: equal once both are folded (case, punctuation, digits and whitespace),
    or as similar as max_similarity (difflib's ratio of the folded texts; computed only for sides that share at
    least half their words, which a translation seldom does)."""

    name: ClassVar[str] = "copy"
    max_similarity: float = option(0.9, "pairs whose folded sides are at least this similar go (1.0: equal only)")

    def __post_init__(self):
        self.positive("max_similarity", at_most=1.0)

    def check(self, src, tgt):
        a, b = fold(src), fold(tgt)
        if a == b:
            return "equal" if a or src == tgt else None
        if self.max_similarity < 1.0 and a and b:
            words_a, words_b = set(a.split()), set(b.split())
            if 2 * len(words_a & words_b) < max(len(words_a), len(words_b)):
                return None
            matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
            if matcher.real_quick_ratio() >= self.max_similarity and matcher.quick_ratio() >= self.max_similarity:
                ratio = matcher.ratio()
                if ratio >= self.max_similarity:
                    return f"similarity {ratio:.2f}"
        return None


@dataclasses.dataclass
class Script(Filter):
    """At least min_share of a side's letters are in its language's script(s) (Latin for en, de, fr, cs...;
    Cyrillic for ru; CJK, Hiragana and Katakana for ja...). ``scripts`` adds or replaces languages:
    ``{sr: [Latin, Cyrillic]}``; script names are the first word of a letter's Unicode name."""

    name: ClassVar[str] = "script"
    min_share: float = option(0.8, "the smallest share of letters in the expected script(s)")
    min_letters: int = option(1, "sides with fewer letters are not judged")
    scripts: dict = option({}, "language -> script names, for languages the built-in table lacks or to override it")

    def __post_init__(self):
        self.positive("min_share", at_most=1.0)
        table = {
            **SCRIPTS,
            **{str(k).lower(): tuple(str(s).upper() for s in _list(v)) for k, v in self.scripts.items()},
        }
        self._expected = {}
        for side, lang, key in zip(("src", "tgt"), (self.src_lang, self.tgt_lang), self.lang_keys):
            code = lang.lower()
            found = table.get(code) or table.get(re.split(r"[-_]", code)[0]) or table.get(ALIASES.get(code, ""))
            if not found:
                raise MtkitError(
                    f"{key}: the script filter knows no script of language {lang!r}; add it as "
                    f"{option_setting(self.where, 'script.scripts', f'{{{lang}: [Latin]}}')}, or fix the code"
                )
            self._expected[side] = found

    def check(self, src, tgt):
        for side, text in (("src", src), ("tgt", tgt)):
            share, letters = script_share(text, self._expected[side])
            if letters >= self.min_letters and share < self.min_share:
                return f"{side}: {share:.0%} of letters in {'/'.join(self._expected[side]).title()}"
        return None


@dataclasses.dataclass
class Language(Filter):
    """Each side is in its language by py3langid (langid.py's naive Bayes model over byte n-grams): a side goes when
    the identifier's first guess is another language and it gives the expected one a probability under
    min_probability. Sides with fewer than min_letters letters are not judged (too short to tell)."""

    name: ClassVar[str] = "language"
    min_probability: float = option(0.1, "keep a side whose expected language gets at least this probability")
    min_letters: int = option(10, "sides with fewer letters are not judged")
    sides: str = option("both", "which sides to check: both, src or tgt")

    def __post_init__(self):
        self.positive("min_probability", at_most=1.0)
        if self.sides not in ("both", "src", "tgt"):
            raise self.bad("sides", f"must be both, src or tgt (got {self.sides!r})")
        self._langid = identifier()
        known = set(self._langid.nb_classes)
        self._codes = {
            "src": identifier_code(self.src_lang, known, self.lang_keys[0]),
            "tgt": identifier_code(self.tgt_lang, known, self.lang_keys[1]),
        }
        self._sides = ("src", "tgt") if self.sides == "both" else (self.sides,)

    def check(self, src, tgt):
        for side in self._sides:
            text = src if side == "src" else tgt
            if letters(text) < self.min_letters:
                continue
            expected = self._codes[side]
            guess, p = self._langid.classify(text)
            if guess == expected:
                continue
            p_expected = dict(self._langid.rank(text)).get(expected, 0.0)
            if p_expected < self.min_probability:
                return f"{side}: {guess} ({p:.2f}), {expected} {p_expected:.2f}"
        return None


@dataclasses.dataclass
class Dedup(Filter):
    """Pairs seen before: exact, or near (the same once folded: case, punctuation, digits and whitespace).
    Each pair's key is hashed to 8 bytes, so memory grows by 16 to 32 bytes per kept pair, not by its text."""

    name: ClassVar[str] = "dedup"
    near: bool = option(True, "compare folded text (false: exact text)")
    key: str = option("pair", "what must repeat: pair (both sides), src or tgt")

    def __post_init__(self):
        if self.key not in ("pair", "src", "tgt"):
            raise self.bad("key", f"must be pair, src or tgt (got {self.key!r})")
        self.seen = HashSet64()

    def check(self, src, tgt):
        if self.near:
            src, tgt = fold(src), fold(tgt)
        text = src if self.key == "src" else tgt if self.key == "tgt" else f"{src}\t{tgt}"
        return None if self.seen.add(hash64(text)) else "seen before"


def _list(value) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value]


# The order filters run in, cheapest first; dedup last, so that its hashes hold only pairs the others kept.
# dcce scores with two models: last, on the pairs every cheaper filter kept; not among the defaults.
FILTERS: dict[str, type[Filter]] = {
    cls.name: cls for cls in (Length, CharRatio, Url, Repeat, Copy, Script, Language, Dedup, DualCrossEntropy)
}
DEFAULTS = tuple(name for name, cls in FILTERS.items() if cls.default)  # what runs when no filter is named


def options_of(cls: type[Filter]) -> list[dataclasses.Field]:
    """A filter's options: its dataclass fields other than the languages."""
    return [f for f in dataclasses.fields(cls) if not f.metadata.get("internal")]


def normalise_spec(spec: Spec, where: str) -> dict[str, dict]:
    """A filters spec as name -> options: a list of names (each with its defaults), or a mapping name -> options
    (None or {} for the defaults). Unknown names are an MtkitError listing the known ones."""
    if spec is None:
        return {}
    if isinstance(spec, (list, tuple)):
        spec = {str(name): {} for name in spec}
    if not isinstance(spec, dict):
        raise MtkitError(f"{where}: give a list of filter names or a mapping name -> options (got {spec!r})")
    out = {}
    for name, options in spec.items():
        if name not in FILTERS:
            raise MtkitError(f"{where}: unknown filter {name!r}; known filters: {', '.join(FILTERS)}")
        if options is not None and not isinstance(options, dict):
            raise MtkitError(f"{option_key(where, name)}: give its options as a mapping (got {options!r})")
        out[name] = dict(options or {})
    return out


def _typed(value, default, key: str):
    kind = type(default)
    if kind is bool:
        ok = isinstance(value, bool)
    elif kind is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif kind is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    else:
        ok = isinstance(value, kind)
    if not ok:
        raise MtkitError(f"{key}: expected {kind.__name__}, got {value!r}")
    return value


def build(
    spec: Spec, src_lang: str, tgt_lang: str, where: str = "filters", lang_keys=("src_lang", "tgt_lang")
) -> list[Filter]:
    """Ready filters for a spec, in ``FILTERS`` order.

    Args:
        spec: a list of names, or a mapping name -> options (None: none).
        src_lang, tgt_lang: the pair's languages (for the language and script filters).
        where: the config key or flag the spec came from, for error messages.
        lang_keys: the config keys or flags the languages came from, for error messages.

    Raises:
        MtkitError: an unknown filter or option, an option of the wrong type or out of range, a language the
            identifier does not know (naming the nearest it knows), a language without a known script.
    """
    chosen = normalise_spec(spec, where)
    filters = []
    # the language filter first: a language code it does not know is the error to show, before any other
    for name in sorted(chosen, key=lambda n: n != Language.name):
        cls = FILTERS[name]
        fields = {f.name: f for f in options_of(cls)}
        values = {}
        for key, value in chosen[name].items():
            if key not in fields:
                known = ", ".join(fields) or "none"
                raise MtkitError(f"{option_key(where, name)}: unknown option {key!r}; its options: {known}")
            field = fields[key]
            default = field.default if field.default is not dataclasses.MISSING else field.default_factory()
            values[key] = _typed(value, default, option_key(where, name, key))
        filters.append(cls(src_lang=src_lang, tgt_lang=tgt_lang, where=where, lang_keys=lang_keys, **values))
    order = list(FILTERS)
    return sorted(filters, key=lambda f: order.index(f.name))
