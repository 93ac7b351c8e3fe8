"""DeepL's glossary routes (API v2): ``POST /v2/glossaries`` (entries as TSV or CSV), ``GET /v2/glossaries``,
``GET /v2/glossaries/{id}``, ``GET /v2/glossaries/{id}/entries`` (TSV) and ``DELETE /v2/glossaries/{id}``, over
the server's ``glossary_store.GlossaryStore``. A glossary's pair must be one a model translates directly."""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from mtkit.errors import MtkitError
from mtkit.serving import deepl_schema as schema
from mtkit.serving.deepl import DeepL
from mtkit.serving.deepl_codes import model_code, sources, targets
from mtkit.serving.deepl_fields import string_field
from mtkit.serving.errors import ApiError
from mtkit.serving.glossary_store import GlossaryLimit, Stored
from mtkit.text.glossary import Glossary


def add_routes(app: FastAPI, deepl: DeepL) -> None:
    """Add the glossary routes to ``app``."""
    store = deepl.glossaries
    pairs = {pair for spec in deepl.dispatcher.service.pool.specs.values() for pair in spec.directions}
    router, keyed = deepl.dispatcher.router, deepl.key.key is not None
    common = {"tags": [schema.TAGS], "response_model": None}

    def found(glossary_id: str) -> Stored:
        stored = store.get(glossary_id)
        if stored is None:
            raise ApiError(404, f"Glossary not found: {glossary_id}")
        return stored

    @app.post(
        "/v2/glossaries",
        status_code=201,
        **common,
        responses=schema.responses(schema.GlossaryOut, keyed=keyed, status=201),
        openapi_extra=schema.glossary_body(router.sources, router.targets),
    )
    async def create_glossary(request: Request) -> JSONResponse:
        """A new glossary: ``name``, ``source_lang``, ``target_lang``, ``entries``, ``entries_format`` (tsv or
        csv); answers its glossary object."""
        fields = await deepl.fields(request)
        name, entries = string_field(fields, "name"), string_field(fields, "entries")
        fmt = string_field(fields, "entries_format") or "tsv"
        if not name or not name.strip():
            raise ApiError(400, "Parameter 'name' not specified.")
        if len(name) > schema.MAX_NAME:
            raise ApiError(400, f"the glossary's name has {len(name)} characters; at most {schema.MAX_NAME}")
        if not entries:
            raise ApiError(400, "Parameter 'entries' not specified.")
        languages = []
        router = deepl.dispatcher.router
        for field, table in (("source_lang", sources(router.sources)), ("target_lang", targets(router.targets))):
            given = string_field(fields, field)
            if not given:
                raise ApiError(400, f"Parameter '{field}' not specified.")
            languages.append(model_code(given, table))
        source, target = languages
        if (source, target) not in pairs:
            raise ApiError(400, "Unsupported glossary source and target language pair")
        try:
            glossary = Glossary.parse(entries, fmt, name=name, source=source, target=target)
        except MtkitError as err:
            raise ApiError(400, f"Invalid glossary entries: {err}") from None
        try:
            stored = store.create(glossary)
        except GlossaryLimit as err:
            raise ApiError(400, str(err)) from None
        except MtkitError as err:
            raise ApiError(500, str(err)) from None
        return JSONResponse(stored.info(), status_code=201)

    @app.get("/v2/glossaries", **common, responses=schema.responses(schema.GlossariesOut, keyed=keyed))
    async def list_glossaries(request: Request) -> dict:
        await deepl.fields(request)
        return {"glossaries": [stored.info() for stored in store.all()]}

    @app.get("/v2/glossaries/{glossary_id}", **common, responses=schema.responses(schema.GlossaryOut, keyed=keyed))
    async def get_glossary(glossary_id: str, request: Request) -> dict:
        await deepl.fields(request)
        return found(glossary_id).info()

    @app.get("/v2/glossaries/{glossary_id}/entries", **common, responses=schema.responses(schema.ENTRIES, keyed=keyed))
    async def glossary_entries(glossary_id: str, request: Request) -> Response:
        """The entries as TSV (``Accept: text/tab-separated-values``, the one format DeepL gives)."""
        await deepl.fields(request)
        stored = found(glossary_id)
        return Response(stored.glossary.tsv, media_type="text/tab-separated-values; charset=utf-8")

    @app.delete(
        "/v2/glossaries/{glossary_id}",
        status_code=204,
        **common,
        responses=schema.responses(None, keyed=keyed, status=204),
    )
    async def delete_glossary(glossary_id: str, request: Request) -> Response:
        await deepl.fields(request)
        if not store.delete(glossary_id):
            raise ApiError(404, f"Glossary not found: {glossary_id}")
        return Response(status_code=204)
