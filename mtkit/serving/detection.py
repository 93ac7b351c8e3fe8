"""Source-language detection for the server: LibreTranslate's ``POST /detect``, and the ``detectedLanguage`` of
its ``/translate`` when the source is ``auto``. The candidates are the languages the server reads and writes
(``text.detect``)."""

from __future__ import annotations

from typing import Optional, Union

from mtkit.errors import MtkitError
from mtkit.serving.errors import ApiError


class Detection:
    """The server's detector, built on first use.

    Args:
        languages: the codes the server reads and writes.
    """

    def __init__(self, languages: tuple[str, ...]):
        self.languages = languages
        self._detector = None

    def _get(self):
        if self._detector is None:
            from mtkit.text.detect import Detector

            try:
                self._detector = Detector(self.languages)
            except MtkitError as err:
                raise ApiError(501, f"language detection is not available: {err}") from None
        return self._detector

    def detect(self, text: str) -> list[dict]:
        """LibreTranslate's answer for one text: ``[{"confidence": 0-100, "language": code}, ...]``, best first."""
        return [{"confidence": c, "language": lang} for lang, c in self._get().detect(text)]

    def detected(self, q: Union[str, list[str]]) -> Union[dict, list[dict]]:
        """``detectedLanguage`` for ``q``: one ``{"confidence", "language"}`` per text (a list for a list)."""
        if isinstance(q, str):
            return self.detect(q)[0]
        return [self.detect(text)[0] for text in q]


def text_to_detect(fields: dict) -> str:
    """The ``q`` of a detect request.

    Raises:
        ApiError: 400 without ``q``, 422 for a ``q`` or ``api_key`` that is not a string.
    """
    if not isinstance(fields.get("api_key", ""), str):
        raise ApiError(422, "api_key must be a string")
    q: Optional[object] = fields.get("q")
    if q is None:
        raise ApiError(400, "missing q (the text whose language to detect)")
    if not isinstance(q, str):
        raise ApiError(422, "q must be a string")
    return q
