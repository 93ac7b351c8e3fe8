"""``mtkit serve``'s FastAPI app: its routes, over a ``service.TranslationService``.

Endpoints: ``POST /v1/translate`` (JSON, schema at ``/openapi.json``), the LibreTranslate-compatible
``POST /translate``, ``GET /languages``, ``GET /frontend/settings`` and ``POST /translate_file``,
``POST /v1/translate_file`` (documents), ``GET /health`` and ``GET /metrics`` (Prometheus text). Sentences of
concurrent requests are translated together by one worker thread (``batcher.Batcher``). Every error is a JSON
body ``{"error": "one readable message"}``.
"""

from __future__ import annotations

import contextlib
from typing import Optional

from fastapi import Depends, FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import PlainTextResponse

from mtkit.errors import MtkitError
from mtkit.flags import ServeLimits
from mtkit.serving import contract, documents, libretranslate
from mtkit.serving.auth import ApiKey
from mtkit.serving.errors import ApiError, add_error_handlers, error_responses
from mtkit.serving.metrics import CONTENT_TYPE, Metrics
from mtkit.serving.middleware import BodyLimit, Observe
from mtkit.serving.schemas import TranslateRequest, TranslateResponse, translation_out
from mtkit.serving.service import TranslationService, client_gone


def create_app(
    model,
    languages: tuple[str, str],
    *,
    limits: ServeLimits = ServeLimits(),
    api_key: Optional[str] = None,
    cors_origins: tuple[str, ...] = (),
    executor=None,
) -> FastAPI:
    """The app serving ``model``; its batcher starts and stops with the app's lifespan.

    Args:
        model: anything with ``translate_batch``, ``check`` and ``options.batch_size``. One thread uses it:
            ``executor``'s, or the batcher's own.
        languages: the (source, target) codes the model translates.
        limits: the server's bounds.
        api_key: the key every translate request must give; None for none.
        cors_origins: the origins browsers may call from.
        executor: the one-thread executor the model was loaded on (``batcher.model_thread``), or None.

    Returns:
        The app; ``app.state.batcher`` is its batcher.
    """
    metrics = Metrics()
    service = TranslationService(model, limits, executor=executor, on_batch=metrics.batch_sentences.observe)
    metrics.watch(service.batcher)
    key = ApiKey(api_key)
    store = documents.Store()

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        service.start()
        try:
            yield
        finally:
            service.stop()
            store.close()

    # FastAPI's own OpenTelemetry hooks off: /metrics has the server's figures, and looking up the global
    # providers costs each request time on the event loop, on the cores that decode
    telemetry = {"tracing": False, "metrics": False, "logs": False, "operation_spans": False}
    app = FastAPI(title="mtkit", summary="Machine translation over HTTP", lifespan=lifespan, telemetry=telemetry)
    app.state.batcher = service.batcher
    # the last added runs first: metrics see every response, CORS headers reach the 413s too
    room = limits.max_file_bytes + (64 << 10)  # the document and its multipart framing
    larger = {path: max(room, limits.max_body_bytes) for path in documents.FILE_ROUTES}
    app.add_middleware(BodyLimit, limit=limits.max_body_bytes, larger=larger)
    if cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(cors_origins), allow_methods=["GET", "POST"])
    app.add_middleware(Observe, metrics=metrics)
    add_error_handlers(app)

    @app.get("/health")
    async def health() -> dict:
        """200 once the model is loaded and the batcher runs."""
        return {"status": "ok", "queue": service.batcher.depth}

    @app.post(
        "/v1/translate",
        response_model=TranslateResponse,
        response_model_exclude_none=True,
        dependencies=[Depends(key.require)],  # the key is checked before the body is validated
        responses=error_responses(400, *((403,) if api_key is not None else ()), 413, 422, 503, 504),
    )
    async def v1_translate(body: TranslateRequest, request: Request) -> TranslateResponse:
        """Translate a sentence or a list of sentences: one translation per sentence, in order. A sentence may carry
        instructions: a prefix its translation starts with, phrases it must contain (constraints) or avoid; in the
        sentence's object or in the parallel lists ``prefix``, ``constraints``, ``avoid``."""
        try:
            lines = body.lines()
        except MtkitError as err:
            raise ApiError(422, str(err)) from None
        if body.options.format == "html" and body.instructed():
            raise ApiError(422, "format html takes plain texts: prefix, constraints and avoid apply to plain text")
        check_target = getattr(model, "check_target", None)
        if body.target is not None and check_target is not None:  # checked with no text to translate too
            try:
                check_target(body.target)
            except MtkitError as err:
                raise ApiError(400, str(err)) from None
        results = await service.translate(lines, body.options, disconnected=lambda: client_gone(request))
        return TranslateResponse(translations=[translation_out(r, body.options) for r in results])

    libretranslate.add_routes(app, service, languages, key)
    documents.add_routes(app, service, languages, key, store)

    @app.get("/metrics", include_in_schema=False)
    async def metrics_() -> PlainTextResponse:
        return PlainTextResponse(metrics.text(), media_type=CONTENT_TYPE)

    fastapi_document = app.openapi
    targets = list(getattr(model, "targets", ()) or [languages[1]])
    options = model.options
    beam_size = 0 if getattr(options, "sampling", False) else getattr(options, "beam_size", 0)
    html, alignments = _works(model.check_format, "html"), _works(model.options_for, alignments=True)

    def openapi() -> dict:  # FastAPI's document, with this server's bounds, languages and model
        if app.openapi_schema is None:
            contract.tighten(fastapi_document(), limits, targets, beam_size, html, alignments)
        return app.openapi_schema

    app.openapi = openapi
    return app


def _works(call, *args, **kwargs) -> bool:
    """Whether ``call`` returns rather than raising ``MtkitError``: what the model can do."""
    try:
        call(*args, **kwargs)
    except MtkitError:
        return False
    return True
