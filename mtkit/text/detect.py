"""Which language a text is in, among the languages a server reads and writes: py3langid (langid.py's naive
Bayes model over byte n-grams, shipped in its package; scripts/compare_detectors.py has why it was chosen),
its candidates held to those languages.
"""

from __future__ import annotations

from typing import Sequence

from mtkit.errors import MtkitError


class Detector:
    """Identifies the language of texts among ``languages``.

    Args:
        languages: ISO 639-1 codes; those the model does not know are left out (they can never be detected).

    Raises:
        MtkitError: py3langid is not installed, or it knows none of ``languages``.
    """

    def __init__(self, languages: Sequence[str]):
        try:
            from py3langid.langid import MODEL_FILE, LanguageIdentifier
        except ImportError:
            raise MtkitError("language detection needs py3langid: pip install py3langid") from None
        self._identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        known = set(self._identifier.nb_classes)
        self.languages = tuple(dict.fromkeys(lang for lang in languages if lang in known))
        if not self.languages:
            raise MtkitError(f"no language among {', '.join(languages) or 'none'} can be detected")
        if len(self.languages) > 1:
            self._identifier.set_languages(list(self.languages))

    def detect(self, text: str) -> list[tuple[str, float]]:
        """The candidate languages of ``text``, most likely first, with a confidence from 0 to 100 each; a text
        without letters gets the first language at 0."""
        if len(self.languages) == 1 or not any(c.isalpha() for c in text):
            return [(self.languages[0], 100.0 if len(self.languages) == 1 else 0.0)]
        ranked = self._identifier.rank(text)
        return [(lang, round(100.0 * float(p), 2)) for lang, p in ranked if lang in self.languages]

    def best(self, text: str) -> tuple[str, float]:
        """The most likely language of ``text`` and its confidence (0 to 100)."""
        return self.detect(text)[0]
