"""LibreTranslate's API for its clients: ``POST /translate``, ``POST /detect``, ``GET /languages`` and
``GET /frontend/settings``.

As LibreTranslate, a request's fields come from a JSON body, a form or the query string (deep-translator sends
them there); where both have a field, the body's wins.
"""

from __future__ import annotations

import json
from typing import Union

from fastapi import FastAPI, Request

from mtkit.serving import contract
from mtkit.serving.auth import ApiKey
from mtkit.serving.detection import text_to_detect
from mtkit.serving.dispatch import Dispatcher
from mtkit.serving.errors import ApiError, error_responses
from mtkit.serving.glossary_store import GlossaryStore
from mtkit.serving.routing import Router
from mtkit.serving.schemas import RequestOptions
from mtkit.serving.service import client_gone
from mtkit.text.names import language_name


def _fields(pairs: dict[str, list]) -> dict:
    """Fields from their values: a repeated q is a list, any other field its first value."""
    return {key: values if key == "q" and len(values) > 1 else values[0] for key, values in pairs.items()}


def query_fields(request: Request) -> dict:
    """The fields of the query string (a repeated q becomes a list)."""
    query = request.query_params
    return _fields({key: query.getlist(key) for key in query.keys()})


async def read_fields(request: Request) -> dict:
    """A LibreTranslate request's fields: those of the query string, under those of a JSON object or a form (a
    repeated q becomes a list).

    Raises:
        ApiError: 400 for a body that does not parse, 415 for another content type, 422 for a JSON body that is not
            an object or a form with files.
    """
    return {**query_fields(request), **await _body_fields(request)}


async def _body_fields(request: Request) -> dict:
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
        # a field may take the whole body, which the body limit bounds (starlette's own bound, 1 MiB a field, would
        # refuse a text within --max-chars whose characters take more percent-encoded)
        whole = len(await request.body())
        try:
            form = await request.form(max_part_size=max(whole, 1))
        except Exception:  # a malformed form: python-multipart and starlette raise several kinds
            raise ApiError(400, "the body is not a valid form") from None
        fields = {key: form.getlist(key) for key in form.keys()}
        if any(not isinstance(v, str) for values in fields.values() for v in values):
            raise ApiError(422, "form fields must be text, not files")
        return _fields(fields)
    raise ApiError(415, f"unsupported content type {kind!r}; send JSON or a form")


def text_to_translate(fields: dict, router: Router) -> tuple[Union[str, list[str]], str, str, str]:
    """The ``q``, ``format``, source and target of a translate request whose fields name languages this server
    knows.

    Args:
        fields: the request's fields (``read_fields``).
        router: the server's routes.

    Returns:
        ``q`` (a string, or a list of strings), the format (``text`` or ``html``), the source (a code or ``auto``)
        and the target language.

    Raises:
        ApiError: 400 without ``q``, without a target where the server writes several languages, for a language it
            does not know or a format other than text and html; 422 for a field of the wrong type.
    """
    q = fields.get("q")
    if q is None:
        raise ApiError(400, "missing q (the text to translate)")
    if not (isinstance(q, str) or (isinstance(q, list) and all(isinstance(x, str) for x in q))):
        raise ApiError(422, "q must be a string or a list of strings")
    for name in ("source", "target", "format", "api_key"):
        if not isinstance(fields.get(name, ""), str):
            raise ApiError(422, f"{name} must be a string")
    source, target = languages_of(fields, router)
    fmt = fields.get("format") or "text"
    if fmt not in ("text", "html"):
        raise ApiError(400, f"format {fmt!r} is not supported; use text or html")
    return q, fmt, source, target


def languages_of(fields: dict, router: Router) -> tuple[str, str]:
    """A LibreTranslate request's source (``auto`` where not given) and target (the server's one target where not
    given), each a language the server knows.

    Raises:
        ApiError: 400 for a missing target where the server writes several languages, or an unknown language.
    """
    source = fields.get("source") or "auto"
    target = fields.get("target") or (router.targets[0] if len(router.targets) == 1 else "")
    if not target:
        raise ApiError(400, f"missing target; this server translates {router.summary()}")
    for code in (source, target):
        if code != "auto":
            router.check_language(code)
    return source, target


def add_routes(app: FastAPI, dispatcher: Dispatcher, api_key: ApiKey, glossaries: GlossaryStore) -> None:
    """Add LibreTranslate's ``/translate``, ``/detect``, ``/languages`` and ``/frontend/settings`` to ``app``,
    translating with ``dispatcher``; ``/translate`` takes a ``glossary`` field (an id of ``glossaries``, or JSON's
    inline entries) LibreTranslate's clients leave out."""
    router, limits = dispatcher.router, dispatcher.service.limits
    keyed = (403,) if api_key.key is not None else ()
    required = len(router.targets) > 1
    body = contract.translate_body(list(router.sources), list(router.targets), required, limits)

    @app.get("/frontend/settings", response_model=contract.FrontendSettings)
    async def frontend_settings() -> dict:
        """What LibreTranslate's web page and apps ask first: the server's limits, features and default pair."""
        source = router.sources[0]
        target = router.targets_of(source)[0]
        return {
            "charLimit": limits.max_chars,
            "frontendTimeout": 500,  # milliseconds the web page waits after typing before it translates
            "apiKeys": api_key.key is not None,
            "keyRequired": api_key.key is not None,
            "suggestions": False,
            "filesTranslation": True,
            "supportedFilesFormat": contract.file_endings(),
            "language": {
                "source": {"code": source, "name": language_name(source)},
                "target": {"code": target, "name": language_name(target)},
            },
        }

    @app.get("/languages")
    async def languages_() -> list[dict]:
        """LibreTranslate's language list: each language the server reads with those it translates it into
        (through a pivot too), then each it only writes."""
        return [
            {"code": code, "name": language_name(code), "targets": router.targets_of(code)} for code in router.languages
        ]

    @app.post(
        "/translate",
        response_model=None,
        responses={
            200: {"model": contract.LibreTranslateOut},
            **error_responses(400, *keyed, 404, 413, 415, 422, 503, 504),
        },
        openapi_extra=body,
    )
    async def libre_translate(request: Request) -> dict:
        """LibreTranslate's translate: JSON, a form or the query string; q a string or a list -> translatedText
        likewise. With source auto, each text's language is detected and each goes its own route."""
        fields = await read_fields(request)
        api_key.check_fields(fields, request)
        q, fmt, source, target = text_to_translate(fields, router)
        # over the schema's maxLength or maxItems: its 422; over the characters of all texts together: 413
        if isinstance(q, str):
            contract.check_text("q", q, limits)
        else:
            contract.check_texts("q", q, limits)
        lines = [q] if isinstance(q, str) else q
        glossary = glossaries.resolve(fields.get("glossary") or None, source, target)
        results, plan = await dispatcher.run(
            lines,
            source,
            [target] * len(lines),
            RequestOptions(format=fmt),
            lambda: client_gone(request),
            glossary=glossary,
        )
        texts = [r.text for r in results]
        answer: dict = {"translatedText": texts[0] if isinstance(q, str) else texts}
        if plan.detected is not None:  # as LibreTranslate: what each source was taken to be
            answer["detectedLanguage"] = plan.detected[0] if isinstance(q, str) else plan.detected
        elif source == "auto":  # one source: what the text looks like, among every language the server knows
            try:
                answer["detectedLanguage"] = dispatcher.detection.detected(q)
            except ApiError:  # no detector installed: the translation still stands
                pass
        return answer

    @app.post(
        "/detect",
        response_model=list[contract.DetectedOut],
        responses=error_responses(400, *keyed, 413, 415, 422),
        openapi_extra=contract.detect_body(limits),
    )
    async def libre_detect(request: Request) -> list[dict]:
        """LibreTranslate's detect: the languages ``q`` may be in, among those this server reads and writes, most
        likely first, each with a confidence from 0 to 100."""
        fields = await read_fields(request)
        api_key.check_fields(fields, request)
        q = text_to_detect(fields)
        contract.check_text("q", q, limits)  # over the schema's maxLength: its 422
        return dispatcher.detection.detect(q)
