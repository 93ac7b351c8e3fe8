"""``mtkit serve``'s web page (mtkit/serving/page/) in a real browser: the system's Chromium, driven by Playwright,
against a real uvicorn serving two tiny models, en-de (conftest.py's ``toy_run_workdir``) and de-en (trained here).

Each check holds the page to what the API answers for the same request: the text typed and its translation, the
language detected with source auto and the model it picked, the sentences the server cut the translation into and
each one's n-best list (the first the sentence shown) and alignment grid (a row per source subword), all from one
request per text, a line of two sentences kept one line, a DOCX document uploaded and downloaded, the server's
one-line message for a text over the character limit and for a missing API key; an answer to an older text never
replaces the newer one's. The page is usable at a phone's width and every control has a name. A screenshot goes to
pytest's tmp dir, and to the file MTKIT_PAGE_SCREENSHOT names where it is set (docs/images/serve-page.png is one).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from conftest import TINY_TRANSFORMER, cli

pytest.importorskip("fastapi")
pytest.importorskip("py3langid")
pytest.importorskip("docx")
pytest.importorskip("playwright")
CHROMIUM = "/usr/bin/chromium"  # the system's (Debian's chromium package); Playwright's own browsers are not used
if not Path(CHROMIUM).exists():
    pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)", allow_module_level=True)

import docx  # noqa: E402
import httpx  # noqa: E402
from playwright.sync_api import Error as PlaywrightError  # noqa: E402
from playwright.sync_api import expect, sync_playwright  # noqa: E402
from test_serve import DEADLINE, uvicorn_server  # noqa: E402

from mtkit.flags import ServeLimits  # noqa: E402
from mtkit.serving.app import create_models_app  # noqa: E402
from mtkit.serving.models import model_specs  # noqa: E402
from mtkit.serving.pool import ModelPool  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
BROWSER_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
MAX_CHARS = 300
KEY = "page-test-key"
ENGLISH = "A man sits in the park ."
OTHER = "Two dogs play with a ball ."
GERMAN = "Ein Mann in einem blauen Hemd fährt mit seinem Fahrrad durch den Park."  # detected as German
DETAILS = {"nbest": 4, "scores": True, "alignments": True}  # what the page asks /v1/translate for on this server
TRANSLATE = ("/translate", "/v1/translate")
expect.set_options(timeout=DEADLINE * 1000)


@pytest.fixture(scope="module")
def runs(toy_run_workdir, tmp_path_factory) -> list[Path]:
    """en-de (the shared toy run) and de-en, trained here on the same corpus the other way round."""
    root = tmp_path_factory.mktemp("page")
    corpus = toy_run_workdir / "corpus"
    splits = {
        split: {"src": str(corpus / f"{split}.de"), "tgt": str(corpus / f"{split}.en")} for split in ("train", "valid")
    }
    config = {
        "data": {"dir": str(root / "data"), "vocab_size": 100, "src_lang": "de", "tgt_lang": "en", "splits": splits},
        "model": {**TINY_TRANSFORMER, "max_positions": 128},
        "training": {
            "run_dir": str(root / "run"),
            "max_updates": 60,
            "batch_tokens": 400,
            "lr": 5e-3,
            "warmup_updates": 5,
            "validate_every": 60,
            "log_every": 60,
            "threads": 1,
            "valid_max_sentences": 5,
        },
        "decoding": {"beam_size": 4, "batch_size": 1, "threads": 1, "device": "cpu"},
    }
    (root / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    assert cli("prepare", root / "config.yaml") == 0
    assert cli("train", root / "config.yaml") == 0
    return [toy_run_workdir / "run", root / "run"]


def serve(runs: list[Path], **options):
    app = create_models_app(ModelPool(model_specs(runs, None)), limits=ServeLimits(max_chars=MAX_CHARS), **options)
    return uvicorn_server(app)


@pytest.fixture(scope="module")
def server(runs) -> str:
    """The address of a real uvicorn serving both models."""
    with serve(runs) as (_server, port):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def keyed_server(runs) -> str:
    """The same models behind an API key."""
    with serve(runs, api_key=KEY) as (_server, port):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def browser():
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        yield chromium
        chromium.close()


def open_page(browser, address: str, width: int = 1280, height: int = 900):
    context = browser.new_context(accept_downloads=True, viewport={"width": width, "height": height})
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=address)
    page = context.new_page()
    page.goto(address + "/")
    expect(page.locator("#target option")).not_to_have_count(0)  # the languages are in
    return page


@pytest.fixture
def page(browser, server):
    page = open_page(browser, server)
    yield page
    page.context.close()


def choose(page, source: str, target: str) -> None:
    page.select_option("#source", source)
    page.select_option("#target", target)


def libre(address: str, q: str, source: str, target: str, **fields) -> httpx.Response:
    body = {"q": q, "source": source, "target": target, **fields}
    return httpx.post(f"{address}/translate", json=body, timeout=DEADLINE)


def translated(address: str, q: str, source: str, target: str) -> str:
    response = libre(address, q, source, target)
    assert response.status_code == 200, response.text
    return response.json()["translatedText"]


def v1(address: str, text: str, source: str, target: str, **options) -> httpx.Response:
    body = {"text": text, "source": source, "target": target, "options": options}
    return httpx.post(f"{address}/v1/translate", json=body, timeout=DEADLINE)


def answered(address: str, text: str, source: str, target: str) -> dict:
    """The text's translation as the page asks for it: with its sentences, their hypotheses and alignments."""
    response = v1(address, text, source, target, **DETAILS)
    assert response.status_code == 200, response.text
    return response.json()["translations"][0]


# ------------------------------------------------------------------------------------------- the page's files
def test_the_page_and_its_files_are_served(server):
    page = httpx.get(server + "/", timeout=DEADLINE)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'src="page/page.js"' in page.text and 'href="page/page.css"' in page.text  # relative: works under a prefix
    for name, kind in (("page.js", "text/javascript"), ("page.css", "text/css")):
        answer = httpx.get(f"{server}/page/{name}", timeout=DEADLINE)
        assert answer.status_code == 200 and answer.headers["content-type"].startswith(kind) and answer.text
    missing = httpx.get(server + "/page/other.js", timeout=DEADLINE)
    assert missing.status_code == 404 and list(missing.json()) == ["error"]
    assert "/" not in httpx.get(server + "/openapi.json", timeout=DEADLINE).json()["paths"]


# ------------------------------------------------------------------------------------------- translating
def test_typing_shows_the_servers_translation(page, server):
    settings = httpx.get(server + "/frontend/settings", timeout=DEADLINE).json()
    choose(page, "en", "de")
    expect(page.locator("#target option")).to_have_count(1)  # en translates into de only
    page.locator("#input").press_sequentially(ENGLISH)
    expect(page.locator("#output")).to_have_text(translated(server, ENGLISH, "en", "de"))
    expect(page.locator("#count")).to_have_text(f"{len(ENGLISH)} / {settings['charLimit']} characters")
    expect(page.locator("#error")).to_be_hidden()
    # a second sentence on its own line: the whole text is translated again, line breaks kept
    page.locator("#input").press("End")
    page.locator("#input").press_sequentially("\n" + OTHER)
    both = ENGLISH + "\n" + OTHER
    expect(page.locator("#output")).to_have_text(translated(server, both, "en", "de"))
    assert "\n" in page.locator("#output").text_content()
    page.click("#copy")
    expect(page.locator("#copy")).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == translated(server, both, "en", "de")
    page.fill("#input", "")
    expect(page.locator("#output")).to_have_text("")


def test_auto_detects_the_language_and_its_model(page, server):
    expect(page.locator("#source")).to_have_value("auto")  # the server reads two languages
    expect(page.locator("#target option")).to_have_count(2)
    page.select_option("#target", "en")
    page.fill("#input", GERMAN)
    by_german_model = httpx.post(
        server + "/v1/translate", json={"text": GERMAN, "source": "de", "target": "en"}, timeout=DEADLINE
    ).json()["translations"][0]
    expect(page.locator("#output")).to_have_text(by_german_model["text"])
    expect(page.locator("#detected")).to_contain_text("Detected: German")
    assert by_german_model["text"] == translated(server, GERMAN, "auto", "en")
    # English text, into German: the other model
    page.select_option("#target", "de")
    page.fill("#input", ENGLISH)
    expect(page.locator("#output")).to_have_text(translated(server, ENGLISH, "en", "de"))
    expect(page.locator("#detected")).to_contain_text("Detected: English")
    # swap: the detected language becomes the target, the translation the text
    output = page.locator("#output").text_content()
    page.click("#swap")
    expect(page.locator("#source")).to_have_value("de")
    expect(page.locator("#target")).to_have_value("en")
    expect(page.locator("#input")).to_have_value(output)
    expect(page.locator("#output")).to_have_text(translated(server, output, "de", "en"))


def test_a_sentence_shows_its_alternatives_and_alignment_grid(page, server):
    choose(page, "en", "de")
    page.fill("#input", ENGLISH)
    expect(page.locator("#output")).to_have_text(translated(server, ENGLISH, "en", "de"))
    (answer,) = answered(server, ENGLISH, "en", "de")["sentences"]
    page.locator("#output .sentence").first.focus()  # by keyboard
    page.keyboard.press("Enter")
    hypotheses = page.locator("#alternatives .hypothesis")
    expect(hypotheses).to_have_text([h["text"] for h in answer["hypotheses"]])
    expect(hypotheses.first).to_have_text(page.locator("#output .sentence").first.text_content())
    scores = page.locator("#alternatives .score")
    expect(scores.first).to_contain_text(f"score {answer['hypotheses'][0]['score']:.3f}")
    rows = page.locator("#alignment tbody tr")
    expect(rows).to_have_count(len(answer["source_tokens"]))
    expect(page.locator("#alignment tbody th")).to_have_text(answer["source_tokens"])
    best = answer["hypotheses"][0]
    expect(page.locator("#alignment thead th")).to_have_count(1 + len(best["tokens"]))
    expect(rows.first.locator("td")).to_have_count(len(best["tokens"]))
    # another hypothesis: its own columns
    hypotheses.nth(1).click()
    expect(hypotheses.nth(1)).to_have_attribute("aria-pressed", "true")
    expect(page.locator("#alignment thead th")).to_have_count(1 + len(answer["hypotheses"][1]["tokens"]))
    expect(rows).to_have_count(len(answer["source_tokens"]))
    # a new text: the alternatives of the old one go
    page.fill("#input", OTHER)
    expect(page.locator("#output")).to_have_text(translated(server, OTHER, "en", "de"))
    expect(page.locator("#details")).to_be_hidden()


def test_one_request_per_text_and_a_line_of_two_sentences_stays_one_line(page, server):
    asked = []
    page.on("request", lambda request: asked.append(urlparse(request.url).path))
    choose(page, "en", "de")
    text = ENGLISH + " " + OTHER
    answer = answered(server, text, "en", "de")
    assert len(answer["sentences"]) == 2 and "\n" not in answer["text"]
    page.fill("#input", text)
    expect(page.locator("#output")).to_have_text(answer["text"])
    sentences = page.locator("#output .sentence")
    expect(sentences).to_have_text([answer["text"][s["start"] : s["end"]] for s in answer["sentences"]])
    # laid out as the same text without sentences: narrowed so that the second sentence's first word still fits on
    # the line where the first sentence ends, the second goes on there (a box of its own would start a line)
    placed = page.evaluate(
        """() => {
            const output = document.getElementById("output");
            const [first, second] = output.querySelectorAll(".sentence");
            const word = second.textContent.split(" ")[0];
            const reach = document.createRange();
            reach.setStart(first.firstChild, 0);
            reach.setEnd(second.firstChild, word.length);
            const style = getComputedStyle(output);
            const edges = ["paddingLeft", "paddingRight", "borderLeftWidth", "borderRightWidth"];
            const extra = edges.reduce((sum, name) => sum + parseFloat(style[name]), 0);
            output.style.width = `${reach.getBoundingClientRect().width + extra + 4}px`;
            const plain = output.cloneNode(false);
            plain.id = "plain";
            plain.textContent = output.textContent;
            output.after(plain);
            const boxes = (rects, box) => [...rects].map((r) => [r.left - box.left, r.top - box.top].map(Math.round));
            let at = 0;
            const found = [first, second].map((span) => {
                const start = output.textContent.indexOf(span.textContent, at);
                at = start + span.textContent.length;
                const range = document.createRange();
                range.setStart(plain.firstChild, start);
                range.setEnd(plain.firstChild, at);
                const own = boxes(span.getClientRects(), output.getBoundingClientRect());
                return [own, boxes(range.getClientRects(), plain.getBoundingClientRect())];
            });
            plain.remove();
            return found;
        }"""
    )
    (first, first_plain), (second, second_plain) = placed
    assert first == first_plain and second == second_plain, placed
    assert second[0][1] == first[-1][1] and len(second) > 1, placed  # on the first's line, and wrapped after
    # each sentence: its own alternatives from the same answer, the first the sentence shown
    hypotheses = page.locator("#alternatives .hypothesis")
    for i, sentence in enumerate(answer["sentences"]):
        sentences.nth(i).click()
        expect(page.locator("#details-source")).to_have_text(sentence["source"])
        expect(hypotheses).to_have_text([h["text"] for h in sentence["hypotheses"]])
        expect(hypotheses.first).to_have_text(sentences.nth(i).text_content())
        expect(page.locator("#alignment tbody th")).to_have_text(sentence["source_tokens"])
    assert [path for path in asked if path in TRANSLATE] == ["/v1/translate"], asked


def test_an_answer_to_an_older_text_never_replaces_the_newer(page, server):
    page.evaluate(
        """() => {
            window.seen = [];
            const output = document.getElementById("output");
            new MutationObserver(() => window.seen.push(output.textContent))
                .observe(output, {childList: true, subtree: true, characterData: true});
        }"""
    )
    held = []

    def hold_the_first(route):
        if held:
            route.continue_()
        else:
            held.append(route)  # answered below, after the newer text's translation

    page.route(lambda url: urlparse(url).path == "/v1/translate", hold_the_first)
    choose(page, "en", "de")
    with page.expect_request(lambda request: urlparse(request.url).path == "/v1/translate"):
        page.fill("#input", ENGLISH)
    page.fill("#input", OTHER)
    expect(page.locator("#output")).to_have_text(translated(server, OTHER, "en", "de"))
    assert len(held) == 1
    try:
        held[0].fulfill(json={"translations": [{"text": "stale answer", "sentences": []}]})
    except PlaywrightError:
        pass  # the page has given up on that request already
    page.fill("#input", ENGLISH + " " + OTHER)  # one more round trip after the old answer came
    expect(page.locator("#output")).to_have_text(translated(server, ENGLISH + " " + OTHER, "en", "de"))
    seen = page.evaluate("window.seen")
    assert seen and not any("stale answer" in text for text in seen), seen


# ------------------------------------------------------------------------------------------- errors
def test_a_text_over_the_limit_shows_the_servers_message(page, server):
    text = (ENGLISH + " ") * (MAX_CHARS // len(ENGLISH) + 1)
    refused = v1(server, text, "en", "de", **DETAILS)
    assert refused.status_code == 422  # over the schema's maxLength: refused as the schema says
    choose(page, "en", "de")
    page.fill("#input", text)
    expect(page.locator("#error")).to_have_text(refused.json()["error"])
    assert "\n" not in page.locator("#error").text_content()
    expect(page.locator("#count")).to_have_class("over")
    expect(page.locator("#output")).to_have_text("")
    page.fill("#input", ENGLISH)  # back under the limit: the message goes
    expect(page.locator("#error")).to_be_hidden()
    expect(page.locator("#output")).to_have_text(translated(server, ENGLISH, "en", "de"))


def test_the_api_key_field(browser, server, keyed_server):
    page = open_page(browser, server)
    expect(page.locator("#api-key")).to_be_hidden()  # a server without a key asks for none
    page.context.close()
    page = open_page(browser, keyed_server)
    try:
        expect(page.locator("#api-key")).to_be_visible()
        choose(page, "en", "de")
        page.fill("#input", ENGLISH)
        refused = v1(keyed_server, ENGLISH, "en", "de", **DETAILS)
        assert refused.status_code == 403
        expect(page.locator("#error")).to_have_text(refused.json()["error"])
        page.get_by_label("API key").fill(KEY)
        expected = libre(keyed_server, ENGLISH, "en", "de", api_key=KEY).json()["translatedText"]
        expect(page.locator("#output")).to_have_text(expected)
        expect(page.locator("#error")).to_be_hidden()
    finally:
        page.context.close()


# ------------------------------------------------------------------------------------------- documents
def test_a_docx_document_comes_back_translated(page, server, tmp_path):
    source = tmp_path / "notes.docx"
    document = docx.Document()
    for text in (ENGLISH, OTHER):
        document.add_paragraph(text)
    document.save(source)
    expected = httpx.post(
        server + "/v1/translate_file",
        files={"file": ("notes.docx", source.read_bytes())},
        data={"source": "en", "target": "de"},
        timeout=DEADLINE,
    )
    assert expected.status_code == 200, expected.text
    (tmp_path / "expected.docx").write_bytes(expected.content)
    choose(page, "en", "de")
    page.set_input_files("#file", source)
    page.click("#translate-file")
    link = page.locator("#download")
    expect(link).to_be_visible()
    with page.expect_download() as download:
        link.click()
    assert download.value.suggested_filename == "notes.docx"
    download.value.save_as(tmp_path / "translated.docx")
    paragraphs = [p.text for p in docx.Document(tmp_path / "translated.docx").paragraphs]
    assert paragraphs == [p.text for p in docx.Document(tmp_path / "expected.docx").paragraphs]
    assert paragraphs == [translated(server, text, "en", "de") for text in (ENGLISH, OTHER)]
    # a file the server does not read: its message
    page.set_input_files("#file", {"name": "notes.xyz", "mimeType": "text/plain", "buffer": b"A man ."})
    page.click("#translate-file")
    refused = httpx.post(
        server + "/translate_file", files={"file": ("notes.xyz", b"A man .")}, data={"target": "de"}, timeout=DEADLINE
    )
    assert refused.status_code == 415
    expect(page.locator("#error")).to_have_text(refused.json()["error"])


# ------------------------------------------------------------------------------------------- use
def test_every_control_is_named_and_the_page_fits_a_phone(browser, server, tmp_path):
    page = open_page(browser, server, width=360, height=740)
    try:
        unnamed = page.evaluate(
            """() => [...document.querySelectorAll("button, select, input, textarea")]
                .filter((el) => !(el.labels && el.labels.length) && !el.getAttribute("aria-label")
                                && !el.textContent.trim())
                .map((el) => el.id || el.outerHTML)"""
        )
        assert unnamed == []
        choose(page, "en", "de")
        page.fill("#input", ENGLISH)
        expect(page.locator("#output")).to_have_text(translated(server, ENGLISH, "en", "de"))
        width = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
        assert width[0] <= width[1], width  # nothing wider than the screen
        boxes = [page.locator(f"#{name}").bounding_box() for name in ("input", "output")]
        assert boxes[1]["y"] >= boxes[0]["y"] + boxes[0]["height"], boxes  # one pane under the other
        page.screenshot(path=tmp_path / "phone.png", full_page=True)
    finally:
        page.context.close()


def test_screenshot(page, server, tmp_path):
    choose(page, "en", "de")
    page.fill("#input", ENGLISH)
    expect(page.locator("#output")).to_have_text(translated(server, ENGLISH, "en", "de"))
    page.locator("#output .sentence").first.click()
    expect(page.locator("#alignment tbody tr")).not_to_have_count(0)
    shot = tmp_path / "serve-page.png"
    page.screenshot(path=shot, full_page=True)
    assert shot.read_bytes().startswith(b"\x89PNG")
    if os.environ.get("MTKIT_PAGE_SCREENSHOT"):
        shutil.copyfile(shot, os.environ["MTKIT_PAGE_SCREENSHOT"])


def test_a_glossary_picked_is_followed(browser, server):
    terms = "tree\tGarten\n"  # tree is always Baum in the toy corpus
    made = httpx.post(
        f"{server}/v2/glossaries",
        json={"name": "park", "source_lang": "en", "target_lang": "de", "entries": terms},
        timeout=DEADLINE,
    ).json()
    try:
        page = open_page(browser, server)
        choose(page, "en", "de")
        expect(page.locator("#glossary-row")).to_be_visible()
        page.select_option("#glossary", made["glossary_id"])
        text = "A dog sits under the tree ."
        page.locator("#input").press_sequentially(text)
        body = {"text": text, "source": "en", "target": "de", "glossary": made["glossary_id"]}
        expected = httpx.post(f"{server}/v1/translate", json=body, timeout=DEADLINE).json()["translations"][0]["text"]
        assert "Garten" in expected
        expect(page.locator("#output")).to_have_text(expected)
        choose(page, "de", "en")  # a glossary of another pair is not offered
        expect(page.locator("#glossary option")).to_have_count(1)
        page.context.close()
    finally:
        httpx.delete(f"{server}/v2/glossaries/{made['glossary_id']}", timeout=DEADLINE)
