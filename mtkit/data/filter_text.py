"""What the filters of noisy parallel text (``data.filters``) read off a text: its letters, the key two near-copies
share and its hash, a set of such hashes, the script of each letter and the languages written in each script, and
the language identifier with the codes it knows."""

from __future__ import annotations

import difflib
import functools
import hashlib
import re
import unicodedata
from typing import Optional

import numpy as np

from mtkit.errors import MtkitError

# ------------------------------------------------------------------------------------------- text keys
_FOLD_RE = re.compile(r"[\W\d_]+")  # punctuation, symbols, digits, whitespace
_NOT_LETTER_RE = re.compile(r"[\W\d_]+")
_NON_ASCII_RE = re.compile(r"[^\x00-\x7f]")


def letters(text: str) -> int:
    """How many letters ``text`` has."""
    return len(_NOT_LETTER_RE.sub("", text))


@functools.lru_cache(maxsize=64)  # several filters fold the same pair
def fold(text: str) -> str:
    """The text two near-copies share: case-folded, every run of punctuation, symbols, digits and whitespace
    turned into one space (``"Hello, World 2!"`` -> ``"hello world"``)."""
    return _FOLD_RE.sub(" ", text.casefold()).strip()


def hash64(text: str) -> int:
    """An 8-byte hash of ``text`` (BLAKE2b), as an int in [1, 2**64)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little") or 1


class HashSet64:
    """A set of 8-byte hashes in one numpy array (open addressing, linear probing, at most half full): 16 to 32
    bytes per hash held, against about 70 for a Python set of ints."""

    def __init__(self, capacity: int = 1 << 16):
        self._table = np.zeros(capacity, np.uint64)  # (capacity,), 0 = empty slot
        self._mask = capacity - 1
        self.size = 0

    def add(self, key: int) -> bool:
        """Add ``key`` (1 <= key < 2**64); whether it was new."""
        table, mask = self._table, self._mask
        i = key & mask
        while True:
            held = table.item(i)
            if held == 0:
                table[i] = key
                self.size += 1
                if 2 * self.size > len(table):
                    self._grow()
                return True
            if held == key:
                return False
            i = (i + 1) & mask

    def _grow(self):
        held = self._table[self._table != 0].tolist()
        self._table = np.zeros(2 * len(self._table), np.uint64)
        self._mask = len(self._table) - 1
        self.size = 0
        for key in held:
            self.add(key)

    @property
    def nbytes(self) -> int:
        return self._table.nbytes


# ------------------------------------------------------------------------------------ languages, scripts
# Codes people often give that the identifier knows under another name (ISO 639-2/3, old ISO 639-1 codes).
ALIASES = {
    "ara": "ar", "bul": "bg", "ces": "cs", "cze": "cs", "chi": "zh", "zho": "zh", "cmn": "zh", "dan": "da",
    "deu": "de", "ger": "de", "ell": "el", "gre": "el", "eng": "en", "spa": "es", "est": "et", "fas": "fa",
    "per": "fa", "fin": "fi", "fra": "fr", "fre": "fr", "heb": "he", "iw": "he", "hin": "hi", "hrv": "hr",
    "hun": "hu", "ind": "id", "in": "id", "ita": "it", "jpn": "ja", "kor": "ko", "lit": "lt", "lav": "lv",
    "nld": "nl", "dut": "nl", "nb": "no", "nob": "no", "nor": "no", "pol": "pl", "por": "pt", "ron": "ro",
    "rum": "ro", "rus": "ru", "slk": "sk", "slo": "sk", "slv": "sl", "srp": "sr", "swe": "sv", "tha": "th",
    "tur": "tr", "ukr": "uk", "vie": "vi", "cat": "ca", "eus": "eu", "baq": "eu", "glg": "gl",
}  # fmt: skip

# Unicode script names (the first word of a letter's Unicode name) each language is written in.
_LATIN = (
    "af an az br bs ca cs cy da de en eo es et eu fi fo fr fy ga gd gl hr ht hu id is it jv ku la lb lt lv mg "
    "ms mt nl nn no oc pl pt qu ro rw se sk sl so sq sv sw tk tl tr uz vi wa xh yo zu ha ig ln lg sn st"
)
_CYRILLIC = "ba be bg kk ky mk mn ru tg tt uk"
SCRIPTS: dict[str, tuple[str, ...]] = {
    **{lang: ("LATIN",) for lang in _LATIN.split()},
    **{lang: ("CYRILLIC",) for lang in _CYRILLIC.split()},
    "sr": ("CYRILLIC", "LATIN"), "el": ("GREEK",), "ar": ("ARABIC",), "fa": ("ARABIC",), "ur": ("ARABIC",),
    "ps": ("ARABIC",), "ug": ("ARABIC",), "he": ("HEBREW",), "hi": ("DEVANAGARI",), "mr": ("DEVANAGARI",),
    "ne": ("DEVANAGARI",), "sa": ("DEVANAGARI",), "bn": ("BENGALI",), "as": ("BENGALI",), "pa": ("GURMUKHI",),
    "gu": ("GUJARATI",), "or": ("ORIYA",), "ta": ("TAMIL",), "te": ("TELUGU",), "kn": ("KANNADA",),
    "ml": ("MALAYALAM",), "si": ("SINHALA",), "th": ("THAI",), "lo": ("LAO",), "km": ("KHMER",),
    "my": ("MYANMAR",), "ka": ("GEORGIAN",), "hy": ("ARMENIAN",), "am": ("ETHIOPIC",), "dz": ("TIBETAN",),
    "zh": ("CJK",), "yue": ("CJK",), "ja": ("CJK", "HIRAGANA", "KATAKANA"), "ko": ("HANGUL", "CJK"),
}  # fmt: skip
_WIDTH = {"FULLWIDTH", "HALFWIDTH"}
_script_of: dict[str, str] = {}


def script(char: str) -> str:
    """The script of a letter, as the first word of its Unicode name (``"LATIN"``, ``"CJK"``, ``"HANGUL"``;
    fullwidth forms as their script); "" for a character without a name."""
    found = _script_of.get(char)
    if found is None:
        words = unicodedata.name(char, "").replace("-", " ").split()
        if words and words[0] in _WIDTH:
            words = words[1:]
        found = _script_of[char] = words[0] if words else ""
    return found


def script_share(text: str, scripts: tuple[str, ...]) -> tuple[float, int]:
    """The share of the letters of ``text`` in one of ``scripts``, and how many letters it has (share 1.0 for a
    text without letters)."""
    total = letters(text)
    if not total:
        return 1.0, 0
    other = [c for c in _NON_ASCII_RE.findall(text) if c.isalpha()]  # ASCII letters are Latin
    inside = (total - len(other) if "LATIN" in scripts else 0) + sum(script(c) in scripts for c in other)
    return inside / total, total


_identifier = None


def identifier():
    """py3langid's identifier (langid.py's model, shipped in its package), loaded once."""
    global _identifier
    if _identifier is None:
        try:
            from py3langid.langid import MODEL_FILE, LanguageIdentifier
        except ImportError:
            raise MtkitError("the language filter needs py3langid: pip install py3langid") from None
        _identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    return _identifier


def _nearest(code: str, known) -> Optional[str]:
    base = re.split(r"[-_]", code)[0]
    for guess in (ALIASES.get(code), base if base != code else None, ALIASES.get(base)):
        if guess in known:
            return guess
    close = difflib.get_close_matches(code, sorted(set(known) - {"zxx"}), n=1, cutoff=0.5)  # zxx: no language
    return close[0] if close else None


def identifier_code(lang: str, known, where: str) -> str:
    """``lang`` as the identifier names it: itself, or its base language for a regional code (``pt-BR`` ->
    ``pt``); an MtkitError naming the nearest code it knows otherwise."""
    code = lang.lower()
    if code in known:
        return code
    base = re.split(r"[-_]", code)[0]
    if base in known:
        return base
    near = _nearest(code, known)
    hint = f"the nearest it knows is {near!r}" if near else f"it knows {', '.join(sorted(set(known)))}"
    raise MtkitError(f"{where}: the language filter's identifier does not know language {lang!r}; {hint}")
