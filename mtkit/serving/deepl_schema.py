"""What ``/openapi.json`` says of DeepL's routes: their request bodies (JSON and forms, as DeepL's clients send
them), answers and errors (``{"message": ...}``), with this server's languages and bounds, so that a request the
document accepts is one the routes accept, and one it refuses they refuse (400) — but for a glossary's entries and a
document's content, grammars no schema states."""

from __future__ import annotations

from typing import Any, Optional

from pydantic import BaseModel

from mtkit.documents.formats import FORMATS
from mtkit.flags import ServeLimits
from mtkit.serving.contract import DOCUMENTS, most_sentences
from mtkit.serving.deepl_codes import sources, spellings, targets
from mtkit.serving.documents import MEDIA_TYPES
from mtkit.serving.schemas import _VISIBLE

# DeepL's options mtkit cannot honour: the values a client relies on are refused, the hints accepted
HINTS = {
    "formality": ("default", "prefer_more", "prefer_less"),
    "model_type": ("latency_optimized", "prefer_quality_optimized"),
}
SPLIT = {"0": False, "1": True, "nonewlines": True, "": True}
MAX_NAME = 1024  # characters of a glossary's name
TAG = "^[A-Za-z_][A-Za-z0-9_.:-]*$"
TAG_LIST = "^ *(?:[A-Za-z_][A-Za-z0-9_.:-]*)? *(?:, *(?:[A-Za-z_][A-Za-z0-9_.:-]*)? *)*$"  # names and commas
TAGS = "DeepL API v2"
MEANINGS = {
    400: "A missing or bad parameter, a language this server does not translate, an option it cannot honour.",
    403: "No valid key in the Authorization header (DeepL-Auth-Key KEY).",
    404: "No such glossary, document or route.",
    413: "A body, a document or the characters of a request over this server's bounds.",
    415: "A content type this route does not read.",
    456: "The character limit (mtkit serve --char-limit) is reached.",
    503: "The queue is full or the server is stopping; retry after the Retry-After seconds.",
    504: "No translation within the server's timeout.",
}


class MessageOut(BaseModel):
    """DeepL's error body."""

    message: str


class TranslationOut(BaseModel):
    detected_source_language: str
    text: str
    billed_characters: int
    model_type_used: Optional[str] = None


class TranslateOut(BaseModel):
    translations: list[TranslationOut]


class LanguageOut(BaseModel):
    language: str
    name: str
    supports_formality: Optional[bool] = None


class UsageOut(BaseModel):
    character_count: int
    character_limit: int


class GlossaryOut(BaseModel):
    glossary_id: str
    name: str
    ready: bool
    source_lang: str
    target_lang: str
    creation_time: str
    entry_count: int


class GlossariesOut(BaseModel):
    glossaries: list[GlossaryOut]


class PairOut(BaseModel):
    source_lang: str
    target_lang: str


class PairsOut(BaseModel):
    supported_languages: list[PairOut]


class DocumentOut(BaseModel):
    document_id: str
    document_key: str


class DocumentStatusOut(BaseModel):
    document_id: str
    status: str
    billed_characters: Optional[int] = None


def responses(ok: Any, *statuses: int, keyed: bool, status: int = 200) -> dict:
    """FastAPI's ``responses``: ``ok`` (a model, a response object, or None for no body) for ``status``, and with
    DeepL's error body 400, 404, 413, 415, each of ``statuses``, and 403 where the server has a key."""
    errors = sorted({400, 404, 413, 415, *statuses, *((403,) if keyed else ())})
    out = {code: {"model": MessageOut, "description": MEANINGS[code]} for code in errors}
    answer = {"description": "Deleted."} if ok is None else ok if isinstance(ok, dict) else {"model": ok}
    return {status: answer, **out}


def _nullable(schema: dict) -> dict:
    return {"anyOf": [schema, {"type": "null"}]}


def _body(json_fields: dict, form_fields: dict, required: list[str], title: str, multipart: bool = False) -> dict:
    """A request body of JSON (its optional fields may be null) and a form, with the same ``required``."""
    nullable = {k: v if k in required else _nullable(v) for k, v in json_fields.items()}
    as_json = {"type": "object", "title": title, "properties": nullable, "required": required}
    as_form = {"type": "object", "title": title + "Form", "properties": form_fields, "required": required}
    content = {"multipart/form-data": {"schema": as_form}}
    if not multipart:
        content = {"application/json": {"schema": as_json}, "application/x-www-form-urlencoded": {"schema": as_form}}
    return {"requestBody": {"required": bool(required), "content": content}}


def _enum(*values: str) -> dict:
    return {"type": "string", "enum": list(values)}


def _flag() -> tuple[dict, dict]:
    """A switch: true/false or "1"/"0" in JSON, "1"/"0" in a form ("" as not given)."""
    return {"anyOf": [{"type": "boolean"}, _enum("0", "1", "")]}, _enum("0", "1", "")


def translate_body(limits: ServeLimits, source_codes: tuple, target_codes: tuple) -> dict:
    """``POST /v2/translate``'s body, as FastAPI's ``openapi_extra``."""
    text = {"type": "string", "maxLength": limits.max_chars}
    many = {"type": "array", "items": text, "minItems": 1, "maxItems": most_sentences(limits)}
    flag_json, flag_form = _flag()
    common = {
        "target_lang": {**_enum(*spellings(targets(target_codes))), "description": "DE, EN-GB, EN-US, PT-BR..."},
        "source_lang": {**_enum(*spellings(sources(source_codes)), ""), "description": "Left out: detected."},
        "split_sentences": _enum(*SPLIT),
        "tag_handling": _enum("xml", "html", ""),
        **{name: _enum(*values, "") for name, values in HINTS.items()},
        "context": {"type": "string", "description": "A hint: accepted, not used."},
        "glossary_id": {"type": "string", "description": "A glossary of the request's pair (GET /v2/glossaries)."},
    }
    as_json = {
        "text": {"anyOf": [text, many]},
        **common,
        "preserve_formatting": flag_json,
        "outline_detection": flag_json,
        "ignore_tags": {"anyOf": [{"type": "array", "items": {"type": "string", "pattern": TAG}}, _tag_list()]},
    }
    as_form = {
        "text": {"anyOf": [text, many]},
        **common,
        "preserve_formatting": flag_form,
        "outline_detection": flag_form,
        "ignore_tags": _tag_list(),
    }
    return _body(as_json, as_form, ["text", "target_lang"], "DeepLTranslate")


def _tag_list() -> dict:
    return {"type": "string", "pattern": TAG_LIST, "description": "Tag names, separated by commas."}


LANGUAGE_KIND = _enum("source", "target", "")
LANGUAGES_QUERY = {"parameters": [{"name": "type", "in": "query", "required": False, "schema": LANGUAGE_KIND}]}


def languages_body() -> dict:
    """``POST /v2/languages``' body: ``type``."""
    return _body({"type": LANGUAGE_KIND}, {"type": LANGUAGE_KIND}, [], "DeepLLanguages")


def glossary_body(source_codes: tuple, target_codes: tuple) -> dict:
    """``POST /v2/glossaries``' body."""
    fields = {
        "name": {"type": "string", "minLength": 1, "maxLength": MAX_NAME, "pattern": _VISIBLE},
        "source_lang": _enum(*spellings(sources(source_codes))),
        "target_lang": _enum(*spellings(targets(target_codes))),
        "entries": {"type": "string", "minLength": 1, "description": "source<TAB>target a line (tsv), or CSV."},
        "entries_format": _enum("tsv", "csv", ""),
    }
    return _body(fields, fields, ["name", "source_lang", "target_lang", "entries"], "DeepLGlossary")


def document_body(source_codes: tuple, target_codes: tuple) -> dict:
    """``POST /v2/document``'s multipart body."""
    fields = {
        "file": {"type": "string", "format": "binary", "description": DOCUMENTS},
        "target_lang": _enum(*spellings(targets(target_codes))),
        "source_lang": _enum(*spellings(sources(source_codes)), ""),
        "filename": {"type": "string", "description": "The document's name, where the upload's does not say it."},
        "output_format": _enum(*FORMATS, ""),
        "glossary_id": {"type": "string"},
        "formality": _enum(*HINTS["formality"], ""),
    }
    return _body(fields, fields, ["file", "target_lang"], "DeepLDocument", multipart=True)


def document_key_body() -> dict:
    field = {"document_key": {"type": "string"}}
    return _body(field, field, [], "DeepLDocumentKey")


DOCUMENT = {
    "description": "The translated document.",
    "content": {kind: {"schema": {"type": "string", "format": "binary"}} for kind in MEDIA_TYPES.values()},
}
ENTRIES = {
    "description": "The entries, source<TAB>target a line.",
    "content": {"text/tab-separated-values": {"schema": {"type": "string"}}},
}
