"""The server with paragraphs, HTML and documents: the answers the Python API gives, through /v1/translate,
LibreTranslate's /translate (``format: html``) and /translate_file (its URL downloads the file), and
/v1/translate_file; bad documents are 4xx with one readable message."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
from fastapi.testclient import TestClient  # noqa: E402

import mtkit  # noqa: E402
from mtkit.flags import ServeLimits  # noqa: E402
from mtkit.serving.app import create_app  # noqa: E402
from mtkit.serving.languages import run_languages  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def client(run_dir):
    limits = ServeLimits(max_file_bytes=4096)
    with TestClient(create_app(mtkit.load(run_dir), run_languages(run_dir), limits=limits)) as c:
        yield c


PARAGRAPH = "  A man sits in the park . Two dogs play with a ball .\tThe cat eats bread .  "
FRAGMENT = "A <b>man</b> sits in the <i>green</i> park ."


def assert_error(response, status: int, *words: str) -> None:
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert list(body) == ["error"] and "\n" not in body["error"], body
    for word in words:
        assert word in body["error"], (word, body)


def test_v1_translate_splits_paragraphs_and_carries_markup(client, model):
    answer = client.post("/v1/translate", json={"text": [PARAGRAPH, FRAGMENT]}).json()
    assert [t["text"] for t in answer["translations"]] == [model.translate(PARAGRAPH), model.translate(FRAGMENT)]
    assert answer["translations"][0]["text"].startswith("  ") and "\t" in answer["translations"][0]["text"]
    html = client.post("/v1/translate", json={"text": FRAGMENT, "options": {"format": "html"}}).json()
    assert html["translations"][0]["text"] == model.translate(FRAGMENT, format="html")
    whole = client.post("/v1/translate", json={"text": PARAGRAPH, "options": {"split_sentences": False}}).json()
    assert whole["translations"][0]["text"] == model.translate(PARAGRAPH, split_sentences=False)
    assert_error(
        client.post("/v1/translate", json={"text": "a", "options": {"format": "html", "nbest": 2}}), 422, "nbest"
    )
    assert_error(
        client.post("/v1/translate", json={"text": {"text": "a", "prefix": "Ein"}, "options": {"format": "html"}}),
        422,
        "plain texts",
    )
    assert_error(client.post("/v1/translate", json={"text": "a", "options": {"format": "pdf"}}), 422, "format")


def test_libretranslate_format_html(client, model):
    answer = client.post("/translate", json={"q": [FRAGMENT, PARAGRAPH], "target": "de", "format": "html"}).json()
    assert answer["translatedText"] == model.translate([FRAGMENT, PARAGRAPH], format="html")
    assert "<b>" in answer["translatedText"][0] and "</i>" in answer["translatedText"][0]


def test_translate_file_answers_a_url_that_downloads_the_translation(client, model, tmp_path):
    source = tmp_path / "notes.txt"
    source.write_text(f"{PARAGRAPH}\n\nA dog runs .\n", encoding="utf-8")
    expected = tmp_path / "expected.txt"
    model.translate_file(source, expected)
    with source.open("rb") as f:
        answer = client.post("/translate_file", files={"file": ("notes.txt", f)}, data={"source": "en", "target": "de"})
    assert answer.status_code == 200, answer.text
    url = answer.json()["translatedFileUrl"]
    assert url.startswith("http") and url.endswith(".notes.txt")
    downloaded = client.get(url)
    assert downloaded.status_code == 200 and downloaded.content == expected.read_bytes()
    direct = client.post("/v1/translate_file", files={"file": ("notes.txt", source.read_bytes())})
    assert direct.status_code == 200 and direct.content == expected.read_bytes()
    assert "notes.txt" in direct.headers["content-disposition"]
    assert_error(client.get("/download_file/0123.notes.txt"), 404, "no such file")


def test_bad_documents_are_4xx_with_one_line(client):
    assert_error(client.post("/translate_file", data={"target": "de"}), 415, "multipart")
    assert_error(client.post("/translate_file", files={"other": ("a.txt", b"x")}), 400, "missing file")
    assert_error(client.post("/translate_file", files={"file": ("a.pdf", b"%PDF-1.4")}), 415, "a.pdf is not a document")
    assert_error(client.post("/v1/translate_file", files={"file": ("a.txt", b"\xff\xfe bad")}), 400, "a.txt", "UTF-8")
    assert_error(client.post("/v1/translate_file", files={"file": ("a.txt", b"x" * 5000)}), 413, "at most 4096")
    too_big = client.post("/v1/translate_file", files={"file": ("a.txt", b"x" * (ServeLimits().max_body_bytes + 1))})
    assert_error(too_big, 413, "larger than")
    assert_error(
        client.post("/translate_file", files={"file": ("a.txt", b"x")}, data={"target": "fr"}), 400, "en to de only"
    )
