"""``mtkit serve``'s LibreTranslate contract, held by LibreTranslate's own clients and by schemathesis.

- deep-translator's ``LibreTranslator`` (its fields in the query string) and ``libretranslatepy`` (a form) get
  exactly ``model.translate``'s text from a real uvicorn server of the toy model.
- ``/translate`` reads its fields from the query string, a form or JSON alike; ``/frontend/settings`` tells the
  server's real limits, formats and languages.
- schemathesis, with every check, finds no request whose answer breaks ``/openapi.json``: a request the schema
  accepts is answered 2xx, one it refuses 4xx, every status and body as documented. It runs against two stand-in
  models (upper-cased "translations", en-de and de-en), as fast as the server around it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SUBPROCESS_ENV

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient  # noqa: E402
from test_serve import DEADLINE, assert_error, uvicorn_server  # noqa: E402

import mtkit  # noqa: E402
from mtkit.errors import MtkitError  # noqa: E402
from mtkit.flags import ServeLimits  # noqa: E402
from mtkit.inference.options import Options as DecodingOptions  # noqa: E402
from mtkit.inference.results import Hypothesis, Translation  # noqa: E402
from mtkit.serving import contract  # noqa: E402
from mtkit.serving.app import create_app, create_models_app  # noqa: E402
from mtkit.serving.languages import run_languages  # noqa: E402
from mtkit.serving.models import ModelSpec  # noqa: E402
from mtkit.serving.pool import ModelPool  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
# schemathesis's test cases per operation and phase: 25 in the suite; the deeper sweep is
# MTKIT_SCHEMATHESIS_EXAMPLES=100 pytest tests/test_serve_contract.py tests/test_deepl.py -k schemathesis
# (its last run: benchmarks/results/2026-11-28-contract/)
EXAMPLES = int(os.environ.get("MTKIT_SCHEMATHESIS_EXAMPLES", "25"))


@pytest.fixture(scope="module")
def lines(toy_run_workdir) -> list[str]:
    return (toy_run_workdir / "corpus" / "test.en").read_text(encoding="utf-8").splitlines()[:6]


@pytest.fixture(scope="module")
def port(run_dir):
    with uvicorn_server(create_app(mtkit.load(run_dir), run_languages(run_dir))) as (_server, port):
        yield port


# ------------------------------------------------------------------------------------ LibreTranslate's clients
def test_deep_translator(port, model, lines):
    from deep_translator import LibreTranslator

    # deep-translator insists on a key and sends it; a server without one lets every request through
    client = LibreTranslator(source="en", target="de", api_key="any", custom_url=f"http://127.0.0.1:{port}/")
    for line in lines[:3]:
        assert client.translate(line) == model.translate(line)
    assert client.translate_batch(lines) == model.translate(lines)


def test_libretranslatepy(port, model, lines):
    from libretranslatepy import LibreTranslateAPI

    client = LibreTranslateAPI(f"http://127.0.0.1:{port}")
    for line in lines[:3]:
        assert client.translate(line, "en", "de", timeout=DEADLINE) == model.translate(line)
    assert client.languages(timeout=DEADLINE) == [
        {"code": "en", "name": "English", "targets": ["de"]},
        {"code": "de", "name": "German", "targets": []},
    ]


# ------------------------------------------------------------------------------------ fields and settings
class Upper:
    """A stand-in model: each line "translates" to its upper case; it refuses what a torch model refuses of the
    options (more hypotheses than its beam, n-best lists of HTML) and follows every instruction."""

    def __init__(self):
        self.options = DecodingOptions(batch_size=16, beam_size=4)

    def options_for(self, *, nbest=None, scores=False, alignments=False, **decoding) -> DecodingOptions:
        return self.options.for_call(nbest=nbest, scores=scores, alignments=alignments, **decoding)

    def check_format(self, fmt: str, options=None) -> None:
        if fmt == "html" and options is not None and options.nbest > 1:
            raise MtkitError("format html gives one translation per line")

    def check(self, line, options=None) -> None:
        pass

    def check_target(self, target) -> None:
        if target not in (None, "de"):
            raise MtkitError(f"unknown target {target!r}; this model translates into de")

    def translate_batch(
        self, lines, nbest=None, scores=True, alignments=False, format="text", split_sentences=None, **decoding
    ):
        texts = [line if isinstance(line, str) else line.text for line in lines]
        hyps = [(Hypothesis(t.upper(), ()),) * (nbest or 1) if t.strip() else () for t in texts]
        return [Translation(t, (), h) for t, h in zip(texts, hyps)]


def test_query_form_and_json_give_the_same_answer():
    with TestClient(create_app(Upper(), ("en", "de"))) as client:
        fields = {"q": "a dog", "source": "en", "target": "de"}
        answers = [
            client.post("/translate", params=fields),
            client.post("/translate", data=fields),
            client.post("/translate", json=fields),
            client.post("/translate", params={"source": "en"}, data={"q": "a dog"}),
            client.post("/translate", params={"q": "not this", "target": "fr"}, json=fields),  # the body's win
        ]
        for response in answers:
            assert response.status_code == 200, response.text
            assert response.json()["translatedText"] == "A DOG"
        many = client.post("/translate", params=[("q", "a"), ("q", "b"), ("target", "de")])
        assert many.json()["translatedText"] == ["A", "B"]
        wrong = client.post("/translate", params={"q": "a", "target": "fr"})
        assert wrong.status_code == 400 and list(wrong.json()) == ["error"]


def test_frontend_settings():
    limits = ServeLimits(max_chars=777)
    with TestClient(create_app(Upper(), ("en", "de"), limits=limits)) as client:
        settings = client.get("/frontend/settings").json()
    assert settings == {
        "charLimit": 777,
        "frontendTimeout": 500,
        "apiKeys": False,
        "keyRequired": False,
        "suggestions": False,
        "filesTranslation": True,
        "supportedFilesFormat": settings["supportedFilesFormat"],
        "language": {"source": {"code": "en", "name": "English"}, "target": {"code": "de", "name": "German"}},
    }
    assert {".txt", ".docx", ".html", ".srt", ".po", ".xliff"} <= set(settings["supportedFilesFormat"])
    with TestClient(create_app(Upper(), ("en", "de"), api_key="s3cret")) as client:
        settings = client.get("/frontend/settings").json()
    assert settings["apiKeys"] and settings["keyRequired"]


# ------------------------------------------------------------------------------------------- bounds and files
def error(response, status: int) -> str:
    """The one-line message of an error ``response`` with ``status``."""
    assert_error(response, status)
    return response.json()["error"]


def test_over_the_schema_bounds_is_a_422_over_the_characters_together_a_413():
    with TestClient(create_app(Upper(), ("en", "de"), limits=ServeLimits(max_sentences=3, max_chars=10))) as client:
        paths = client.get("/openapi.json").json()["paths"]
        post = client.post
        # a text over the schema's maxLength, or more texts than its maxItems: the 422 of a schema violation
        q = paths["/detect"]["post"]["requestBody"]["content"]["application/json"]["schema"]["properties"]["q"]
        assert q["maxLength"] == 10
        assert error(post("/detect", data={"q": "a" * 11}), 422) == "q: 11 characters; at most 10 per text"
        assert error(post("/translate", json={"q": "a" * 11}), 422) == "q: 11 characters; at most 10 per text"
        assert (
            error(post("/translate", json={"q": ["a", "b" * 11]}), 422)
            == "q item 2: 11 characters; at most 10 per text"
        )
        assert error(post("/translate", data={"q": ["a"] * 4}), 422) == "q: 4 texts; at most 3 in one request"
        assert error(post("/v1/translate", json={"text": "a" * 11}), 422) == (
            "text item 1: 11 characters; at most 10 per text"
        )
        segment = {"text": "a", "constraints": ["b" * 11]}
        assert error(post("/v1/translate", json={"text": [segment]}), 422) == (
            "text item 1: 11 characters; at most 10 per text"
        )
        unused = {"text": "a", "prefix": [None, "p" * 11]}  # an entry past the last sentence is bounded too
        assert error(post("/v1/translate", json=unused), 422) == "prefix: 11 characters; at most 10 per text"
        # within the schema, over the characters of all texts together (no JSON Schema sums lengths): 413, declared
        assert error(post("/translate", json={"q": ["a" * 6, "b" * 6]}), 413) == (
            "12 characters in one request; at most 10"
        )
        assert error(post("/v1/translate", json={"text": ["a" * 6, "b" * 6]}), 413) == (
            "12 characters in one request; at most 10"
        )
        for path in ("/translate", "/v1/translate", "/detect"):  # /detect: the body's bytes
            assert "413" in paths[path]["post"]["responses"], path


def test_the_default_body_limit_leaves_a_text_over_the_bound_to_its_route():
    limits = ServeLimits()
    assert limits.max_body_bytes >= contract.text_bytes(limits)
    q = "\U0001f600" * (limits.max_chars + 1)  # 12 bytes a character in a form: the longest a character takes
    with TestClient(create_app(Upper(), ("en", "de"))) as client:
        assert error(client.post("/detect", data={"q": q}), 422) == "q: 100001 characters; at most 100000 per text"
        assert error(client.post("/detect", json={"q": "a" * (limits.max_body_bytes + 1)}), 413) == (
            f"the request body is larger than {limits.max_body_bytes} bytes"
        )


def test_a_file_of_another_format_is_a_415_naming_the_formats():
    png = b"\x89PNG\r\n\x1a\n" + bytes(24)
    endings = ", ".join(contract.file_endings())
    with TestClient(create_app(Upper(), ("en", "de"))) as client:
        paths = client.get("/openapi.json").json()["paths"]
        for path in ("/translate_file", "/v1/translate_file"):
            response = client.post(path, files={"file": ("photo.png", png, "image/png")})
            assert error(response, 415) == (
                f"photo.png is not a document this server translates: send a file whose name ends in {endings}, or"
                " name its format in the format field (one of txt, md, html, docx, pptx, srt, po, xliff)"
            )
            response = client.post(path, files={"file": ("photo.png", png, "image/png")}, data={"format": "png"})
            assert error(response, 415) == (
                "format 'png' is not a document format; use one of txt, md, html, docx, pptx, srt, po, xliff"
            )
            operation = paths[path]["post"]
            assert "415" in operation["responses"], path
            form = operation["requestBody"]["content"]["multipart/form-data"]["schema"]
            assert endings in form["properties"]["file"]["description"]
        named = client.post("/v1/translate_file", files={"file": ("notes", b"a dog")}, data={"format": "txt"})
        assert named.status_code == 200 and named.content == b"A DOG"


# ------------------------------------------------------------------------------------------------ schemathesis
# The one exception every run makes: a document's content (a .docx is a zip of XML parts) and a binary's format are
# more than a schema can say, so a file the schema accepts may be refused; the file's description names the
# formats, and the 400 and 415 it gets are declared. Every other check holds the file routes too.
DOCUMENTS_REFUSED = """
[[operations]]
include-path-regex = "translate_file$"
[operations.checks.positive_data_acceptance]
expected-statuses = ["2xx", "400", "401", "403", "404", "409", "415", "429", "5xx"]
"""


def run_schemathesis(port: int, tmp_path: Path, config: str, *args: str) -> None:
    """schemathesis, every check, EXAMPLES cases per operation and phase, against the server on ``port``."""
    (tmp_path / "schemathesis.toml").write_text(config, encoding="utf-8")
    command = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(tmp_path / "schemathesis.toml"), "run"]
    command += [f"http://127.0.0.1:{port}/openapi.json", "--max-examples", str(EXAMPLES), *args]
    if "--include-path-regex" not in args:  # DeepL's routes: tests/test_deepl.py runs them with their own exceptions
        command += ["--exclude-path-regex", "^/v2/"]
    command += ["--seed", "1", "--workers", "1", "--no-color", "--generation-database", "none"]
    command += ["--request-timeout", str(DEADLINE)]  # every phase: examples, coverage, fuzzing, stateful
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=SUBPROCESS_ENV, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-20000:] + done.stderr[-5000:]


def test_schemathesis_finds_no_failure(tmp_path):
    # over-bound input (more sentences or characters than the schema's maxItems and maxLength) breaks the schema
    # and gets a 422, as schemathesis expects of every request that breaks it
    limits = ServeLimits(max_sentences=4, max_chars=2000, max_body_bytes=1 << 20, timeout=DEADLINE)
    # two stand-ins, en-de and de-en, loaded on first use: the schema's source, target and model fields, routing
    # and detection are held too
    specs = [
        ModelSpec(name, None, (pair,), named=True, batch_size=16, beam_size=4)
        for name, pair in (("en-de", ("en", "de")), ("de-en", ("de", "en")))
    ]
    pool = ModelPool(specs, load=lambda spec: Upper())
    with uvicorn_server(create_models_app(pool, limits=limits)) as (_server, port):
        run_schemathesis(port, tmp_path, DOCUMENTS_REFUSED)


@pytest.mark.slow
def test_schemathesis_finds_no_failure_in_a_model_server(port, tmp_path):
    # the toy model served as `mtkit serve` serves a run, with its default limits, and every check named: the
    # schema's bounds, formats and languages held against a real model. One more exception: whether a model can
    # follow an instruction (a constraint in characters its target vocabulary lacks, a prefix and constraints longer
    # than it writes, a constraint holding an avoided phrase) depends on its vocabulary, which no schema can say;
    # the 422 it gets is declared ("instructions the model cannot follow")
    instructions = """
[[operations]]
include-path = "/v1/translate"
[operations.checks.positive_data_acceptance]
expected-statuses = ["2xx", "401", "403", "404", "409", "422", "429", "5xx"]
"""
    run_schemathesis(port, tmp_path, DOCUMENTS_REFUSED + instructions, "--checks", "all")


def test_openapi_documents_bodies_and_statuses():
    with TestClient(create_app(Upper(), ("en", "de"), api_key="s3cret")) as client:
        paths = client.get("/openapi.json").json()["paths"]
    for path, statuses in {
        "/translate": {"200", "400", "403", "404", "413", "415", "422", "503", "504"},  # 404: a glossary's id
        "/translate_file": {"200", "400", "403", "413", "415", "422", "503", "504"},
        "/v1/translate": {"200", "400", "403", "404", "413", "422", "503", "504"},
    }.items():
        responses = paths[path]["post"]["responses"]
        assert set(responses) == statuses, path
        error = responses["400"]["content"]["application/json"]["schema"]
        assert error == {"$ref": "#/components/schemas/ErrorOut"}
    body = paths["/translate"]["post"]["requestBody"]
    assert body["required"] and set(body["content"]) == {"application/json", "application/x-www-form-urlencoded"}
    assert body["content"]["application/json"]["schema"]["required"] == ["q"]
