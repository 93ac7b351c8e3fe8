"""DeepL's API v2 (mtkit/serving/deepl*.py) held by DeepL's own Python client (``deepl``) against a real uvicorn
server of the tiny model of conftest.py: texts, languages, usage and its limit, HTML, documents of every format,
keys, the glossary lifecycle, glossaries kept across a restart and a damaged glossary file refused at start."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
deepl = pytest.importorskip("deepl")
from fastapi.testclient import TestClient  # noqa: E402
from test_serve import uvicorn_server  # noqa: E402

import mtkit  # noqa: E402
from conftest import assert_one_line_error  # noqa: E402
from mtkit.errors import MtkitError  # noqa: E402
from mtkit.flags import ServeLimits  # noqa: E402
from mtkit.serving.app import create_app  # noqa: E402
from mtkit.serving.languages import run_languages  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
KEY = "s3cret:fx"
LIMIT = 20_000  # characters the server translates in all
TERMS = {"tree": "Garten", "Anna": "Anna"}  # tree is always Baum in the toy corpus; a name kept as it is


@pytest.fixture(scope="module")
def glossary_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("glossaries")


def make_app(run_dir, glossary_dir):
    limits = ServeLimits(char_limit=LIMIT, max_file_bytes=200_000)
    return create_app(
        mtkit.load(run_dir), run_languages(run_dir), limits=limits, api_key=KEY, glossary_dir=glossary_dir
    )


@pytest.fixture(scope="module")
def server(run_dir, glossary_dir):
    with uvicorn_server(make_app(run_dir, glossary_dir)) as (_server, port):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def client(server):
    translator = deepl.Translator(KEY, server_url=server)
    yield translator
    translator.close()


def test_one_text_and_a_list(client, model):
    one = client.translate_text("A dog runs in the park .", target_lang="DE")
    assert one.text == model.translate("A dog runs in the park .")
    assert one.detected_source_lang == "EN" and one.billed_characters == len("A dog runs in the park .")
    texts = ["Two cats eat bread .", "The man sits . A woman walks ."]
    many = client.translate_text(texts, source_lang="en", target_lang="de", split_sentences="1")
    assert [r.text for r in many] == model.translate(texts)
    whole = client.translate_text(texts[1], target_lang="DE", split_sentences="0", formality="prefer_less")
    assert whole.text == model.translate(texts[1], split_sentences=False)


def test_hints_pass_and_what_a_client_relies_on_is_refused(client):
    assert client.translate_text("a dog", target_lang="DE", context="a pet", model_type="latency_optimized").text
    for refused in ({"formality": "more"}, {"model_type": "quality_optimized"}):
        with pytest.raises(deepl.DeepLException, match="Bad request.*not supported"):
            client.translate_text("a dog", target_lang="DE", **refused)
    with pytest.raises(deepl.DeepLException, match="Bad request.*target_lang"):
        client.translate_text("a dog", target_lang="FR")


def test_languages_and_pairs(client):
    assert [(lang.code, lang.name) for lang in client.get_source_languages()] == [("EN", "English")]
    assert [lang.code for lang in client.get_target_languages()] == ["DE"]
    pairs = client.get_glossary_languages()
    assert [(p.source_lang, p.target_lang) for p in pairs] == [("en", "de")]


def test_html_tags_kept_and_ignored_tags_left_as_they_are(client, model):
    fragment = "A <b>man</b> sits in the <i>green</i> park ."
    found = client.translate_text(fragment, target_lang="DE", tag_handling="html")
    assert found.text == model.translate(fragment, format="html")
    assert "<b>" in found.text and "</i>" in found.text
    kept = client.translate_text(
        "The dog <x>the cat</x> runs .", target_lang="DE", tag_handling="xml", ignore_tags=["x"]
    ).text
    assert "<x>the cat</x>" in kept and "translate" not in kept


def test_a_wrong_key_is_refused(server):
    wrong = deepl.Translator("wrong", server_url=server)
    try:
        with pytest.raises(deepl.AuthorizationException):
            wrong.translate_text("a dog", target_lang="DE")
        with pytest.raises(deepl.AuthorizationException):
            wrong.list_glossaries()
    finally:
        wrong.close()


def documents() -> dict[str, bytes]:
    """A small document of each format translate-file takes."""
    import docx
    import pptx

    word = docx.Document()
    word.add_paragraph("A man sits in the park .")
    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[5])
    slide.shapes.title.text = "Two dogs play with a ball ."
    saved = {}
    for name, document in (("docx", word), ("pptx", deck)):
        buffer = io.BytesIO()
        document.save(buffer)
        saved[name] = buffer.getvalue()
    xliff = (
        '<?xml version="1.0" encoding="UTF-8"?>\n<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">'
        '<file original="a" source-language="en" target-language="de" datatype="plaintext"><body>'
        '<trans-unit id="1"><source>The cat eats bread .</source></trans-unit></body></file></xliff>\n'
    )
    return {
        "txt": b"A dog runs .\n\nThe red ball .\n",
        "md": b"# The park\n\nA *small* dog runs .\n",
        "html": b"<html><body><p>A <b>man</b> sits .</p></body></html>\n",
        "srt": b"1\n00:00:01,000 --> 00:00:02,000\nA man sits .\n\n",
        "po": b'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\nmsgid "The dog runs ."\nmsgstr ""\n',
        "xliff": xliff.encode(),
        **saved,
    }


def test_a_document_of_each_format_round_trips(client, model, tmp_path):
    for fmt, data in documents().items():
        source = tmp_path / f"doc.{fmt}"
        source.write_bytes(data)
        expected = tmp_path / f"expected.{fmt}"
        model.translate_file(source, expected)
        out = tmp_path / f"out.{fmt}"
        client.translate_document_from_filepath(source, out, target_lang="DE")
        assert members(out.read_bytes()) == members(expected.read_bytes()), fmt


def members(data: bytes):
    """A document's content: an office document's parts (their zip entries' times aside), any other its bytes."""
    import zipfile

    if not data.startswith(b"PK"):
        return data
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return {name: z.read(name) for name in z.namelist()}


def test_glossary_lifecycle(client, model):
    made = client.create_glossary("toy", "EN", "DE", TERMS)
    assert (made.name, made.source_lang, made.target_lang, made.entry_count, made.ready) == ("toy", "EN", "DE", 2, True)
    from_csv = client.create_glossary_from_csv("csv", "EN", "DE", '"tree",Garten\nbread,Brot\n')
    assert from_csv.entry_count == 2
    assert {g.glossary_id for g in client.list_glossaries()} >= {made.glossary_id, from_csv.glossary_id}
    assert client.get_glossary(made.glossary_id).name == "toy"
    assert client.get_glossary_entries(made) == TERMS
    lines = ["A dog sits under the tree .", "Two cats eat bread .", "Anna and the man walk in the park ."]
    plain = model.translate(lines)
    found = [r.text for r in client.translate_text(lines, source_lang="EN", target_lang="DE", glossary=made)]
    assert "Garten" in found[0] and "Garten" not in plain[0] and "Anna" in found[2]
    assert found[1] == plain[1]  # no term: exactly as without the glossary
    assert found == model.translate(lines, glossary=TERMS)
    import requests

    without_source = {"text": lines, "target_lang": "DE", "glossary_id": made.glossary_id}  # the glossary's source
    answer = requests.post(client.server_url + "/v2/translate", json=without_source, headers=client.headers)
    assert [t["text"] for t in answer.json()["translations"]] == found
    client.delete_glossary(from_csv)
    with pytest.raises(deepl.GlossaryNotFoundException):
        client.get_glossary(from_csv.glossary_id)
    with pytest.raises(deepl.GlossaryNotFoundException):
        client.delete_glossary(from_csv.glossary_id)
    with pytest.raises(deepl.DeepLException, match="Not found"):
        client.translate_text(lines[0], source_lang="EN", target_lang="DE", glossary=from_csv.glossary_id)
    for bad in ("tree\tGarten\tx", "tree\t", "a\tb\nA\tc"):
        with pytest.raises(deepl.DeepLException, match="Invalid glossary entries"):
            client._create_glossary("bad", "EN", "DE", "tsv", bad)
    with pytest.raises(deepl.DeepLException, match="language pair"):
        client.create_glossary("back", "DE", "EN", TERMS)


def test_glossaries_survive_a_restart_and_a_damaged_file_is_refused(
    client, run_dir, glossary_dir, model, tmp_path, run_cli, monkeypatch
):
    made = client.create_glossary("kept", "EN", "DE", {"tree": "Garten"})
    with TestClient(make_app(run_dir, glossary_dir)) as again:
        headers = {"Authorization": f"DeepL-Auth-Key {KEY}"}
        info = again.get(f"/v2/glossaries/{made.glossary_id}", headers=headers).json()
        assert info["name"] == "kept" and info["entry_count"] == 1
        body = {"text": ["the tree ."], "source_lang": "EN", "target_lang": "DE", "glossary_id": made.glossary_id}
        answer = again.post("/v2/translate", json=body, headers=headers).json()
        assert answer["translations"][0]["text"] == model.translate("the tree .", glossary={"tree": "Garten"})
    broken = tmp_path / "broken"
    broken.mkdir()
    for name in ("kept.json", f"{made.glossary_id}.json"):
        (broken / name).write_text(json.dumps({"glossary_id": made.glossary_id, "entries": "x"}), encoding="utf-8")
        with pytest.raises(MtkitError, match=f"{name}: a damaged glossary file") as err:
            make_app(run_dir, broken)
        assert "\n" not in str(err.value)
        (broken / name).unlink()
    (broken / "x.json").write_text("{", encoding="utf-8")
    import uvicorn

    monkeypatch.setattr(uvicorn, "run", lambda *a, **k: None)  # a server that started would return at once
    assert_one_line_error(run_cli("serve", run_dir, "--glossary-dir", broken), "x.json: a damaged glossary file")


def assert_message(client, path: str, body, status: int, words: str) -> None:
    """A raw request's answer: DeepL's error body, one line."""
    import requests

    sent = {"json": body} if isinstance(body, dict) else {"data": body}
    answer = requests.post(client.server_url + path, headers=client.headers, timeout=30, **sent)
    assert answer.status_code == status, answer.text
    assert list(answer.json()) == ["message"] and words in answer.json()["message"], answer.text


def test_bad_requests_get_deepls_error_body(client):
    assert_message(client, "/v2/translate", {"target_lang": "DE"}, 400, "'text' not specified")
    assert_message(client, "/v2/translate", {"text": ["a"]}, 400, "'target_lang' not specified")
    assert_message(client, "/v2/translate", {"text": [1], "target_lang": "DE"}, 400, "list of strings")
    assert_message(client, "/v2/translate", {"text": "a", "target_lang": "De"}, 400, "target_lang")
    assert_message(
        client, "/v2/translate", {"text": "a", "target_lang": "DE", "preserve_formatting": "x"}, 400, "0 or 1"
    )
    assert_message(client, "/v2/translate", b"text=a&target_lang=DE&split_sentences=2", 400, "split_sentences")
    assert_message(client, "/v2/translate", {"text": "a", "target_lang": "DE", "tag_handling": "pdf"}, 400, "pdf")
    assert_message(client, "/v2/translate", {"text": "a", "target_lang": "DE", "style_id": "x"}, 400, "style_id")
    assert_message(client, "/v2/glossaries", {"name": "x"}, 400, "'entries' not specified")
    assert_message(client, "/v2/document/0A1B", {"document_key": "x"}, 404, "Document not found")
    assert_message(client, "/v2/nowhere", {}, 404, "Not Found")


def test_usage_counts_and_its_limit_is_456(client):
    before = client.get_usage().character
    assert before.limit == LIMIT and 0 < before.count < LIMIT
    client.translate_text("A cat .", target_lang="DE")
    assert client.get_usage().character.count == before.count + len("A cat .")
    with pytest.raises(deepl.QuotaExceededException):
        client.translate_text("a" * (LIMIT - before.count), target_lang="DE")


def test_the_glossary_through_v1_and_libretranslate(client, model):
    import requests

    made = client.create_glossary("doors", "EN", "DE", TERMS)
    lines = ["A dog sits under the tree .", "Two cats eat bread ."]
    expected = model.translate(lines, glossary=TERMS)
    url, headers = client.server_url, {"X-API-Key": KEY}
    for glossary in (made.glossary_id, TERMS):
        answer = requests.post(f"{url}/v1/translate", json={"text": lines, "glossary": glossary}, headers=headers)
        assert [t["text"] for t in answer.json()["translations"]] == expected, answer.text
    form = {"q": lines, "source": "en", "target": "de", "glossary": made.glossary_id, "api_key": KEY}
    assert requests.post(f"{url}/translate", data=form, timeout=30).json()["translatedText"] == expected
    document = "\n\n".join(lines).encode()
    files = {"file": ("park.txt", document)}
    answer = requests.post(
        f"{url}/v1/translate_file", files=files, data={"glossary": made.glossary_id}, headers=headers
    )
    assert answer.content.decode() == "\n\n".join(expected), answer.text
    out = io.BytesIO()
    client.translate_document(document, out, source_lang="EN", target_lang="DE", glossary=made, filename="park.txt")
    assert out.getvalue().decode() == "\n\n".join(expected)
    for glossary, status, words in (("nope", 404, "no glossary 'nope'"), ({"tree": " "}, 422, "an empty term")):
        answer = requests.post(f"{url}/v1/translate", json={"text": lines, "glossary": glossary}, headers=headers)
        assert answer.status_code == status and words in answer.json()["error"], answer.text


NODE_CLIENT = Path(__file__).resolve().parent / "clients" / "deepl-node"


def test_deepls_node_client(server, model, tmp_path):
    """deepl-node 1.28.0, DeepL's official Node.js client (tests/clients/deepl-node, installed by `make test`):
    texts, HTML, languages, the glossary lifecycle and its use, documents, usage, a wrong key and the limit."""
    import shutil
    import subprocess

    node = shutil.which("node")
    if node is None:
        pytest.skip("no node on PATH: DeepL's Node.js client is not run")
    assert (NODE_CLIENT / "node_modules" / "deepl-node").is_dir(), "run make tool-venvs (it installs deepl-node)"
    sources = {fmt: data for fmt, data in documents().items() if fmt in ("txt", "docx")}
    for fmt, data in sources.items():
        (tmp_path / f"doc.{fmt}").write_bytes(data)
    done = subprocess.run(
        [node, str(NODE_CLIENT / "client.mjs"), server, KEY, str(tmp_path)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout)
    assert found["one"] == {"text": model.translate("A dog runs in the park ."), "detected": "en", "billed": 24}
    assert found["many"] == model.translate(["Two cats eat bread .", "The man sits . A woman walks ."])
    assert found["html"] == model.translate("A <b>man</b> sits in the <i>green</i> park .", format="html")
    assert (found["sources"], found["targets"], found["pairs"]) == (["en"], ["de"], ["en-de"])
    assert found["glossary"] == {"name": "node", "entries": 1, "ready": True} and found["listed"]
    assert found["entries"] == {"tree": "Garten"}
    lines = ["A dog sits under the tree .", "Two cats eat bread ."]
    assert found["withGlossary"] == model.translate(lines, glossary={"tree": "Garten"})
    assert "Garten" in found["withGlossary"][0] and found["withGlossary"][1] == model.translate(lines[1])
    assert found["deleted"] == "GlossaryNotFoundError"
    for fmt in sources:
        assert found[f"doc.{fmt}"] == "done"
        model.translate_file(tmp_path / f"doc.{fmt}", tmp_path / f"expected.{fmt}")
        assert members((tmp_path / f"out.{fmt}").read_bytes()) == members((tmp_path / f"expected.{fmt}").read_bytes())
    assert found["usage"]["limit"] == LIMIT and 0 < found["usage"]["count"] < LIMIT
    assert (found["wrongKey"], found["overLimit"]) == ("AuthorizationError", "QuotaExceededError")


def test_deepl_codes_name_the_models_languages():
    from mtkit.serving.deepl_codes import model_code, source_entries, sources, target_entries, targets

    table = targets(["en", "de", "pt_BR", "zh"])
    assert {code: model_code(code, table) for code in ("EN-US", "en-gb", "EN", "DE", "PT-BR", "ZH-HANT")} == {
        "EN-US": "en",
        "en-gb": "en",
        "EN": "en",
        "DE": "de",
        "PT-BR": "pt_BR",
        "ZH-HANT": "zh",
    }
    assert model_code("En-us", table) is None and model_code("FR", table) is None
    assert [e["language"] for e in target_entries(["en", "de"])] == ["EN-GB", "EN-US", "DE"]
    assert [e["language"] for e in source_entries(["en", "de"])] == ["EN", "DE"]
    assert model_code("EN-GB", sources(["en"])) is None  # a source is named by its language


# DeepL's routes under schemathesis, as test_serve_contract.py runs the others: every check, a request the schema
# accepts is answered 2xx, one it refuses 4xx, every status and body as documented. Two exceptions: a glossary's
# entries (TSV or CSV without duplicates, a pair a model translates) and a document's content are grammars no schema
# states, so a glossary or document the schema accepts may get a 400, which is declared.
DEEPL_REFUSED = """
[[operations]]
include-path-regex = "^/v2/(glossaries|document)$"
[operations.checks.positive_data_acceptance]
expected-statuses = ["2xx", "400", "401", "403", "404", "409", "429", "5xx"]
"""


def deepl_schemathesis(tmp_path, examples: int, *more: str) -> None:
    from test_serve_contract import Upper, run_schemathesis

    from mtkit.serving.app import create_models_app
    from mtkit.serving.models import ModelSpec
    from mtkit.serving.pool import ModelPool

    limits = ServeLimits(max_sentences=4, max_chars=2000, max_body_bytes=1 << 20, timeout=60.0)
    specs = [
        ModelSpec(name, None, (pair,), named=True, batch_size=16, beam_size=4)
        for name, pair in (("en-de", ("en", "de")), ("de-en", ("de", "en")))
    ]
    app = create_models_app(ModelPool(specs, load=lambda spec: Upper()), limits=limits)
    with uvicorn_server(app) as (_server, port):
        args = ("--include-path-regex", "^/v2/", "--checks", "all", "--max-examples", str(examples), *more)
        run_schemathesis(port, tmp_path, DEEPL_REFUSED, *args)


def test_schemathesis_finds_no_failure_on_the_deepl_routes(tmp_path):
    deepl_schemathesis(tmp_path, 5, "--phases", "fuzzing")  # cheap: the slow test below runs every phase


@pytest.mark.slow
def test_schemathesis_finds_no_failure_on_the_deepl_routes_in_every_phase(tmp_path):
    from test_serve_contract import EXAMPLES

    deepl_schemathesis(tmp_path, EXAMPLES)  # 25 a phase in the suite; 100 as test_serve_contract.py says


def test_the_store_is_bounded_and_writes_whole_files(tmp_path, monkeypatch):
    from mtkit.serving.glossary_store import GlossaryLimit, GlossaryStore
    from mtkit.text import glossary as glossary_module
    from mtkit.text.glossary import Glossary

    store = GlossaryStore(tmp_path, most=1)
    kept = store.create(Glossary((("tree", "Garten"),), name="a", source="en", target="de"))
    assert [p.name for p in tmp_path.iterdir()] == [f"{kept.id}.json"]  # no temp file left
    with pytest.raises(GlossaryLimit, match="at most 1 glossaries"):
        store.create(Glossary((("dog", "Hund"),)))
    assert GlossaryStore(tmp_path).get(kept.id) == kept
    assert store.delete(kept.id) and not store.delete(kept.id) and not list(tmp_path.iterdir())
    monkeypatch.setattr(glossary_module, "MAX_BYTES", 20)
    with pytest.raises(MtkitError, match="more than 20 bytes"):
        Glossary.parse("tree\tGarten\ndog\tHund\n")
