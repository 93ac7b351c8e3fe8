"""DeepL's document routes (API v2): ``POST /v2/document`` uploads a document (every format ``translate-file``
takes) and answers its ``document_id`` and ``document_key``; ``POST /v2/document/{id}`` gives its status;
``POST /v2/document/{id}/result`` downloads the translation, once, as DeepL does.

The document is translated before the upload is answered, its texts through the batcher as every document's are
(``documents._ThroughBatcher``), so its status is ``done`` at the first look and a client never waits. A translation
not downloaded is dropped after ``documents.KEEP_SECONDS``; at most ``KEPT`` wait at once, the oldest dropped first.
"""

from __future__ import annotations

import asyncio
import hmac
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import Response

from mtkit.documents.files import translate_bytes
from mtkit.documents.formats import FORMATS, format_of
from mtkit.errors import MtkitError
from mtkit.serving import deepl_schema as schema
from mtkit.serving.deepl import DeepL, check_hints
from mtkit.serving.deepl_fields import string_field
from mtkit.serving.documents import ACCEPTED, KEEP_SECONDS, MEDIA_TYPES, _ThroughBatcher
from mtkit.serving.errors import ApiError

KEPT = 64  # translated documents waiting to be downloaded
ROUTE = "/v2/document"


@dataclass
class Done:
    key: str
    name: str
    fmt: str
    data: bytes
    characters: int
    expires: float


def add_routes(app: FastAPI, deepl: DeepL) -> None:
    """Add the document routes to ``app``."""
    dispatcher = deepl.dispatcher
    limits = dispatcher.service.limits
    done: OrderedDict[str, Done] = OrderedDict()
    router, keyed = dispatcher.router, deepl.key.key is not None
    common = {"tags": [schema.TAGS], "response_model": None}
    with_key = schema.document_key_body()

    def expire() -> None:
        now = time.monotonic()
        for document_id in [i for i, d in done.items() if d.expires < now]:
            del done[document_id]
        while len(done) > KEPT:
            done.popitem(last=False)

    async def found(document_id: str, request: Request) -> Done:
        fields = await deepl.fields(request)
        expire()
        given = string_field(fields, "document_key") or ""
        document = done.get(document_id)
        if document is None or not hmac.compare_digest(given.encode(), document.key.encode()):
            raise ApiError(404, "Document not found (a translated document is kept until it is downloaded)")
        return document

    @app.post(
        ROUTE,
        **common,
        responses=schema.responses(schema.DocumentOut, 456, 503, 504, keyed=keyed),
        openapi_extra=schema.document_body(router.sources, router.targets),
    )
    async def upload_document(request: Request) -> dict:
        """Translate a document: multipart ``file``, ``target_lang``, optional ``source_lang``, ``filename``,
        ``output_format`` (the input's own), ``glossary_id``."""
        fields = await deepl.fields(request)
        upload = fields.get("file")
        if upload is None or isinstance(upload, str):
            raise ApiError(400, "Parameter 'file' not specified (a multipart upload)")
        source, target = deepl.source(fields), deepl.target(fields)
        check_hints(fields)
        glossary, source = deepl.glossary(fields, source, target)
        data = await upload.read()
        if len(data) > limits.max_file_bytes:
            raise ApiError(413, f"the document has {len(data)} bytes; at most {limits.max_file_bytes}")
        name = Path(string_field(fields, "filename") or upload.filename or "document").name
        try:
            fmt = format_of(name, None)
        except MtkitError:
            raise ApiError(400, f"{name} is not a document this server translates: {ACCEPTED}") from None
        wanted = string_field(fields, "output_format") or ""
        if wanted and (wanted not in FORMATS or wanted != fmt):
            raise ApiError(400, f"output_format {wanted}: this server writes a document in its own format, {fmt}")
        deepl.usage.charge(0)  # a spent quota refuses the document before it is read
        model = _ThroughBatcher(dispatcher, source or "auto", target, asyncio.get_running_loop(), glossary)
        try:
            translated, _ = await asyncio.to_thread(translate_bytes, model, data, fmt, where=name)
        except MtkitError as err:
            raise ApiError(400, str(err)) from None
        deepl.usage.add(model.characters)
        expire()
        document_id = secrets.token_hex(16).upper()
        key = secrets.token_hex(32).upper()
        done[document_id] = Done(key, name, fmt, translated, model.characters, time.monotonic() + KEEP_SECONDS)
        return {"document_id": document_id, "document_key": key}

    @app.post(
        ROUTE + "/{document_id}",
        **common,
        responses=schema.responses(schema.DocumentStatusOut, keyed=keyed),
        openapi_extra=with_key,
    )
    async def document_status(document_id: str, request: Request) -> dict:
        document = await found(document_id, request)
        return {"document_id": document_id, "status": "done", "billed_characters": document.characters}

    @app.post(
        ROUTE + "/{document_id}/result",
        **common,
        responses=schema.responses(schema.DOCUMENT, keyed=keyed),
        openapi_extra=with_key,
    )
    async def document_result(document_id: str, request: Request) -> Response:
        document = await found(document_id, request)
        del done[document_id]
        disposition = f"attachment; filename*=UTF-8''{_quote(document.name)}"
        return Response(
            document.data, media_type=MEDIA_TYPES[document.fmt], headers={"Content-Disposition": disposition}
        )


def _quote(name: str) -> str:
    from urllib.parse import quote

    return quote(name, safe="")
