"""What ``/openapi.json`` promises beyond FastAPI's own document: LibreTranslate's request bodies and answers, and
the bounds on texts every route checks (``v1_schema`` writes them, with the server's languages, into ``POST
/v1/translate``'s schema), so that a request the schema accepts is one the server accepts (the characters of all
sentences together excepted: no JSON Schema sums lengths, 413 says it).

A request over a bound the schema states (a text longer than its ``maxLength``, more texts than its ``maxItems``)
breaks the schema, and is answered as any other request that breaks it: 422 (``check_text``, ``check_texts``), not
413. 413 is kept for what no schema can say: the characters of all texts of a request together, and a body over
``--max-body-bytes`` (``middleware.BodyLimit``). The body limit is checked first, before any route reads the body:
the default limits leave it room for a text over the character bound however its characters are escaped
(``text_bytes``), so such a text reaches its route and gets its 422; a --max-body-bytes below ``text_bytes`` lets
the 413 of the body's bytes come first.
"""

from __future__ import annotations

from typing import Any, Optional, Union

from pydantic import BaseModel

from mtkit.documents.formats import FORMATS
from mtkit.flags import ServeLimits
from mtkit.serving.errors import ApiError


class DetectedOut(BaseModel):
    confidence: float
    language: str


class LibreTranslateOut(BaseModel):
    translatedText: Union[str, list[str]]
    detectedLanguage: Optional[Union[DetectedOut, list[DetectedOut]]] = None  # with source "auto"


class TranslatedFileOut(BaseModel):
    translatedFileUrl: str


class LanguageOut(BaseModel):
    code: str
    name: str


class Pair(BaseModel):
    source: LanguageOut
    target: LanguageOut


class FrontendSettings(BaseModel):
    """What LibreTranslate's web page and apps ask a server first."""

    charLimit: int
    frontendTimeout: int
    apiKeys: bool
    keyRequired: bool
    suggestions: bool
    filesTranslation: bool
    supportedFilesFormat: list[str]
    language: Pair


def most_sentences(limits: ServeLimits) -> int:
    """The most sentences one request may have: more could never fit in the queue."""
    return min(limits.max_sentences, limits.queue_size)


def text_bytes(limits: ServeLimits) -> int:
    """The bytes a body may need for a text of ``limits.max_chars`` characters: 12 a character at most (4 UTF-8
    bytes percent-encoded in a form, or a surrogate pair escaped in JSON), and 64 KiB for the other fields."""
    return 12 * limits.max_chars + (64 << 10)


def check_text(where: str, text: Any, limits: ServeLimits) -> None:
    """Refuse a text the schema's ``maxLength`` refuses.

    Args:
        where: the field, for the message.
        text: a string, or a list of strings and lists of them (None: nothing).
        limits: the server's bounds.

    Raises:
        ApiError: 422 for a string of more than ``limits.max_chars`` characters.
    """
    if isinstance(text, str):
        if len(text) > limits.max_chars:
            raise ApiError(422, f"{where}: {len(text)} characters; at most {limits.max_chars} per text")
    elif isinstance(text, (list, tuple)):
        for item in text:
            check_text(where, item, limits)


def check_texts(where: str, texts: list, limits: ServeLimits) -> None:
    """Refuse a list of texts the schema's ``maxItems`` refuses, then each text its ``maxLength`` refuses.

    Raises:
        ApiError: 422 for more than ``most_sentences(limits)`` texts, or a text over ``limits.max_chars``.
    """
    most = most_sentences(limits)
    if len(texts) > most:
        raise ApiError(422, f"{where}: {len(texts)} texts; at most {most} in one request")
    for i, text in enumerate(texts, 1):
        check_text(f"{where} item {i}", text, limits)


def check_request(body, limits: ServeLimits) -> None:
    """Refuse a ``POST /v1/translate`` body over the bounds ``tighten`` writes into its schema: the sentences, and
    each text, prefix and phrase of the sentences' objects and of the parallel lists.

    Raises:
        ApiError: 422, as ``check_texts``.
    """
    check_texts("text", [item.text for item in body.text], limits)
    for i, item in enumerate(body.text, 1):
        check_text(f"text item {i}", [item.prefix, item.constraints, item.avoid], limits)
    for name in ("prefix", "constraints", "avoid"):
        check_text(name, getattr(body, name), limits)


def _body(json_schema: dict, form_schema: dict, description: str) -> dict:
    return {
        "requestBody": {
            "required": True,
            "description": description,
            "content": {
                "application/json": {"schema": json_schema},
                "application/x-www-form-urlencoded": {"schema": form_schema},
            },
        }
    }


def translate_body(sources: list[str], targets: list[str], target_required: bool, limits: ServeLimits) -> dict:
    """``POST /translate``'s request body, as FastAPI's ``openapi_extra``.

    Args:
        sources: the languages the server reads.
        targets: the languages it writes.
        target_required: whether a request must name its target (the server writes several languages).
        limits: the server's bounds.
    """
    text = {"type": "string", "maxLength": limits.max_chars}
    many = {"type": "array", "items": text, "maxItems": most_sentences(limits)}
    fields: dict[str, Any] = {  # an empty field is one not given, as a web form sends it
        "q": {"anyOf": [text, many], "description": "The text, or a list of texts, to translate."},
        "source": {
            "type": "string",
            "enum": ["auto", *sources, ""],
            "description": "The source language (auto: detected).",
        },
        "target": {"type": "string", "enum": targets + ([] if target_required else [""]), "description": "The target."},
        "format": {"type": "string", "enum": ["text", "html", ""], "default": "text"},
        "api_key": {"type": "string", "description": "The server's API key, where it has one."},
    }
    required = ["q", "target"] if target_required else ["q"]
    as_json = {"type": "object", "title": "LibreTranslateRequest", "properties": fields, "required": required}
    # a form has no empty list: no q at all is a missing q
    form_q = {"anyOf": [text, {**many, "minItems": 1}], "description": "The text; repeated for a list of texts."}
    as_form = {**as_json, "title": "LibreTranslateForm", "properties": {**fields, "q": form_q}}
    about = (
        "LibreTranslate's fields, as JSON or a form; the query string may carry them too (the body's win). mtkit's"
        " own field glossary names a glossary (GET /v2/glossaries) the texts follow."
    )
    return _body(as_json, as_form, about)


def detect_body(limits: ServeLimits) -> dict:
    """``POST /detect``'s request body, as FastAPI's ``openapi_extra``."""
    fields: dict[str, Any] = {
        "q": {"type": "string", "maxLength": limits.max_chars, "description": "The text whose language to detect."},
        "api_key": {"type": "string", "description": "The server's API key, where it has one."},
    }
    as_json = {"type": "object", "title": "DetectRequest", "properties": fields, "required": ["q"]}
    return _body(as_json, {**as_json, "title": "DetectForm"}, "LibreTranslate's fields, as JSON or a form.")


def file_endings() -> list[str]:
    """The file name endings of every document format the server translates."""
    return [ending for _, endings in FORMATS.values() for ending in endings]


# which files the document routes take: a schema cannot tell a document from other bytes, so the description says it
# and the routes declare the 415 every other file gets
DOCUMENTS = (
    f"The document: a file whose name ends in {', '.join(file_endings())}, or of the format the format field names"
    " (its content that format's); any other file is refused with 415."
)


def file_body(sources: list[str], targets: list[str], target_required: bool) -> dict:
    """The request body of ``POST /translate_file`` and ``POST /v1/translate_file``: a multipart form (the
    languages as ``translate_body``'s)."""
    fields = {  # an empty field is one not given, as a web form sends it
        "file": {"type": "string", "format": "binary", "description": DOCUMENTS},
        "source": {"type": "string", "enum": ["auto", *sources, ""], "description": "auto: detected from its text."},
        "target": {"type": "string", "enum": targets + ([] if target_required else [""])},
        "format": {"type": "string", "enum": [*FORMATS, ""], "description": "Where the file's name does not say it."},
        "api_key": {"type": "string"},
    }
    required = ["file", "target"] if target_required else ["file"]
    schema = {"type": "object", "title": "DocumentForm", "properties": fields, "required": required}
    return {"requestBody": {"required": True, "content": {"multipart/form-data": {"schema": schema}}}}
