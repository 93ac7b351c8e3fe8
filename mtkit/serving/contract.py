"""What ``/openapi.json`` promises beyond FastAPI's own document: LibreTranslate's request bodies and answers, and
each server's bounds and languages in ``POST /v1/translate``'s schema, so that a request the schema accepts is one
the server accepts (the characters of all sentences together excepted: no JSON Schema sums lengths, 413 says it).

A request over a bound the schema states (a text longer than its ``maxLength``, more texts than its ``maxItems``)
breaks the schema, and is answered as any other request that breaks it: 422 (``check_text``, ``check_texts``), not
413. 413 is kept for what no schema can say: the characters of all texts of a request together, and a body over
``--max-body-bytes`` (``middleware.BodyLimit``). The body limit is checked first, before any route reads the body:
the default limits leave it room for a text over the character bound however its characters are escaped
(``text_bytes``), so such a text reaches its route and gets its 422; a --max-body-bytes below ``text_bytes`` lets
the 413 of the body's bytes come first.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence, Union

from pydantic import BaseModel

from mtkit.decoding import algorithms as registry
from mtkit.documents.formats import FORMATS
from mtkit.errors import MtkitError
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
    about = "LibreTranslate's fields, as JSON or a form; the query string may carry them too (the body's win)."
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


def _bound_texts(schema: Any, chars: int, most: int = 0) -> None:
    """Bound every string in ``schema`` (a sentence or an instruction) to ``chars`` and, if ``most``, every list of
    sentences to ``most``."""
    if isinstance(schema, dict):
        if schema.get("type") == "string":
            schema["maxLength"] = chars
        elif schema.get("type") == "array" and most:
            schema["maxItems"] = most
        for value in schema.values():
            _bound_texts(value, chars, most)
    elif isinstance(schema, list):
        for value in schema:
            _bound_texts(value, chars, most)


_NOTHING = {"anyOf": [{"type": "null"}, {"type": "array", "items": {"anyOf": [{"type": "null"}, {"maxItems": 0}]}}]}
_PLAIN = {  # a text item without instructions ("type": an array would match a schema of properties alone)
    "type": "object",
    "properties": {"prefix": {"enum": [None, ""]}, "constraints": {"maxItems": 0}, "avoid": {"maxItems": 0}},
}
# format html takes plain texts, one translation each: no instructions, no n-best list
HTML_TAKES = {
    "if": {
        "properties": {"options": {"properties": {"format": {"const": "html"}}, "required": ["format"]}},
        "required": ["options"],
    },
    "then": {
        "properties": {
            "text": {
                "anyOf": [
                    {"type": "string"},
                    _PLAIN,
                    {"type": "array", "items": {"anyOf": [{"type": "string"}, _PLAIN]}},
                ]
            },
            "prefix": {"anyOf": [{"type": "null"}, {"type": "array", "items": {"enum": [None, ""]}}]},
            "constraints": _NOTHING,
            "avoid": _NOTHING,
            "options": {"properties": {"nbest": {"anyOf": [{"type": "null"}, {"maximum": 1}]}}},
        }
    },
}


def tighten(
    document: dict,
    limits: ServeLimits,
    targets: list[str],
    beam_size: int,
    html: bool = True,
    alignments: bool = True,
    *,
    sources: Optional[list[str]] = None,
    models: Optional[dict[str, Sequence[tuple[str, str]]]] = None,
    algorithms: Optional[dict[str, int]] = None,
) -> None:
    """Write this server's bounds, languages and models into ``POST /v1/translate``'s schemas of ``document``.

    Args:
        document: FastAPI's OpenAPI document, changed in place.
        limits: the server's bounds: sentences per request, characters per text.
        targets: the languages the server translates into.
        beam_size: the most hypotheses a sentence may ask for (0: no bound, a sampling model's).
        html: whether the models translate HTML.
        alignments: whether the models give alignments.
        sources: the languages the server reads (None: any string).
        models: its models' names and directions (None: any name); a request naming a model keeps to its
            languages.
        algorithms: the algorithms every model runs for a request that names one, each with the most hypotheses
            a sentence may ask for under it (0: no bound; ``most_hypotheses``); None: as the schema has them.
    """
    schemas = document["components"]["schemas"]
    most = most_sentences(limits)
    request, segment = schemas["TranslateRequest"]["properties"], schemas["SegmentIn"]["properties"]
    for props in (request, segment):
        target = props["target"]
        target["anyOf"] = [{"type": "string", "enum": targets}, {"type": "null"}]
    names = None if models is None else list(models)
    for name, values in (("source", None if sources is None else ["auto", *sources]), ("model", names)):
        if values is not None:
            request[name]["anyOf"] = [{"type": "string", "enum": values}, {"type": "null"}]
    _bound_texts(request["text"], limits.max_chars, most)
    for name in ("prefix", "constraints", "avoid"):
        _bound_texts(request[name], limits.max_chars)
        _bound_texts(segment[name], limits.max_chars)
    _bound_texts(segment["text"], limits.max_chars)
    options = schemas["RequestOptions"]["properties"]
    _bound_hypotheses(schemas["RequestOptions"], beam_size, algorithms, limits.max_hypotheses)
    if not html:
        options["format"]["enum"] = ["text"]
    if not alignments:
        options["alignments"]["const"] = False
    rules = [HTML_TAKES, *(_model_keeps(name, pairs) for name, pairs in (models or {}).items())]
    schemas["TranslateRequest"]["allOf"] = rules


def most_hypotheses(options) -> dict[str, int]:
    """For a model loaded with ``options``: each registered algorithm it runs when a request names it, with the most
    hypotheses a sentence may then ask for (0: no bound); one it cannot run is left out."""
    out = {}
    for name in registry.REGISTRY:
        try:
            out[name] = options.for_call(algorithm=name).most_hypotheses
        except MtkitError:
            continue
    return out


def _at_most(most: int) -> dict:
    return {"anyOf": [{"type": "null"}, {"type": "integer", "minimum": 1, "maximum": most}]}


def _bound_hypotheses(options: dict, beam_size: int, algorithms: Optional[dict[str, int]], most: int) -> None:
    """``nbest`` bounded by the model's own algorithm (``beam_size``) where a request names none, and by the one it
    names otherwise, and at most ``most`` (the server's; 0 from an algorithm: no bound of its own); the
    ``algorithm`` choices cut to ``algorithms``."""
    beam_size = min(beam_size or most, most)
    algorithms = None if algorithms is None else {k: min(v or most, most) for k, v in algorithms.items()}
    props = options["properties"]
    rules = []
    if algorithms is not None and "algorithm" in props:
        for choice in props["algorithm"]["anyOf"]:
            if "enum" in choice:
                choice["enum"] = [name for name in choice["enum"] if name in algorithms]
        rules = [
            {
                "if": {"properties": {"algorithm": {"const": name}}, "required": ["algorithm"]},
                "then": {"properties": {"nbest": _at_most(bound)}},
            }
            for name, bound in algorithms.items()
        ]
        rules.append(
            {
                "if": {"properties": {"algorithm": {"type": "null"}}},
                "then": {"properties": {"nbest": _at_most(beam_size)}},
            }
        )
    for algorithm in registry.REGISTRY.values():  # an algorithm's options come with its name
        own = [param.name for param in algorithm.params if param.name in props]
        if own:
            named = {"properties": {"algorithm": {"const": algorithm.name}}, "required": ["algorithm"]}
            rules.append({"if": {"not": named}, "then": {"properties": {name: {"type": "null"} for name in own}}})
    for choice in props["nbest"]["anyOf"]:
        if choice.get("type") == "integer":
            choice["maximum"] = max([beam_size, *(algorithms or {}).values()])
    if rules:
        options["allOf"] = rules


def _model_keeps(name: str, pairs: Sequence[tuple[str, str]]) -> dict:
    """A request naming model ``name`` reads and writes its languages only."""
    sources = list(dict.fromkeys(s for s, _ in pairs))
    targets = list(dict.fromkeys(t for _, t in pairs))
    return {
        "if": {"properties": {"model": {"const": name}}, "required": ["model"]},
        "then": {"properties": {"source": {"enum": [None, "auto", *sources]}, "target": {"enum": [None, *targets]}}},
    }
