"""Language identification among a server's languages, on real sentences of the shipped data."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

pytest.importorskip("py3langid")

from mtkit.errors import MtkitError  # noqa: E402
from mtkit.text.detect import Detector  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / "data" / "multi30k"


def sentences(lang: str, n: int = 200) -> list[str]:
    with gzip.open(DATA / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as f:
        return f.read().splitlines()[:n]


def test_real_sentences_are_identified_among_the_servers_languages():
    detector = Detector(["en", "de", "fr", "cs"])
    for lang in ("en", "de", "fr", "cs"):
        found = [detector.best(s)[0] for s in sentences(lang)]
        assert found.count(lang) >= 198, (lang, [s for s, f in zip(sentences(lang), found) if f != lang][:3])
    ranked = detector.detect("Ein Mann fährt mit dem Fahrrad durch den Park.")
    assert ranked[0][0] == "de" and ranked[0][1] > 90
    assert sorted(lang for lang, _ in ranked) == ["cs", "de", "en", "fr"]
    assert sum(c for _, c in ranked) == pytest.approx(100, abs=0.1)


def test_one_language_codes_it_does_not_know_and_text_without_letters():
    assert Detector(["en"]).detect("Bonjour tout le monde") == [("en", 100.0)]
    assert Detector(["en", "xx"]).languages == ("en",)
    assert Detector(["en", "de"]).detect("1234 !!") == [("en", 0.0)]
    with pytest.raises(MtkitError, match="no language among xx, yy can be detected"):
        Detector(["xx", "yy"])
