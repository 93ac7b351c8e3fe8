"""``mtkit serve``'s HTTP API (mtkit/serving/) on the tiny Transformer of conftest.py's ``toy_run_workdir``.

- ``POST /v1/translate`` and LibreTranslate's ``POST /translate`` give what ``model.translate`` gives for the
  same lines (the same code path: compared exactly), n-best lists and scores as ``translate_batch``'s.
- Concurrent requests get their own answers in order, and the batcher puts their sentences in one batch.
- Bounds and bad input answer with a JSON ``{"error": ...}`` and the right status, never a 500: body size,
  sentences and characters per request, invalid JSON or form, wrong types, a full queue, a timeout, API keys.
- A real uvicorn server on 127.0.0.1 answers the ``libretranslatepy`` client.
Models that must block (queue full, timeout) are stand-ins; no test asserts a timing. The batcher's own tests are in
test_serving_batcher.py, the service's (admission, timeout, disconnect) in test_serving_service.py.
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import SUBPROCESS_ENV, free_port

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient  # noqa: E402

import mtkit  # noqa: E402
from mtkit.flags import ServeLimits  # noqa: E402
from mtkit.inference.options import Options as DecodingOptions  # noqa: E402
from mtkit.inference.results import Hypothesis, Translation  # noqa: E402
from mtkit.serving.app import create_app  # noqa: E402
from mtkit.serving.languages import run_languages  # noqa: E402
from mtkit.serving.threads import model_thread  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
DEADLINE = 60.0  # seconds any wait in these tests may take before it fails


@pytest.fixture(scope="module")
def lines(toy_run_workdir) -> list[str]:
    test = (toy_run_workdir / "corpus" / "test.en").read_text(encoding="utf-8").splitlines()
    return test[:10] + ["", "  "]


@pytest.fixture(scope="module")
def client(run_dir):
    app = create_app(mtkit.load(run_dir), run_languages(run_dir))
    with TestClient(app) as c:
        yield c


def wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.01)


def assert_error(response, status: int, *words: str) -> None:
    assert response.status_code == status, (response.status_code, response.text)
    body = response.json()
    assert list(body) == ["error"] and isinstance(body["error"], str) and "\n" not in body["error"], body
    for word in words:
        assert word in body["error"], (word, body)


class Gated:
    """A model whose first ``translate_batch`` call waits for ``gate``: the other requests queue up meanwhile.
    Without ``inner`` it "translates" a line to its upper case."""

    def __init__(self, inner=None, batch_size: int = 16, gate_every_call: bool = False):
        self.inner, self.gate, self.started = inner, threading.Event(), threading.Event()
        self.options = inner.options if inner else DecodingOptions(batch_size=batch_size, beam_size=4)
        self.gate_every_call, self.calls = gate_every_call, 0
        self.translated: list = []  # every line asked for, in order

    def options_for(self, **call) -> DecodingOptions:
        return self.options.replace(**call)

    def check_format(self, fmt: str, options=None) -> None:
        pass

    def check(self, line, options=None) -> None:
        pass

    def translate_batch(self, lines, nbest=None, scores=True, alignments=False, format="text", split_sentences=None):
        self.calls += 1
        self.translated += list(lines)
        self.started.set()
        if self.calls == 1 or self.gate_every_call:
            assert self.gate.wait(DEADLINE)
        if self.inner is not None:
            return self.inner.translate_batch(lines, nbest=nbest, scores=scores, alignments=alignments)
        texts = [getattr(x, "text", x) for x in lines]  # a Segment carries its text
        return [Translation(x, (), (Hypothesis(x.upper(), ()),) if x.strip() else ()) for x in texts]


# ------------------------------------------------------------------------------------------ translations
def test_v1_translate_equals_model_translate(client, model, lines):
    response = client.post("/v1/translate", json={"text": lines})
    assert response.status_code == 200, response.text
    assert response.json() == {"translations": [{"text": t} for t in model.translate(lines)]}
    one = client.post("/v1/translate", json={"text": lines[0]}).json()
    assert one == {"translations": [{"text": model.translate(lines[0])}]}
    assert client.post("/v1/translate", json={"text": []}).json() == {"translations": []}


def test_v1_translate_nbest_and_scores(client, model, lines):
    response = client.post("/v1/translate", json={"text": lines[:4], "options": {"nbest": 2, "scores": True}})
    assert response.status_code == 200, response.text
    expected = model.translate_batch(lines[:4], nbest=2, scores=True)
    got = response.json()["translations"]
    assert [t["text"] for t in got] == [t.text for t in expected]
    for out, translation in zip(got, expected):
        assert [
            (h["text"], h["score"], h["log_prob"], tuple(h["tokens"]), tuple(h["token_log_probs"]))
            for h in out["hypotheses"]
        ] == [(h.text, h.score, h.log_prob, h.tokens, h.token_log_probs) for h in translation.hypotheses]
        assert len(out["hypotheses"]) == 2 and "source_tokens" not in out and "alignment" not in out["hypotheses"][0]
    assert_error(
        client.post("/v1/translate", json={"text": "a", "options": {"nbest": 40}}), 422, "larger than beam_size"
    )


def test_v1_translate_alignments(client, model, lines):
    response = client.post("/v1/translate", json={"text": lines[:3] + [""], "options": {"alignments": True}})
    assert response.status_code == 200, response.text
    got = response.json()["translations"]
    expected = model.translate_batch(lines[:3] + [""], scores=False, alignments=True)
    for out, translation in zip(got[:3], expected):
        assert tuple(out["source_tokens"]) == translation.source_tokens
        (hyp,) = out["hypotheses"]
        assert tuple(hyp["tokens"]) == translation.best.tokens and "score" not in hyp
        rows = hyp["alignment"]
        assert len(rows) == len(hyp["tokens"]) + 1 and all(len(r) == len(out["source_tokens"]) + 1 for r in rows)
        assert rows == [list(r) for r in translation.best.alignment]
    assert got[3] == {"text": "", "source_tokens": [], "hypotheses": [], "sentences": []}


def test_libretranslate_translate_and_languages(client, model, lines):
    expected = model.translate(lines[:3])
    form = client.post("/translate", data={"q": lines[0], "source": "en", "target": "de", "format": "text"})
    assert form.status_code == 200 and form.json()["translatedText"] == model.translate(lines[0])
    as_json = client.post("/translate", json={"q": lines[:3], "source": "auto", "target": "de"})
    assert as_json.json()["translatedText"] == expected
    repeated = client.post("/translate", data={"q": lines[:3], "source": "en", "target": "de"})
    assert repeated.json()["translatedText"] == expected
    assert client.get("/languages").json() == [
        {"code": "en", "name": "English", "targets": ["de"]},
        {"code": "de", "name": "German", "targets": []},
    ]
    assert_error(client.post("/translate", data={"q": "a", "source": "de", "target": "en"}), 400, "en to de only")
    assert_error(client.post("/translate", data={"q": "a", "source": "en", "target": "fr"}), 400, "en to de only")
    assert_error(client.post("/translate", data={"q": "a", "target": "de", "format": "pdf"}), 400, "format 'pdf'")


def test_health_schema_and_metrics(client):
    assert client.get("/health").status_code == 200
    schema = client.get("/openapi.json").json()
    assert "/v1/translate" in schema["paths"] and "TranslateRequest" in schema["components"]["schemas"]
    client.post("/v1/translate", json={"text": ["a b", "c"]})
    metrics = client.get("/metrics")
    assert metrics.status_code == 200 and metrics.headers["content-type"].startswith("text/plain")
    for name in ("mtkit_requests_total", "mtkit_responses_total", "mtkit_request_seconds_bucket"):
        assert name in metrics.text, name
    assert "mtkit_batch_sentences_count" in metrics.text and "mtkit_queue_sentences" in metrics.text
    client.get("/no/such/path")
    assert 'path="other"' in client.get("/metrics").text and "/no/such/path" not in client.get("/metrics").text


def test_concurrent_requests_share_batches_and_get_their_own_answers(run_dir, model, lines):
    gated = Gated(mtkit.load(run_dir))
    app = create_app(gated, ("en", "de"), limits=ServeLimits(max_wait=0.05))
    groups = [lines[0:1], lines[1:4], lines[4:7], lines[7:10] + lines[10:]]
    answers: dict[int, list] = {}
    with TestClient(app) as client:

        def post(i: int) -> None:
            answers[i] = client.post("/v1/translate", json={"text": groups[i]}).json()

        threads = [threading.Thread(target=post, args=(i,)) for i in range(len(groups))]
        threads[0].start()
        wait_until(gated.started.is_set, "the first batch")
        waiting = 0
        for group, t in zip(groups[1:], threads[1:]):  # one at a time: the queue holds them in this order
            t.start()
            waiting += len(group)
            wait_until(lambda: app.state.batcher.depth == waiting, "a request to queue")  # noqa: B023
        gated.gate.set()
        for t in threads:
            t.join(DEADLINE)
        stats = app.state.batcher.stats
    # the same batches as model.translate gets: the first request alone, then the others in one call
    merged = model.translate([line for group in groups[1:] for line in group])
    expected = [model.translate(groups[0])]
    for group in groups[1:]:
        expected.append(merged[: len(group)])
        merged = merged[len(group) :]
    for i in range(len(groups)):
        assert answers[i] == {"translations": [{"text": t} for t in expected[i]]}, i
    assert stats.largest_batch == waiting > max(len(g) for g in groups)  # sentences of 3 requests in one batch
    assert stats.sentences == sum(len(g) for g in groups)


def test_the_model_translates_on_the_thread_it_was_loaded_on():
    executor = model_thread()
    loaded_on = executor.submit(threading.get_ident).result(DEADLINE)
    seen = []

    class Recording(Gated):
        def translate_batch(self, lines, **kwargs):
            seen.append(threading.get_ident())
            return super().translate_batch(lines, **kwargs)

    model = Recording()
    model.gate.set()
    with TestClient(create_app(model, ("en", "de"), executor=executor)) as client:
        for text in ("a", "b"):
            assert client.post("/v1/translate", json={"text": text}).json() == {
                "translations": [{"text": text.upper()}]
            }
    executor.shutdown()
    assert seen == [loaded_on, loaded_on] and loaded_on != threading.get_ident()


# ------------------------------------------------------------------------------------ bounds and bad input
def test_bounds_and_bad_input_are_json_errors():
    app = create_app(_Instant(), ("en", "de"), limits=ServeLimits(max_body_bytes=2000, max_sentences=5, max_chars=100))
    with TestClient(app) as client:
        post = client.post
        assert_error(post("/v1/translate", content=b'{"text": "' + b"a" * 3000 + b'"}'), 413, "2000 bytes")
        # over the schema's maxItems or maxLength: the 422 of a schema violation; over the characters of all texts
        # together, which no schema states: 413
        assert_error(post("/v1/translate", json={"text": ["a"] * 6}), 422, "text: 6 texts; at most 5 in one request")
        assert_error(post("/v1/translate", json={"text": "a" * 101}), 422, "text item 1: 101 characters; at most 100")
        assert_error(post("/v1/translate", json={"text": ["a" * 60] * 2}), 413, "120 characters in one request")
        assert_error(post("/translate", data={"q": ["a"] * 6, "target": "de"}), 422, "q: 6 texts; at most 5")
        bad_json = post("/v1/translate", content=b'{"text": ', headers={"content-type": "application/json"})
        assert_error(bad_json, 400, "JSON")
        assert_error(post("/translate", content=b"{", headers={"content-type": "application/json"}), 400, "JSON")
        assert_error(
            post("/v1/translate", content=b'{"text": "a"}', headers={"content-type": "text/plain"}), 422, "JSON object"
        )
        assert_error(post("/v1/translate", json={"text": 3}), 422, "text")
        assert_error(post("/v1/translate", json={"text": ["a", None]}), 422, "text")
        assert_error(post("/v1/translate", json={"text": "a", "options": {"nbest": "2"}}), 422, "nbest")
        assert_error(post("/v1/translate", json={"text": "a", "options": {"nbest": 0}}), 422, "nbest")
        assert_error(post("/v1/translate", json={"text": "a", "extra": 1}), 422, "extra")
        assert_error(post("/v1/translate", json=["a"]), 422)
        assert_error(post("/translate", json={"q": 3, "target": "de"}), 422, "q must be")
        assert_error(post("/translate", json={"q": "a", "target": ["de"]}), 422, "target")
        assert_error(post("/translate", json=["a"]), 422, "object")
        assert_error(post("/translate", data={"source": "en"}), 400, "missing q")
        assert_error(post("/translate", content=b"q=a", headers={"content-type": "text/plain"}), 415)
        assert_error(client.get("/nowhere"), 404)
        assert_error(client.get("/v1/translate"), 405)
        assert client.post("/v1/translate", json={"text": ["ab", ""]}).json() == {
            "translations": [{"text": "AB"}, {"text": ""}]
        }
        metrics = client.get("/metrics").text  # the body limit's 413 counted too
        for status in ("400", "404", "405", "413", "415", "422"):
            assert f'mtkit_responses_total{{status="{status}"}}' in metrics, status


def test_json_nested_too_deeply_is_400():
    deep = b"[" * 100_000 + b"]" * 100_000  # deeper than Python's parser goes, within the default body limit
    with TestClient(create_app(_Instant(), ("en", "de"))) as client:
        for path in ("/v1/translate", "/translate"):
            assert_error(client.post(path, content=deep, headers={"content-type": "application/json"}), 400)


def test_full_queue_is_503_with_retry_after():
    gated = Gated(gate_every_call=True)
    app = create_app(gated, ("en", "de"), limits=ServeLimits(queue_size=1, max_wait=0))
    with TestClient(app) as client:
        first = threading.Thread(target=client.post, args=("/v1/translate",), kwargs={"json": {"text": "a"}})
        first.start()
        wait_until(gated.started.is_set, "the first batch")  # the worker holds it: the queue is empty again
        second = threading.Thread(target=client.post, args=("/v1/translate",), kwargs={"json": {"text": "b"}})
        second.start()
        wait_until(lambda: app.state.batcher.depth == 1, "the second request to queue")
        assert client.get("/health").status_code == 200  # while the worker decodes
        full = client.post("/v1/translate", json={"text": "c"})
        assert_error(full, 503, "queue is full")
        assert full.headers["retry-after"] == "1"
        assert_error(client.post("/translate", data={"q": "c", "target": "de"}), 503, "queue is full")
        gated.gate.set()
        first.join(DEADLINE)
        second.join(DEADLINE)
        assert client.post("/v1/translate", json={"text": "d"}).json() == {"translations": [{"text": "D"}]}


def test_timeout_is_504_and_drops_the_queued_sentences():
    gated = Gated(batch_size=1)
    app = create_app(gated, ("en", "de"), limits=ServeLimits(timeout=0.2, max_wait=0))
    with TestClient(app) as client:
        assert_error(client.post("/v1/translate", json={"text": ["a", "b"]}), 504, "no translation within")
        stats = app.state.batcher.stats
        assert stats.dropped == 1 and app.state.batcher.depth == 0  # "a" was translating, "b" waited
        gated.gate.set()
        wait_until(lambda: stats.batches == 1, "the first batch to end")
        assert client.post("/v1/translate", json={"text": "c"}).json() == {"translations": [{"text": "C"}]}


def test_api_key_and_cors():
    ok = {"translations": [{"text": "A"}]}
    app = create_app(_Instant(), ("en", "de"), api_key="s3cret", cors_origins=("http://example.org",))
    with TestClient(app) as client:
        assert_error(client.post("/v1/translate", json={"text": "a"}), 403, "API key")
        assert_error(client.post("/v1/translate", json={"text": 3}), 403, "API key")  # the key comes first
        assert_error(client.post("/v1/translate", json={"text": "a"}, headers={"X-API-Key": "wrong"}), 403)
        assert_error(client.post("/translate", data={"q": "a", "target": "de"}), 403, "API key")
        assert_error(client.post("/translate", data={"q": "a", "target": "de", "api_key": "s3cre"}), 403)
        assert client.post("/v1/translate", json={"text": "a"}, headers={"X-API-Key": "s3cret"}).json() == ok
        bearer = {"Authorization": "Bearer s3cret", "Origin": "http://example.org"}
        response = client.post("/v1/translate", json={"text": "a"}, headers=bearer)
        assert response.json() == ok
        assert response.headers["access-control-allow-origin"] == "http://example.org"
        form = client.post("/translate", data={"q": "a", "target": "de", "api_key": "s3cret"})
        assert form.json()["translatedText"] == "A"
        assert client.get("/languages").status_code == 200 and client.get("/health").status_code == 200
    plain = create_app(_Instant(), ("en", "de"))
    with TestClient(plain) as client:
        response = client.post("/v1/translate", json={"text": "a"}, headers={"Origin": "http://example.org"})
        assert response.status_code == 200 and "access-control-allow-origin" not in response.headers


class _Instant(Gated):
    def __init__(self):
        super().__init__()
        self.gate.set()


# ----------------------------------------------------------------------------- a real server, a real client
@contextlib.contextmanager
def uvicorn_server(app, timeout_graceful_shutdown=None):
    """A real uvicorn server of ``app`` on a free port of 127.0.0.1, in a thread; yields (server, port)."""
    import uvicorn

    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=timeout_graceful_shutdown
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: server.started or not thread.is_alive(), "uvicorn to start")
        assert server.started
        yield server, port
    finally:
        server.should_exit = True
        thread.join(DEADLINE)
    assert not thread.is_alive()


def test_uvicorn_server_answers_the_libretranslate_client(run_dir, model, lines):
    from libretranslatepy import LibreTranslateAPI

    with uvicorn_server(create_app(mtkit.load(run_dir), run_languages(run_dir))) as (_server, port):
        client = LibreTranslateAPI(f"http://127.0.0.1:{port}")
        for line in lines[:3]:
            assert client.translate(line, "en", "de", timeout=DEADLINE) == model.translate(line)
        assert client.languages(timeout=DEADLINE) == [
            {"code": "en", "name": "English", "targets": ["de"]},
            {"code": "de", "name": "German", "targets": []},
        ]
        with pytest.raises(urllib.error.HTTPError) as err:
            client.translate("a", "fr", "de", timeout=DEADLINE)
        assert err.value.code == 400


def post_json(port: int, body: dict) -> tuple[int, dict]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/translate", json.dumps(body).encode(), {"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=DEADLINE) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def test_a_client_that_disconnects_takes_its_sentences_out_of_the_queue():
    gated = Gated(batch_size=1)
    app = create_app(gated, ("en", "de"), limits=ServeLimits(max_wait=0))
    with uvicorn_server(app) as (_server, port):
        first = threading.Thread(target=post_json, args=(port, {"text": "a"}))
        first.start()
        wait_until(gated.started.is_set, "the first batch")  # the worker holds "a"
        body = json.dumps({"text": ["b", "c"]}).encode()
        with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as leaving:
            leaving.sendall(
                b"POST /v1/translate HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\n\r\n%s" % (len(body), body)
            )
            wait_until(lambda: app.state.batcher.depth == 2, "the second request to queue")
        wait_until(lambda: app.state.batcher.stats.dropped == 2, "the queue to drop the sentences of the gone client")
        assert app.state.batcher.depth == 0
        gated.gate.set()
        first.join(DEADLINE)
        assert post_json(port, {"text": "d"}) == (200, {"translations": [{"text": "D"}]})
    assert gated.translated == ["a", "d"]  # "b" and "c" were never translated


class LogSeen(logging.Handler):
    """Sets ``seen`` once a record of ``logger`` contains ``text``; the logger logs at INFO meanwhile."""

    def __init__(self, logger: str, text: str):
        super().__init__()
        self.logger, self.text, self.seen = logging.getLogger(logger), text, threading.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.seen.set()

    def __enter__(self) -> LogSeen:
        self.logger_level = self.logger.level
        self.logger.setLevel(logging.INFO)
        self.logger.addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        self.logger.removeHandler(self)
        self.logger.setLevel(self.logger_level)


def test_stopping_finishes_the_requests_in_flight():
    gated = Gated(batch_size=1)
    answers = []
    with uvicorn_server(create_app(gated, ("en", "de")), timeout_graceful_shutdown=DEADLINE) as (server, port):
        first = threading.Thread(target=lambda: answers.append(post_json(port, {"text": "a"})))
        first.start()
        wait_until(gated.started.is_set, "the first batch")
        with LogSeen("uvicorn.error", "Waiting for connections to close") as waiting:
            server.should_exit = True  # what SIGTERM and Ctrl-C set
            # the shutdown has stopped accepting and now waits for the request in flight
            assert waiting.seen.wait(DEADLINE), "gave up waiting for the shutdown"
        gated.gate.set()
        first.join(DEADLINE)
    assert answers == [(200, {"translations": [{"text": "A"}]})]


def test_cli_serve(run_cli, tmp_path):
    result = run_cli("serve", tmp_path / "no-such-run")
    assert result.code == 2 and "no such run directory" in result.err, result.err
    assert len(result.err.strip().splitlines()) == 1
    for flag in ("--queue-size", "--max-chars", "--max-body-bytes", "--max-sentences"):
        result = run_cli("serve", tmp_path, flag, "0")
        assert result.code == 2 and flag in result.err and len(result.err.strip().splitlines()) == 1, result.err
    for flag in ("--max-wait-ms", "--max-delay-ms"):
        result = run_cli("serve", tmp_path, flag, "-1")
        assert result.code == 2 and flag in result.err and len(result.err.strip().splitlines()) == 1, result.err


# ------------------------------------------------------------------------------ fuzzing and a clean stop
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
BODIES = st.one_of(
    JSON_VALUES.map(lambda v: ("json", v)),
    st.fixed_dictionaries(
        {},
        optional={
            "text": JSON_VALUES | st.text(max_size=30) | st.lists(st.text(max_size=30), max_size=6),
            "options": st.fixed_dictionaries(
                {}, optional={"nbest": JSON_VALUES, "scores": JSON_VALUES, "alignments": JSON_VALUES}
            ),
            "q": JSON_VALUES,
            "source": JSON_VALUES,
            "target": st.sampled_from(["de", "en", "", "auto"]) | JSON_VALUES,
        },
    ).map(lambda v: ("json", v)),
    st.binary(max_size=200).map(lambda v: ("bytes", v)),
)


@pytest.fixture(scope="module")
def fuzz_client():
    app = create_app(_Instant(), ("en", "de"), limits=ServeLimits(max_body_bytes=300, max_sentences=4, max_chars=60))
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=BODIES, path=st.sampled_from(["/v1/translate", "/translate"]), form=st.booleans())
def test_fuzzed_bodies_never_get_a_5xx(fuzz_client, body, path, form):
    kind, value = body
    if kind == "bytes":
        kind_header = "application/x-www-form-urlencoded" if form else "application/json"
        response = fuzz_client.post(path, content=value, headers={"content-type": kind_header})
    elif form and isinstance(value, dict) and path == "/translate":
        response = fuzz_client.post(path, data={k: v for k, v in value.items() if isinstance(v, str)})
    else:
        response = fuzz_client.post(path, json=value)
    assert response.status_code < 500, (response.status_code, response.text)
    if response.status_code >= 400:
        assert list(response.json()) == ["error"], response.text


@pytest.mark.parametrize("stop, log", [(signal.SIGTERM, False), (signal.SIGINT, True)])
def test_a_signal_stops_the_server_cleanly(run_dir, stop, log):
    port = free_port()
    cmd = [sys.executable, "-m", "mtkit", "serve", str(run_dir), "--port", str(port), "--threads", "1"]
    cmd += ["--access-log"] if log else []
    process = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=SUBPROCESS_ENV)
    try:

        def up() -> bool:
            assert process.poll() is None, process.communicate(timeout=DEADLINE)[0]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as response:
                    return response.status == 200
            except OSError:
                return False

        wait_until(up, "mtkit serve to answer")
        process.send_signal(stop)
        output = process.communicate(timeout=DEADLINE)[0]
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=DEADLINE)
    assert process.returncode == 0, output
    assert "Application shutdown complete" in output and "Traceback" not in output, output
    assert ('"GET /health HTTP/1.1" 200' in output) == log, output  # the access log only with --access-log
