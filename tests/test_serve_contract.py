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

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SUBPROCESS_ENV

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient  # noqa: E402
from test_serve import DEADLINE, uvicorn_server  # noqa: E402

import mtkit  # noqa: E402
from mtkit.errors import MtkitError  # noqa: E402
from mtkit.flags import ServeLimits  # noqa: E402
from mtkit.inference.options import Options as DecodingOptions  # noqa: E402
from mtkit.inference.results import Hypothesis, Translation  # noqa: E402
from mtkit.serving.app import create_app, create_models_app  # noqa: E402
from mtkit.serving.languages import run_languages  # noqa: E402
from mtkit.serving.models import ModelSpec  # noqa: E402
from mtkit.serving.pool import ModelPool  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
EXAMPLES = 100  # schemathesis's test cases per operation and phase


@pytest.fixture(scope="module")
def run_dir(toy_run_workdir) -> Path:
    return toy_run_workdir / "run"


@pytest.fixture(scope="module")
def lines(toy_run_workdir) -> list[str]:
    return (toy_run_workdir / "corpus" / "test.en").read_text(encoding="utf-8").splitlines()[:6]


@pytest.fixture(scope="module")
def model(run_dir):
    return mtkit.load(run_dir)


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


# ------------------------------------------------------------------------------------------------ schemathesis
def test_schemathesis_finds_no_failure(tmp_path):
    # every check runs: schemathesis enables them all unless told otherwise (``--checks all`` would also undo the
    # one exception of the file routes below)
    config = tmp_path / "schemathesis.toml"
    config.write_text(
        # over-bound input (more sentences or characters than the schema's maxItems and maxLength) is refused
        # with the documented 413, which schemathesis's list of rejecting statuses lacks
        "[checks.negative_data_rejection]\n"
        'expected-statuses = ["400", "401", "403", "404", "405", "413", "415", "422"]\n'
        # a document's content (a .docx is a zip of XML parts) is more than a schema can say: random bytes in a
        # valid form are refused with a 400, so these two operations are held to every check but this one
        "[[operations]]\n"
        'include-path-regex = "translate_file$"\n'
        "[operations.checks.positive_data_acceptance]\n"
        "enabled = false\n",
        encoding="utf-8",
    )
    limits = ServeLimits(max_sentences=4, max_chars=2000, max_body_bytes=1 << 20, timeout=DEADLINE)
    # two stand-ins, en-de and de-en, loaded on first use: the schema's source, target and model fields, routing
    # and detection are held too
    specs = [
        ModelSpec(name, None, (pair,), named=True, batch_size=16, beam_size=4)
        for name, pair in (("en-de", ("en", "de")), ("de-en", ("de", "en")))
    ]
    pool = ModelPool(specs, load=lambda spec: Upper())
    with uvicorn_server(create_models_app(pool, limits=limits)) as (_server, port):
        command = [sys.executable, "-m", "schemathesis.cli", "--config-file", str(config), "run"]
        command += [f"http://127.0.0.1:{port}/openapi.json", "--max-examples", str(EXAMPLES)]
        command += ["--seed", "1", "--workers", "1", "--no-color", "--generation-database", "none"]
        command += ["--request-timeout", str(DEADLINE)]  # every phase: examples, coverage, fuzzing, stateful
        done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=SUBPROCESS_ENV, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-20000:] + done.stderr[-5000:]


def test_openapi_documents_bodies_and_statuses():
    with TestClient(create_app(Upper(), ("en", "de"), api_key="s3cret")) as client:
        paths = client.get("/openapi.json").json()["paths"]
    for path, statuses in {
        "/translate": {"200", "400", "403", "413", "415", "422", "503", "504"},
        "/translate_file": {"200", "400", "403", "413", "415", "422", "503", "504"},
        "/v1/translate": {"200", "400", "403", "413", "422", "503", "504"},
    }.items():
        responses = paths[path]["post"]["responses"]
        assert set(responses) == statuses, path
        error = responses["400"]["content"]["application/json"]["schema"]
        assert error == {"$ref": "#/components/schemas/ErrorOut"}
    body = paths["/translate"]["post"]["requestBody"]
    assert body["required"] and set(body["content"]) == {"application/json", "application/x-www-form-urlencoded"}
    assert body["content"]["application/json"]["schema"]["required"] == ["q"]
