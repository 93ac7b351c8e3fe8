"""The server's errors: every one is a JSON body ``{"error": "one readable message"}`` with its status; under
DeepL's routes (``/v2/``) the body is DeepL's, ``{"message": "..."}``, and a 422 is DeepL's 400, so that its
clients raise their own exceptions."""

from __future__ import annotations

from typing import Optional

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException

MEANINGS = {
    400: "A body that does not parse, a missing field or a language pair or format this server does not translate.",
    403: "No valid API key (the api_key field, the X-API-Key header or a bearer token).",
    404: "No such resource: a route, a file, a glossary.",
    413: "Over a bound no schema states: the body's bytes, the characters of all texts of one request together, a"
    " document's bytes.",
    415: "A content type or document format this route does not read.",
    422: "A field of the wrong type or value (a text over the schema's maxLength, more texts than its maxItems), or"
    " instructions the model cannot follow.",
    503: "The queue is full or the server is stopping; retry after the Retry-After seconds.",
    504: "No translation within the server's timeout; retry later or send fewer sentences.",
}  # a client that leaves before its answer is logged with 499, which no client receives


class ErrorOut(BaseModel):
    """Every error's body."""

    error: str


def error_responses(*statuses: int) -> dict:
    """FastAPI's ``responses`` documenting ``statuses`` with the ``{"error": ...}`` body."""
    return {status: {"model": ErrorOut, "description": MEANINGS[status]} for status in statuses}


class ApiError(Exception):
    """An error answered as it is: ``status``, ``message`` and, if given, ``headers``."""

    def __init__(self, status: int, message: str, headers: Optional[dict] = None):
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers


def error_response(status: int, message: str, headers: Optional[dict] = None) -> JSONResponse:
    """The JSON error response.

    Args:
        status: the HTTP status.
        message: what went wrong; its whitespace is folded onto one line.
        headers: extra response headers, or None.
    """
    return JSONResponse({"error": " ".join(message.split())}, status_code=status, headers=headers)


DEEPL_PREFIX = "/v2/"


def error_for(path: str, status: int, message: str, headers: Optional[dict] = None) -> JSONResponse:
    """``error_response`` for a request to ``path``: DeepL's body and statuses under its routes."""
    if path.startswith(DEEPL_PREFIX):
        status = 400 if status == 422 else status
        return JSONResponse({"message": " ".join(message.split())}, status_code=status, headers=headers)
    return error_response(status, message, headers)


def _answer(request, status: int, message: str, headers: Optional[dict] = None) -> JSONResponse:
    return error_for(request.url.path, status, message, headers)


def _allowed(request) -> list[str]:
    """The methods the app's routes take at the request's path."""
    from starlette.routing import Match

    methods: set[str] = set()
    for route in request.app.routes:
        match, _ = route.matches(request.scope)  # PARTIAL: the path matches, not the method
        if match != Match.NONE:
            methods |= set(getattr(route, "methods", None) or ())
    return sorted(methods)


def describe(problem: dict) -> str:
    """One pydantic validation problem as ``where: what``.

    Args:
        problem: one item of ``RequestValidationError.errors()``.
    """
    if tuple(problem.get("loc", ())) == ("body",):
        return "the body must be a JSON object (Content-Type: application/json)"
    where = ".".join(str(x) for x in problem.get("loc", ()) if x != "body") or "body"
    return f"{where}: {problem.get('msg', 'invalid')}"


def add_error_handlers(app: FastAPI) -> None:
    """Make ``app`` answer every error with its JSON body.

    ``ApiError`` keeps its status; Starlette's HTTP errors keep theirs; an invalid body is a 400 (not JSON) or a 422;
    anything else is a 500 naming only the exception's type.
    """

    @app.exception_handler(ApiError)
    async def _api_error(request, err: ApiError):
        return _answer(request, err.status, err.message, err.headers)

    @app.exception_handler(HTTPException)
    async def _http_error(request, err: HTTPException):
        headers = getattr(err, "headers", None)
        if err.status_code == 405:  # every method of the path's routes, not only the first route's
            headers = {**(headers or {}), "Allow": ", ".join(_allowed(request))}
        return _answer(request, err.status_code, str(err.detail), headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request, err: RequestValidationError):
        problems = err.errors()
        if any(p.get("type") == "json_invalid" for p in problems):
            return _answer(request, 400, "the body is not valid JSON")
        return _answer(request, 422, "; ".join(describe(p) for p in problems[:5]))  # the first few: one short line

    @app.exception_handler(Exception)
    async def _internal(request, err: Exception):
        return _answer(request, 500, f"internal error: {type(err).__name__}")  # the type only: no internals leak
