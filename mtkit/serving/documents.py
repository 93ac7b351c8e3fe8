"""Documents over HTTP: LibreTranslate's ``POST /translate_file`` (the answer names a URL to download the
translation from, ``GET /download_file/...``) and ``POST /v1/translate_file``, whose answer is the translated
file itself.

A document's texts go through the same batcher as every other request, a slice at a time, so a long document
shares the model with short requests instead of holding it; its format module (``documents.formats``) runs on a
worker thread and waits for each slice. Translated files are kept for ``KEEP_SECONDS`` in a folder the server
removes when it stops.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Optional

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, Response

from mtkit.documents.files import translate_bytes
from mtkit.documents.formats import FORMATS, format_of
from mtkit.errors import MtkitError
from mtkit.serving import contract
from mtkit.serving.auth import ApiKey
from mtkit.serving.dispatch import Dispatcher
from mtkit.serving.errors import ApiError, error_responses
from mtkit.serving.glossary_store import GlossaryStore
from mtkit.serving.libretranslate import languages_of, query_fields
from mtkit.serving.schemas import RequestOptions

FILE_ROUTES = ("/translate_file", "/v1/translate_file")
# what the 415 of another file says: the formats, as the request schema's description of the file does
ACCEPTED = (
    f"send a file whose name ends in {', '.join(contract.file_endings())}, or name its format in the format field"
    f" (one of {', '.join(FORMATS)})"
)
KEEP_SECONDS = 15 * 60
SLICE = 32  # a document's texts per trip through the batcher
_TAG = re.compile(r"<[^>]*>")  # an HTML tag: left out of the text whose language is detected
MEDIA_TYPES = {
    "txt": "text/plain; charset=utf-8",
    "md": "text/markdown; charset=utf-8",
    "html": "text/html; charset=utf-8",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "srt": "application/x-subrip",
    "po": "text/x-gettext-translation; charset=utf-8",
    "xliff": "application/xliff+xml",
}


class Store:
    """Translated files waiting to be downloaded, each under a random name, until they expire."""

    def __init__(self):
        self.folder: Optional[Path] = None
        self.expires: dict[str, float] = {}

    def put(self, name: str, data: bytes) -> str:
        """Keep ``data`` as ``name``; returns the key it is downloaded by."""
        self.expire()
        if self.folder is None:
            self.folder = Path(tempfile.mkdtemp(prefix="mtkit-files-"))
        key = f"{uuid.uuid4().hex}.{name}"
        (self.folder / key).write_bytes(data)
        self.expires[key] = time.monotonic() + KEEP_SECONDS
        return key

    def get(self, key: str) -> Path:
        self.expire()
        if key not in self.expires or self.folder is None:
            raise ApiError(404, "no such file (translated files are kept for 15 minutes)")
        return self.folder / key

    def expire(self) -> None:
        now = time.monotonic()
        for key in [k for k, t in self.expires.items() if t < now]:
            del self.expires[key]
            if self.folder is not None:
                (self.folder / key).unlink(missing_ok=True)

    def close(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
        self.folder, self.expires = None, {}


class _ThroughBatcher:
    """What a format module's ``translate`` calls, from a worker thread: each slice of texts goes through the
    dispatcher on the event loop, and the thread waits for it. With source ``auto`` (where the server reads several
    languages) the document's language is detected from its first slice, and the whole document goes that route."""

    def __init__(
        self, dispatcher: Dispatcher, source: str, target: str, loop: asyncio.AbstractEventLoop, glossary=None
    ):
        self.dispatcher, self.source, self.target, self.loop = dispatcher, source, target, loop
        self.route, self.glossary = None, glossary
        self.characters = 0  # of the texts translated

    def check_format(self, markup: str, options=None) -> None:
        pass  # each slice's format is checked against the models that translate it (a 422)

    def translate_batch(self, texts: list, *, scores: bool = False, format: str = "text") -> list:
        out = []
        for start in range(0, len(texts), SLICE):
            part = texts[start : start + SLICE]
            if self.route is None:
                sample = " ".join(_TAG.sub(" ", t) if format == "html" else t for t in part)
                self.route = self.dispatcher.plan([sample], self.source, [self.target]).routes[0]
            options = RequestOptions(format=format)
            call = self.dispatcher.translate(part, [self.route] * len(part), options, glossary=self.glossary)
            out += asyncio.run_coroutine_threadsafe(call, self.loop).result()
            self.characters += sum(map(len, part))
        return out


async def read_document(request: Request, limits_bytes: int, api_key: ApiKey) -> tuple[str, bytes, dict]:
    """The uploaded document of a multipart request (field ``file``), its name and the other fields (the query
    string's under the form's).

    Raises:
        ApiError: 400 without a file, 413 for one over the limit, 415 for a format no module reads.
    """
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "multipart/form-data":
        raise ApiError(415, "send the document as multipart/form-data, in the field 'file'")
    try:
        form = await request.form()
    except Exception:  # a malformed form: python-multipart and starlette raise several kinds
        raise ApiError(400, "the body is not a valid multipart form") from None
    fields = {**query_fields(request), **{k: v for k, v in form.items() if isinstance(v, str)}}
    api_key.check_fields(fields, request)
    upload = form.get("file")
    if upload is None or isinstance(upload, str):
        raise ApiError(400, "missing file (the document to translate, as the multipart field 'file')")
    data = await upload.read()
    if len(data) > limits_bytes:
        raise ApiError(413, f"the document has {len(data)} bytes; at most {limits_bytes}")
    name = Path(upload.filename or "document").name
    return name, data, fields


def add_routes(app: FastAPI, dispatcher: Dispatcher, api_key: ApiKey, store: Store, glossaries: GlossaryStore) -> None:
    """Add ``/translate_file``, ``/download_file/{key}`` and ``/v1/translate_file`` to ``app``; a ``glossary``
    field names one of ``glossaries`` the document follows."""
    router, limits = dispatcher.router, dispatcher.service.limits
    body = contract.file_body(list(router.sources), list(router.targets), len(router.targets) > 1)
    errors = error_responses(400, *((403,) if api_key.key is not None else ()), 413, 415, 422, 503, 504)

    async def translate_upload(request: Request) -> tuple[str, str, bytes]:
        name, data, fields = await read_document(request, limits.max_file_bytes, api_key)
        source, target = languages_of(fields, router)
        given = fields.get("format") or None
        if given is not None and given not in FORMATS:
            raise ApiError(415, f"format {given!r} is not a document format; use one of {', '.join(FORMATS)}")
        try:
            fmt = format_of(name, given)
        except MtkitError:  # its message names the command line's --format
            raise ApiError(415, f"{name} is not a document this server translates: {ACCEPTED}") from None
        glossary = glossaries.resolve(fields.get("glossary") or None, source, target)
        model = _ThroughBatcher(dispatcher, source, target, asyncio.get_running_loop(), glossary)
        try:
            translated, _ = await asyncio.to_thread(translate_bytes, model, data, fmt, where=name)
        except MtkitError as err:
            raise ApiError(400, str(err)) from None
        return name, fmt, translated

    @app.post(
        "/translate_file",
        response_model=None,
        responses={200: {"model": contract.TranslatedFileOut}, **errors},
        openapi_extra=body,
    )
    async def libre_translate_file(request: Request) -> dict:
        """LibreTranslate's file translation: multipart ``file``, ``source``, ``target``; the answer's
        ``translatedFileUrl`` downloads the translated file (for 15 minutes)."""
        name, _, translated = await translate_upload(request)
        key = store.put(name, translated)
        return {"translatedFileUrl": str(request.url_for("download_file", key=key))}

    download = {"description": "The translated document.", "content": {"*/*": {"schema": {"type": "string"}}}}

    @app.get("/download_file/{key}", name="download_file", responses={200: download, **error_responses(404)})
    async def download_file(key: str) -> FileResponse:
        """A file ``/translate_file`` translated."""
        path = store.get(key)
        return FileResponse(path, filename=key.split(".", 1)[1])

    binary = {"schema": {"type": "string", "format": "binary"}}
    document = {"description": "The translated document.", "content": {kind: binary for kind in MEDIA_TYPES.values()}}

    @app.post("/v1/translate_file", responses={200: document, **errors}, openapi_extra=body)
    async def v1_translate_file(request: Request) -> Response:
        """Translate a document (multipart ``file``; optional ``format`` where its name does not say it): the
        answer is the translated document, with its structure and formatting, named as the upload."""
        name, fmt, translated = await translate_upload(request)
        disposition = f"attachment; filename*=UTF-8''{_quote(name)}"
        return Response(translated, media_type=MEDIA_TYPES[fmt], headers={"Content-Disposition": disposition})


def _quote(name: str) -> str:
    from urllib.parse import quote

    return quote(name, safe="")
