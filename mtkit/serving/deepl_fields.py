"""The fields of a request to DeepL's routes: a JSON object or a form (``text`` repeated for several texts; a body
without a content type read as a form, as DeepL reads it), the query string's under them."""

from __future__ import annotations

import json
import urllib.parse
from typing import Any, Optional

from fastapi import Request

from mtkit.serving.errors import ApiError


async def read_fields(request: Request) -> dict:
    """The request's fields: the query string's, under the body's.

    Raises:
        ApiError: 400 for a body that does not parse or a form field that is a file where text is due, 415 for
            another content type.
    """
    return {**_query(request), **await _body(request)}


def string_field(fields: dict, name: str) -> Optional[str]:
    """A field that is a string, or None where not given.

    Raises:
        ApiError: 400 for a value of another type.
    """
    value = fields.get(name)
    if value is None or isinstance(value, str):
        return value
    raise ApiError(400, f"Parameter '{name}' must be a string")


def _query(request: Request) -> dict:
    query = request.query_params
    return {key: query.getlist(key) if key == "text" else query.get(key) for key in query.keys()}


async def _body(request: Request) -> dict:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    raw = await request.body()
    if not raw:
        return {}
    if kind == "application/json":
        try:
            fields: Any = json.loads(raw)
        except (ValueError, RecursionError):
            raise ApiError(400, "the body is not valid JSON") from None
        if not isinstance(fields, dict):
            raise ApiError(400, "the JSON body must be an object")
        return fields
    if kind == "":  # no content type: a form, as DeepL reads it
        try:
            pairs = urllib.parse.parse_qsl(raw.decode("utf-8"), keep_blank_values=True, strict_parsing=True)
        except (UnicodeDecodeError, ValueError):
            raise ApiError(400, "the body is not a valid form") from None
        out = {}
        for key, value in pairs:
            out.setdefault(key, []).append(value)
        return {key: values if key == "text" else values[0] for key, values in out.items()}
    if kind in ("application/x-www-form-urlencoded", "multipart/form-data"):
        try:
            form = await request.form(max_part_size=max(len(raw), 1))
        except Exception:  # a malformed form: python-multipart and starlette raise several kinds
            raise ApiError(400, "the body is not a valid form") from None
        out: dict = {}
        for key in form.keys():
            values = form.getlist(key)
            if key == "file":
                out[key] = values[0]
                continue
            if not all(isinstance(v, str) for v in values):
                raise ApiError(400, f"the form field {key!r} must be text")
            out[key] = values if key == "text" else values[0]
        return out
    raise ApiError(415, f"unsupported content type {kind!r}; send JSON or a form")
