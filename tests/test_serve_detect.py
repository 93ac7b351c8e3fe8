"""Source-language detection through the server: LibreTranslate's /detect, by its own client too, and the
detectedLanguage of /translate with source auto."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("py3langid")
from fastapi.testclient import TestClient  # noqa: E402

import mtkit  # noqa: E402
from mtkit.serving.app import create_app  # noqa: E402
from mtkit.serving.languages import run_languages  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
ENGLISH = "A man in a blue shirt is riding his bike through the park."
GERMAN = "Ein Mann in einem blauen Hemd fährt mit seinem Fahrrad durch den Park."


def test_detect_and_detected_language(run_dir):
    with TestClient(create_app(mtkit.load(run_dir), run_languages(run_dir))) as client:
        found = client.post("/detect", data={"q": GERMAN}).json()
        assert found[0]["language"] == "de" and found[0]["confidence"] > 90
        assert {x["language"] for x in found} == {"en", "de"}  # the server's languages only
        assert client.post("/detect", json={"q": ENGLISH}).json()[0]["language"] == "en"
        answer = client.post("/translate", json={"q": ENGLISH, "source": "auto", "target": "de"}).json()
        assert answer["detectedLanguage"]["language"] == "en" and set(answer) == {"translatedText", "detectedLanguage"}
        listed = client.post("/translate", json={"q": [ENGLISH, GERMAN], "target": "de"}).json()
        assert [d["language"] for d in listed["detectedLanguage"]] == ["en", "de"]  # per item
        named = client.post("/translate", json={"q": ENGLISH, "source": "en", "target": "de"}).json()
        assert "detectedLanguage" not in named
        for bad, status in (({}, 400), ({"q": ["a"]}, 422)):
            response = client.post("/detect", json=bad)
            assert response.status_code == status and list(response.json()) == ["error"]


def test_libretranslates_client_detects(run_dir):
    from libretranslatepy import LibreTranslateAPI
    from test_serve import DEADLINE, uvicorn_server

    with uvicorn_server(create_app(mtkit.load(run_dir), run_languages(run_dir))) as (_server, port):
        client = LibreTranslateAPI(f"http://127.0.0.1:{port}")
        assert client.detect(GERMAN, timeout=DEADLINE)[0]["language"] == "de"
        assert client.detect(ENGLISH, timeout=DEADLINE)[0]["language"] == "en"
