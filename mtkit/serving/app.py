"""``mtkit serve``: an HTTP translation server over the Python API (FastAPI under uvicorn).

Endpoints: ``POST /v1/translate`` (JSON, schema at ``/openapi.json``), the LibreTranslate-compatible
``POST /translate`` and ``GET /languages``, ``GET /health`` and ``GET /metrics`` (Prometheus text). Sentences of
concurrent requests are translated together by one worker thread (``batcher.Batcher``). Every error is a JSON
body ``{"error": "one readable message"}``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import math
import signal
import time
from pathlib import Path
from typing import Annotated, Any, Optional, Union

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, StrictInt, StrictStr
from starlette.exceptions import HTTPException

from mtkit.config import ServeLimits
from mtkit.errors import MtkitError
from mtkit.inference.segments import Segment, with_parallel
from mtkit.serving.batcher import Batcher, QueueFull, model_thread

LANGUAGE_NAMES = {
    "ar": "Arabic", "cs": "Czech", "de": "German", "en": "English", "es": "Spanish", "fi": "Finnish",
    "fr": "French", "it": "Italian", "ja": "Japanese", "nl": "Dutch", "pl": "Polish", "pt": "Portuguese",
    "ro": "Romanian", "ru": "Russian", "tr": "Turkish", "uk": "Ukrainian", "zh": "Chinese",
}  # fmt: skip


ROUTES = ("/v1/translate", "/translate", "/languages", "/health", "/metrics", "/openapi.json", "/docs")


class ApiError(Exception):
    def __init__(self, status: int, message: str, headers: Optional[dict] = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid")
    nbest: Optional[StrictInt] = Field(None, ge=1, description="Hypotheses per sentence, best first.")
    scores: StrictBool = Field(
        False, description="Give each hypothesis its score, log-probability, subwords and their log-probabilities."
    )
    alignments: StrictBool = Field(
        False, description="Give each hypothesis its cross-attention: a row per target subword and EOS (torch engine)."
    )


class SegmentIn(BaseModel):
    """A sentence with its decoding instructions (docs/decoding.md)."""

    model_config = ConfigDict(extra="forbid")
    text: StrictStr = Field(..., description="The sentence to translate.")
    prefix: Optional[StrictStr] = Field(None, description="The translation starts with this text.")
    constraints: list[StrictStr] = Field([], description="Phrases the translation must contain.")
    avoid: list[StrictStr] = Field([], description="Phrases the translation must not contain.")


def _items(value: Any) -> Any:
    """A sentence or an object alone is a list of one; a sentence is an object with only ``text``."""
    if isinstance(value, (str, dict)):
        value = [value]
    return [{"text": x} if isinstance(x, str) else x for x in value] if isinstance(value, list) else value


Sentences = Annotated[
    list[SegmentIn], BeforeValidator(_items, json_schema_input_type=Union[str, SegmentIn, list[Union[str, SegmentIn]]])
]


class TranslateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: Sentences = Field(
        ..., description="A sentence or a list of sentences; each a string or an object with its instructions."
    )
    prefix: Optional[list[Optional[StrictStr]]] = Field(None, description="One prefix (or null) per sentence.")
    constraints: Optional[list[Optional[list[StrictStr]]]] = Field(
        None, description="One list of phrases to include (or null) per sentence."
    )
    avoid: Optional[list[Optional[list[StrictStr]]]] = Field(
        None, description="One list of phrases to avoid (or null) per sentence."
    )
    options: Options = Field(default_factory=Options)


class HypothesisOut(BaseModel):
    text: str
    score: Optional[float] = None
    log_prob: Optional[float] = None
    tokens: Optional[list[str]] = None
    token_log_probs: Optional[list[float]] = Field(None, description="One per subword, the last for EOS.")
    alignment: Optional[list[list[float]]] = Field(None, description="Rows: target subwords and EOS; columns: source.")


class TranslationOut(BaseModel):
    text: str = Field(..., description="The best translation.")
    source_tokens: Optional[list[str]] = Field(None, description="With options.alignments: the source subwords.")
    hypotheses: Optional[list[HypothesisOut]] = Field(
        None, description="With options.nbest, options.scores or options.alignments."
    )


class TranslateResponse(BaseModel):
    translations: list[TranslationOut]


def run_languages(path: Path) -> tuple[str, str]:
    """(source, target) language codes of a run dir, checkpoint or export dir (its config's data section)."""
    from mtkit import checkpoint as ckpt
    from mtkit import config as cfgmod
    from mtkit.interop import ct2_export as ct2

    path = Path(path)
    if ct2.is_export_dir(path):
        tree = ct2.read_export(path)[0]["config"]
    else:
        tree = ckpt.read_metadata(ckpt.resolve(path))["config"]
    data = cfgmod.from_dict(tree, str(path)).data
    return data.src_lang, data.tgt_lang


def create_app(
    model,
    languages: tuple[str, str],
    *,
    limits: ServeLimits = ServeLimits(),
    api_key: Optional[str] = None,
    cors_origins: tuple[str, ...] = (),
    executor=None,
) -> FastAPI:
    """The app serving ``model`` (anything with ``translate_batch`` and ``options.batch_size``, used by one
    thread: ``executor``'s, the one it was loaded on (``batcher.model_thread``), or the batcher's own); the batcher
    starts and stops with the app's lifespan."""
    src, tgt = languages
    registry = CollectorRegistry()
    requests_total = Counter("mtkit_requests", "HTTP requests", ["path"], registry=registry)
    responses_total = Counter("mtkit_responses", "HTTP responses by status", ["status"], registry=registry)
    latency = Histogram("mtkit_request_seconds", "Request latency", ["path"], registry=registry)
    batch_sizes = Histogram(
        "mtkit_batch_sentences", "Sentences per batch", buckets=(1, 2, 4, 8, 16, 32, 64, 128), registry=registry
    )

    def translate(lines: list, key: tuple) -> list:
        nbest, scores, alignments = key
        return model.translate_batch(lines, nbest=nbest, scores=scores, alignments=alignments)

    batcher = Batcher(
        translate,
        model.options.batch_size,
        limits.max_wait,
        limits.queue_size,
        on_batch=batch_sizes.observe,
        executor=executor,
        max_delay=limits.max_delay,
    )
    Gauge("mtkit_queue_sentences", "Sentences waiting to be translated", registry=registry).set_function(
        lambda: batcher.depth
    )
    Gauge("mtkit_model_busy_seconds", "Seconds the model has spent translating", registry=registry).set_function(
        lambda: batcher.stats.busy
    )

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        batcher.start()
        try:
            yield
        finally:
            batcher.stop()

    # FastAPI's own OpenTelemetry hooks off: /metrics has the server's figures, and looking up the global
    # providers cost each request about 0.1 ms of the event loop, on the cores that decode
    telemetry = {"tracing": False, "metrics": False, "logs": False, "operation_spans": False}
    app = FastAPI(title="mtkit", summary="Machine translation over HTTP", lifespan=lifespan, telemetry=telemetry)
    app.state.batcher = batcher
    # the last added runs first: metrics see every response, CORS headers reach the 413s too
    app.add_middleware(BodyLimit, limit=limits.max_body_bytes)
    if cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(cors_origins), allow_methods=["GET", "POST"])
    app.add_middleware(Observe, requests=requests_total, responses=responses_total, latency=latency)

    @app.exception_handler(ApiError)
    async def _api_error(_request, err: ApiError):
        return error_response(err.status, err.message, err.headers)

    @app.exception_handler(HTTPException)
    async def _http_error(_request, err: HTTPException):
        return error_response(err.status_code, str(err.detail), getattr(err, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request, err: RequestValidationError):
        problems = err.errors()
        if any(p.get("type") == "json_invalid" for p in problems):
            return error_response(400, "the body is not valid JSON")
        return error_response(422, "; ".join(describe(p) for p in problems[:5]))

    @app.exception_handler(Exception)
    async def _internal(_request, err: Exception):
        return error_response(500, f"internal error: {type(err).__name__}")

    def check_key(given: Optional[str]) -> None:
        if api_key is None:
            return
        if not given or not hmac.compare_digest(given.encode(), api_key.encode()):
            raise ApiError(403, "a valid API key is required (api_key, or the X-API-Key header)")

    def header_key(request: Request) -> Optional[str]:
        auth = request.headers.get("authorization", "")
        return request.headers.get("x-api-key") or (auth[7:] if auth.lower().startswith("bearer ") else None)

    async def run(
        request: Request, lines: list, nbest: Optional[int] = None, scores: bool = False, alignments: bool = False
    ) -> list:
        """The results of ``lines`` (str, or ``Segment`` with instructions, each checked here: a bad one is a 422),
        translated by the batcher; their sentences leave the queue when the request times out (504) or its client
        disconnects."""
        most = min(limits.max_sentences, limits.queue_size)
        if len(lines) > most:
            raise ApiError(413, f"{len(lines)} sentences in one request; at most {most}")
        chars = sum(_chars(line) for line in lines)
        if chars > limits.max_chars:
            raise ApiError(413, f"{chars} characters in one request; at most {limits.max_chars}")
        for i, line in enumerate(lines):
            if isinstance(line, Segment):
                try:
                    model.check(line)
                except MtkitError as err:
                    raise ApiError(422, f"text item {i + 1}: {err}") from None
        beam = getattr(model.options, "beam_size", None)
        if nbest is not None and beam is not None and nbest > beam and not getattr(model.options, "sampling", False):
            raise ApiError(422, f"options.nbest {nbest} is larger than the beam size {beam}")
        if alignments and not getattr(getattr(model, "engine", None), "attention", True):
            raise ApiError(422, "options.alignments needs the torch engine (this server runs CTranslate2)")
        try:
            items = batcher.submit(lines, (nbest, scores, alignments))
        except QueueFull as err:
            raise ApiError(503, str(err), {"Retry-After": "1"}) from None
        results = asyncio.gather(*[asyncio.wrap_future(item.future) for item in items])
        gone = asyncio.ensure_future(client_gone(request))
        try:
            done, _ = await asyncio.wait({results, gone}, timeout=limits.timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if results not in done:
            batcher.drop(items)
            results.cancel()
            if gone in done:  # nobody reads the answer; the status is for the logs and /metrics
                raise ApiError(499, "the client closed the connection before its translations were ready")
            raise ApiError(504, f"no translation within {limits.timeout:g} s; retry later or send fewer sentences")
        try:
            return results.result()
        except QueueFull as err:
            raise ApiError(503, str(err), {"Retry-After": "1"}) from None
        except (MtkitError, ValueError, TypeError) as err:
            raise ApiError(422, str(err)) from None

    @app.get("/health")
    async def health() -> dict:
        """200 once the model is loaded and the batcher runs."""
        return {"status": "ok", "queue": batcher.depth}

    async def require_key(request: Request) -> None:  # a dependency: checked before the body is validated
        check_key(header_key(request))  # (async: FastAPI would run a plain function on a worker thread)

    @app.post(
        "/v1/translate",
        response_model=TranslateResponse,
        response_model_exclude_none=True,
        dependencies=[Depends(require_key)],
    )
    async def v1_translate(body: TranslateRequest, request: Request) -> TranslateResponse:
        """Translate a sentence or a list of sentences: one translation per sentence, in order. A sentence may carry
        instructions: a prefix its translation starts with, phrases it must contain (constraints) or avoid; in the
        sentence's object or in the parallel lists ``prefix``, ``constraints``, ``avoid``."""
        try:
            segments = with_parallel(
                [x.model_dump() for x in body.text], body.prefix, body.constraints, body.avoid, "text item"
            )
        except MtkitError as err:
            raise ApiError(422, str(err)) from None
        lines = [s.text if s.plain else s for s in segments]  # plain sentences as the plain strings they are
        o = body.options
        results = await run(request, lines, o.nbest, o.scores, o.alignments)
        return TranslateResponse(translations=[translation_out(r, o) for r in results])

    @app.get("/languages")
    async def languages_() -> list[dict]:
        """LibreTranslate's language list: the one pair this model translates."""
        return [
            {"code": src, "name": LANGUAGE_NAMES.get(src, src), "targets": [tgt]},
            {"code": tgt, "name": LANGUAGE_NAMES.get(tgt, tgt), "targets": []},
        ]

    @app.post("/translate")
    async def libre_translate(request: Request) -> dict:
        """LibreTranslate's translate: form-encoded or JSON; q a string or a list -> translatedText likewise."""
        fields = await read_fields(request)
        check_key(fields.get("api_key") if isinstance(fields.get("api_key"), str) else header_key(request))
        q = fields.get("q")
        if q is None:
            raise ApiError(400, "missing q (the text to translate)")
        if not (isinstance(q, str) or (isinstance(q, list) and all(isinstance(x, str) for x in q))):
            raise ApiError(422, "q must be a string or a list of strings")
        for name in ("source", "target", "format"):
            if not isinstance(fields.get(name, ""), str):
                raise ApiError(422, f"{name} must be a string")
        source, target = fields.get("source") or "auto", fields.get("target") or tgt
        if source not in (src, "auto") or target != tgt:
            raise ApiError(400, f"this server translates {src} to {tgt} only, not {source} to {target}")
        if fields.get("format", "text") not in ("text", ""):
            raise ApiError(400, f"format {fields['format']!r} is not supported; use text")
        results = await run(request, [q] if isinstance(q, str) else q)
        texts = [r.text for r in results]
        return {"translatedText": texts[0] if isinstance(q, str) else texts}

    @app.get("/metrics", include_in_schema=False)
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    return app


def _chars(line) -> int:
    if isinstance(line, Segment):
        return len(line.text) + len(line.prefix or "") + sum(map(len, line.constraints + line.avoid))
    return len(line)


def translation_out(result, options: Options) -> TranslationOut:
    if options.nbest is None and not options.scores and not options.alignments:
        return TranslationOut(text=result.text)
    hyps = [
        HypothesisOut(
            text=h.text,
            score=h.score,
            log_prob=h.log_prob,
            tokens=list(h.tokens) if options.scores or options.alignments else None,
            token_log_probs=h.token_log_probs,
            alignment=h.alignment,
        )
        for h in result.hypotheses
    ]
    source_tokens = list(result.source_tokens) if options.alignments else None
    return TranslationOut(text=result.text, source_tokens=source_tokens, hypotheses=hyps)


async def client_gone(request: Request) -> None:
    """Returns once the client has disconnected (the body has been read: what is left to receive is that)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def describe(problem: dict) -> str:
    if tuple(problem.get("loc", ())) == ("body",):
        return "the body must be a JSON object (Content-Type: application/json)"
    where = ".".join(str(x) for x in problem.get("loc", ()) if x != "body") or "body"
    return f"{where}: {problem.get('msg', 'invalid')}"


def error_response(status: int, message: str, headers: Optional[dict] = None) -> JSONResponse:
    return JSONResponse({"error": " ".join(message.split())}, status_code=status, headers=headers)


async def read_fields(request: Request) -> dict:
    """A LibreTranslate request's fields: a JSON object, or form fields (a repeated q becomes a list)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind == "application/json":
        try:
            fields = json.loads(await request.body())
        except (ValueError, RecursionError):  # RecursionError: nested too deeply for the parser
            raise ApiError(400, "the body is not valid JSON") from None
        if not isinstance(fields, dict):
            raise ApiError(422, "the JSON body must be an object")
        return fields
    if kind in ("application/x-www-form-urlencoded", "multipart/form-data", ""):
        try:
            form = await request.form()
        except Exception:  # a malformed form: python-multipart and starlette raise several kinds
            raise ApiError(400, "the body is not a valid form") from None
        fields = {key: form.getlist(key) for key in form.keys()}
        if any(not isinstance(v, str) for values in fields.values() for v in values):
            raise ApiError(422, "form fields must be text, not files")
        return {key: values if key == "q" and len(values) > 1 else values[0] for key, values in fields.items()}
    raise ApiError(415, f"unsupported content type {kind!r}; send JSON or a form")


class Observe:
    """ASGI middleware counting requests by path, responses by status and latency by path for /metrics (a plain
    ASGI wrapper: Starlette's ``BaseHTTPMiddleware`` costs each request more)."""

    def __init__(self, app, requests: Counter, responses: Counter, latency: Histogram):
        self.app, self.requests, self.responses, self.latency = app, requests, responses, latency

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope["path"] if scope["path"] in ROUTES else "other"  # bounded label values
        self.requests.labels(path).inc()
        start, status = time.perf_counter(), 500  # 500 unless a response starts

        async def sending(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self.latency.labels(path).observe(time.perf_counter() - start)
            self.responses.labels(str(status)).inc()


class BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes gets a 413 before any route reads it."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers", ())).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            return await self._too_large(scope, receive, send)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                return await self._too_large(scope, receive, send)
            if not message.get("more_body"):
                break
        body, given = b"".join(chunks), False

        async def replay():
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, scope, receive, send):
        response = error_response(413, f"the request body is larger than {self.limit} bytes")
        await response(scope, receive, send)


def serve_main(
    run: Path,
    *,
    host: str,
    port: int,
    api_key: Optional[str],
    cors_origins: list[str],
    limits: ServeLimits,
    engine: str,
    overrides: dict,
    access_log: bool = False,
) -> None:
    """Load the model, then serve it until Ctrl-C or SIGTERM: uvicorn stops accepting, finishes the requests in
    flight (for at most the request timeout), and the process exits 0."""
    import uvicorn

    from mtkit.inference.api import load

    executor = model_thread()  # the model is loaded and run on this one thread
    model = executor.submit(load, run, engine=engine, **overrides).result()
    app = create_app(
        model,
        run_languages(run),
        limits=limits,
        api_key=api_key or None,
        cors_origins=tuple(cors_origins),
        executor=executor,
    )
    # uvicorn handles both signals while it runs, then raises the one it stopped on again for the handlers it
    # found; with these, a stop it has completed ends the process normally instead of killing it by that signal
    stops = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in stops}
    try:
        uvicorn.run(
            app,
            host=host,
            port=port,
            log_level="info",
            access_log=access_log,
            timeout_graceful_shutdown=math.ceil(limits.timeout),
        )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        executor.shutdown(wait=False)
