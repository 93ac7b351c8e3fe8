"""``mtkit serve``'s FastAPI app: its routes, over a ``dispatch.Dispatcher`` and a ``service.TranslationService``.

Endpoints: ``POST /v1/translate`` (JSON, schema at ``/openapi.json``), ``GET /v1/models``, the
LibreTranslate-compatible ``POST /translate``, ``POST /detect``, ``GET /languages``, ``GET /frontend/settings`` and
``POST /translate_file``, ``POST /v1/translate_file`` (documents), ``GET /health``, ``GET /metrics`` (Prometheus
text) and ``GET /``, a web page over these routes (``page``). Each request goes to the models its languages route it
to (``routing.Router``); sentences of concurrent requests are translated together by one worker thread
(``batcher.Batcher``), which also loads the models (``pool.ModelPool``). Every error is a JSON body
``{"error": "one readable message"}``.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional

from fastapi import Depends, FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import PlainTextResponse

from mtkit.errors import MtkitError
from mtkit.flags import ServeLimits
from mtkit.inference.segments import Segment
from mtkit.serving import contract, deepl_documents, deepl_glossaries, documents, libretranslate, page, v1_schema
from mtkit.serving import deepl as deepl_routes
from mtkit.serving.answers import DetectedLanguageOut, LegOut, ModelsOut, TranslateResponse, translation_out
from mtkit.serving.auth import ApiKey
from mtkit.serving.dispatch import AUTO, Dispatcher
from mtkit.serving.errors import ApiError, add_error_handlers, error_responses
from mtkit.serving.glossary_store import GlossaryStore
from mtkit.serving.metrics import CONTENT_TYPE, Metrics
from mtkit.serving.middleware import BodyLimit, Observe
from mtkit.serving.pool import ModelPool
from mtkit.serving.routing import Router
from mtkit.serving.schemas import TranslateRequest, options_model
from mtkit.serving.service import TranslationService, client_gone


def create_app(
    model,
    languages: tuple[str, str],
    *,
    limits: ServeLimits = ServeLimits(),
    api_key: Optional[str] = None,
    cors_origins: tuple[str, ...] = (),
    executor=None,
    glossary_dir: Optional[Path] = None,
) -> FastAPI:
    """The app serving one loaded ``model``; its batcher starts and stops with the app's lifespan.

    Args:
        model: anything with ``translate_batch``, ``check`` and ``options.batch_size``. One thread uses it:
            ``executor``'s, or the batcher's own.
        languages: the (source, target) codes the model translates (a multilingual model: into its targets).
        limits: the server's bounds.
        api_key: the key every translate request must give; None for none.
        cors_origins: the origins browsers may call from.
        executor: the one-thread executor the model was loaded on (``threads.model_thread``), or None.
        glossary_dir: the folder the glossaries are kept in (``glossary_store``), or None for memory only.

    Returns:
        The app; ``app.state.batcher`` is its batcher.
    """
    pool = ModelPool.single(model, languages)
    return create_models_app(
        pool, limits=limits, api_key=api_key, cors_origins=cors_origins, executor=executor, glossary_dir=glossary_dir
    )


def create_models_app(
    pool: ModelPool,
    *,
    limits: ServeLimits = ServeLimits(),
    api_key: Optional[str] = None,
    cors_origins: tuple[str, ...] = (),
    executor=None,
    algorithms: Optional[list[str]] = None,
    glossary_dir: Optional[Path] = None,
) -> FastAPI:
    """The app serving the models of ``pool``, each request routed by its languages (``routing.Router``).

    Args:
        pool: the models; they load on first use unless already loaded.
        limits: the server's bounds.
        api_key: the key every translate request must give; None for none.
        cors_origins: the origins browsers may call from.
        executor: the one-thread executor models are loaded and run on (``threads.model_thread``), several of
            them to run different models at once, or None.
        algorithms: the decoding algorithms a request may choose, each with its options
            (``schemas.options_model``; default: every registered one).
        glossary_dir: the folder the glossaries are kept in (``glossary_store``), or None for memory only.

    Returns:
        The app; ``app.state.batcher`` is its batcher, ``app.state.pool`` its pool, ``app.state.glossaries`` its
        glossaries.

    Raises:
        MtkitError: two models serve one pair and one of them has no name (``routing.Router``); a damaged glossary
            file in ``glossary_dir``.
    """
    glossaries = GlossaryStore(glossary_dir)
    router = Router(list(pool.specs.values()))
    # the request's schema made now, from the decoding algorithms registered now
    translate_request = TranslateRequest.with_options(options_model(algorithms, limits.max_hypotheses))
    metrics = Metrics()
    count = metrics.model_requests
    service = TranslationService(
        pool, limits, executor=executor, on_batch=metrics.batch, on_request=lambda name: count.labels(name).inc()
    )
    metrics.watch(service.batcher, pool)
    dispatcher = Dispatcher(service, router)
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
    app.state.batcher, app.state.pool, app.state.glossaries = service.batcher, pool, glossaries
    # the last added runs first: metrics see every response, CORS headers reach the 413s too
    room = limits.max_file_bytes + (64 << 10)  # the document and its multipart framing
    larger = {path: max(room, limits.max_body_bytes) for path in (*documents.FILE_ROUTES, deepl_documents.ROUTE)}
    app.add_middleware(BodyLimit, limit=limits.max_body_bytes, larger=larger)
    if cors_origins:
        app.add_middleware(CORSMiddleware, allow_origins=list(cors_origins), allow_methods=["GET", "POST"])
    app.add_middleware(Observe, metrics=metrics)
    add_error_handlers(app)
    show_routes = len(pool.specs) > 1

    @app.get("/health")
    async def health() -> dict:
        """200 once the batcher runs."""
        return {"status": "ok", "queue": service.batcher.depth}

    @app.get("/v1/models", response_model=ModelsOut)
    async def v1_models() -> dict:
        """The server's models: each one's name, path, engine, the pairs it serves, whether it is in memory, and
        why its last load failed."""
        return {"models": pool.status()}

    async def v1_translate(body, request: Request) -> TranslateResponse:
        """Translate a sentence or a list of sentences: one translation per sentence, in order. A sentence may carry
        instructions: a prefix its translation starts with, phrases it must contain (constraints) or avoid; in the
        sentence's object or in the parallel lists ``prefix``, ``constraints``, ``avoid``. With source ``auto``
        each sentence's language is detected and each goes its own route."""
        contract.check_request(body, limits)  # the schema's maxItems and maxLength: 422, as every schema violation
        try:
            lines = body.lines()
        except MtkitError as err:
            raise ApiError(422, str(err)) from None
        if body.options.format == "html" and body.instructed():
            raise ApiError(422, "format html takes plain texts: prefix, constraints and avoid apply to plain text")
        if body.options.format == "html" and (body.options.nbest or 1) > 1:  # refused with no text too
            raise ApiError(
                422, f"format html gives one translation per line; nbest must be 1, not {body.options.nbest}"
            )
        for code in (body.target, None if body.source in AUTO else body.source):  # checked with no text too
            if code is not None:
                router.check_language(code)
        router.check_model(body.model)
        own = [line.target if isinstance(line, Segment) else None for line in lines]
        for code in own:
            if code is not None:
                router.check_language(code)
        targets = [code if code is not None else body.target for code in own]
        glossary = glossaries.resolve(body.glossary, body.source, body.target)
        results, plan = await dispatcher.run(
            lines, body.source, targets, body.options, lambda: client_gone(request), model=body.model, glossary=glossary
        )
        out = []
        for i, (result, route) in enumerate(zip(results, plan.routes)):
            translation = translation_out(result, body.options, pivot=len(route) > 1)
            if show_routes or len(route) > 1:
                translation.route = [LegOut(model=leg.model, source=leg.source, target=leg.target) for leg in route]
            if plan.detected is not None:
                translation.detected_language = DetectedLanguageOut(**plan.detected[i])
            out.append(translation)
        return TranslateResponse(translations=out)

    v1_translate.__annotations__["body"] = translate_request  # a class made here, not a name to look up
    app.post(
        "/v1/translate",
        response_model=TranslateResponse,
        response_model_exclude_none=True,
        dependencies=[Depends(key.require)],  # the key is checked before the body is validated
        responses=error_responses(400, *((403,) if api_key is not None else ()), 404, 413, 422, 503, 504),
    )(v1_translate)

    libretranslate.add_routes(app, dispatcher, key, glossaries)
    documents.add_routes(app, dispatcher, key, store, glossaries)
    page.add_routes(app)
    deepl = deepl_routes.DeepL(dispatcher, key, glossaries, deepl_routes.Usage(limits.char_limit))
    for routes in (deepl_routes, deepl_glossaries, deepl_documents):
        routes.add_routes(app, deepl)

    @app.get("/metrics", include_in_schema=False)
    async def metrics_() -> PlainTextResponse:
        return PlainTextResponse(metrics.text(), media_type=CONTENT_TYPE)

    fastapi_document = app.openapi

    def openapi() -> dict:  # FastAPI's document, with this server's bounds, languages and models
        if app.openapi_schema is None:
            beam_size, html, alignments, runs = _abilities(pool)
            v1_schema.tighten(
                fastapi_document(),
                limits,
                list(router.targets),
                beam_size,
                html,
                alignments,
                sources=list(router.sources),
                models={name: spec.directions for name, spec in pool.specs.items()},
                algorithms=runs,
            )
        return app.openapi_schema

    app.openapi = openapi
    return app


def _abilities(pool: ModelPool) -> tuple[int, bool, bool, dict[str, int]]:
    """What requests may ask of the pool's models: the most hypotheses per sentence (0: no bound), HTML, alignments,
    and the algorithms every model runs with the most hypotheses under each (``v1_schema.most_hypotheses``); a loaded
    model tells for itself, the others by their specs."""
    beams, html, alignments, runs = [], False, False, []
    for name, spec in pool.specs.items():
        model = pool.resident(name)
        if model is None:
            beams.append(spec.beam_size)
            html, alignments = html or spec.html, alignments or spec.alignments
            runs.append(dict(spec.algorithms))
            continue
        options = model.options
        beams.append(options.most_hypotheses)
        html = html or _works(model.check_format, "html")
        alignments = alignments or _works(model.options_for, alignments=True)
        runs.append(v1_schema.most_hypotheses(options))
    every = {
        name: 0 if any(r[name] == 0 for r in runs) else max(r[name] for r in runs)
        for name in (runs[0] if runs else {})
        if all(name in r for r in runs)
    }
    return (0 if 0 in beams else max(beams)), html, alignments, every


def _works(call, *args, **kwargs) -> bool:
    """Whether ``call`` returns rather than raising ``MtkitError``: what the model can do."""
    try:
        call(*args, **kwargs)
    except MtkitError:
        return False
    return True
