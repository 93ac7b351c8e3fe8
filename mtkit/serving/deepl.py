"""DeepL's API v2 for its clients (the official ones take a ``server_url``): ``POST /v2/translate``, ``GET|POST
/v2/languages``, ``GET|POST /v2/usage`` and ``GET /v2/glossary-language-pairs``; the glossary routes are in
``deepl_glossaries``, the document routes in ``deepl_documents``.

A request's fields come from a JSON object or a form (``text`` repeated for several texts), the query string's
under them; the key from ``Authorization: DeepL-Auth-Key KEY`` (or the older ``auth_key`` field). Errors are
DeepL's: ``{"message": ...}`` with 400, 403, 404, 413, 456 (``errors``). docs/deepl.md lists which of DeepL's
options are honoured, which are hints accepted and ignored, and which are refused.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Optional

from fastapi import FastAPI, Request

from mtkit.serving import contract
from mtkit.serving import deepl_schema as schema
from mtkit.serving.auth import ApiKey, header_key
from mtkit.serving.deepl_codes import base, deepl_code, model_code, source_entries, sources, target_entries, targets
from mtkit.serving.deepl_fields import read_fields, string_field
from mtkit.serving.deepl_schema import HINTS, SPLIT
from mtkit.serving.dispatch import Dispatcher
from mtkit.serving.errors import ApiError
from mtkit.serving.glossary_store import GlossaryStore
from mtkit.serving.schemas import RequestOptions
from mtkit.serving.service import client_gone

REFUSED = ("custom_instructions", "style_id", "translation_memory_id", "glossary_ids")
FLAGS = ("preserve_formatting", "outline_detection")  # true/false or "1"/"0": accepted; whitespace is kept anyway
TAG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]*")
_KEPT = ' translate="no" data-mtkit-ignored=""'  # marks an ignore_tags element while it is translated


class Usage:
    """Characters translated since the server started, and the most it may translate (None: no limit)."""

    def __init__(self, limit: Optional[int] = None):
        self.count, self.limit, self._lock = 0, limit, threading.Lock()

    def charge(self, characters: int) -> None:
        """Count ``characters`` against the limit.

        Raises:
            ApiError: 456 where they would pass it, as DeepL answers a spent quota.
        """
        with self._lock:
            if self.limit is not None and self.count + characters > self.limit:
                raise ApiError(456, f"Quota exceeded: {self.count} of {self.limit} characters translated")
            self.count += characters

    def add(self, characters: int) -> None:
        """Count characters translated (a document's, known once it is done), or give back a failed request's."""
        with self._lock:
            self.count += characters

    def answer(self) -> dict:
        # DeepL gives a plan without a character limit a limit of 10^12
        return {"character_count": self.count, "character_limit": self.limit if self.limit is not None else 10**12}


@dataclass
class DeepL:
    """What the DeepL routes share."""

    dispatcher: Dispatcher
    key: ApiKey
    glossaries: GlossaryStore
    usage: Usage

    async def fields(self, request: Request) -> dict:
        """The request's fields, its key checked (403 for a wrong one)."""
        fields = await read_fields(request)
        given = header_key(request) or fields.get("auth_key")
        self.key.check(given if isinstance(given, str) else None)
        return fields

    def source(self, fields: dict) -> Optional[str]:
        """The model code of ``source_lang``; None where not given (detected then)."""
        given = string_field(fields, "source_lang")
        if not given:
            return None
        code = model_code(given, sources(self.dispatcher.router.sources))
        if code is None:
            raise ApiError(400, f"Value for 'source_lang' not supported: {given}")
        return code

    def target(self, fields: dict) -> str:
        given = string_field(fields, "target_lang")
        if not given:
            raise ApiError(400, "Parameter 'target_lang' not specified.")
        code = model_code(given, targets(self.dispatcher.router.targets))
        if code is None:
            raise ApiError(400, f"Value for 'target_lang' not supported: {given}")
        return code

    def glossary(self, fields: dict, source: Optional[str], target: str):
        """The glossary ``glossary_id`` names, for the pair (source, target), and the source (the glossary's where
        the request names none); (None, source) without one."""
        glossary_id = string_field(fields, "glossary_id")
        if not glossary_id:
            return None, source
        stored = self.glossaries.get(glossary_id)
        if stored is None:
            raise ApiError(404, f"Glossary not found: {glossary_id}")
        g = stored.glossary
        if (g.source, g.target) != (source or g.source, target):
            raise ApiError(400, f"The glossary's language pair {g.source}-{g.target} is not the request's")
        return g, g.source


def check_hints(fields: dict) -> None:
    """Refuse the options a client relies on and mtkit cannot honour; hints pass."""
    for name, accepted in HINTS.items():
        value = string_field(fields, name)
        if value and value not in accepted:
            raise ApiError(
                400, f"Value for '{name}' not supported: {value} (this server accepts {', '.join(accepted)})"
            )
    for name in REFUSED:
        if fields.get(name) not in (None, ""):
            raise ApiError(400, f"Parameter '{name}' is not supported by this server")
    string_field(fields, "context")  # a hint: a string, not used
    for name in FLAGS:
        value = fields.get(name)
        if value is not None and not isinstance(value, bool) and value not in ("0", "1", ""):
            raise ApiError(400, f"Value for '{name}' not supported: {value!r} (0 or 1)")


def request_options(fields: dict) -> tuple[RequestOptions, tuple[str, ...]]:
    """The translate options of a request, and the tags whose content stays as it is (``ignore_tags``)."""
    split = string_field(fields, "split_sentences") or ""
    if split not in SPLIT:
        raise ApiError(400, f"Value for 'split_sentences' not supported: {split} (0, 1 or nonewlines)")
    tags = string_field(fields, "tag_handling") or ""
    if tags not in ("", "xml", "html"):
        raise ApiError(400, f"Value for 'tag_handling' not supported: {tags} (xml or html)")
    given = fields.get("ignore_tags")
    if isinstance(given, list) and all(isinstance(t, str) for t in given):  # a JSON body's list: names as they are
        ignored = tuple(given)
    else:  # a string: names separated by commas, spaces around them
        given = string_field(fields, "ignore_tags") or ""
        ignored = tuple(t.strip(" ") for t in given.split(",") if t.strip(" "))
    for tag in ignored:
        if not TAG_NAME.fullmatch(tag):
            raise ApiError(400, f"ignore_tags: {tag!r} is not a tag name")
    ignored = ignored if tags else ()  # ignore_tags without tag handling: no tags to ignore
    return RequestOptions(format="html" if tags else "text", split_sentences=SPLIT[split]), ignored


def mark_ignored(text: str, tags: tuple[str, ...]) -> str:
    """``text`` with each opening tag of ``tags`` marked to be left as it is."""
    if not tags:
        return text
    names = "|".join(map(re.escape, tags))
    return re.sub(rf"<({names})(?=[\s/>])", lambda m: f"<{m.group(1)}{_KEPT}", text, flags=re.IGNORECASE)


def texts_of(fields: dict) -> list[str]:
    text = fields.get("text")
    if text is None or text == []:
        raise ApiError(400, "Parameter 'text' not specified.")
    texts = [text] if isinstance(text, str) else text
    if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
        raise ApiError(400, "Parameter 'text' must be a string or a list of strings.")
    return texts


def add_routes(app: FastAPI, deepl: DeepL) -> None:
    """Add DeepL's translate, languages, usage and glossary-language-pairs routes to ``app``."""
    dispatcher = deepl.dispatcher
    router, limits = dispatcher.router, dispatcher.service.limits
    keyed = deepl.key.key is not None
    tags = [schema.TAGS]

    @app.post(
        "/v2/translate",
        tags=tags,
        response_model=None,
        responses=schema.responses(schema.TranslateOut, 456, 503, 504, keyed=keyed),
        openapi_extra=schema.translate_body(limits, router.sources, router.targets),
    )
    async def deepl_translate(request: Request) -> dict:
        """DeepL's translate: ``text`` (repeated), ``target_lang``, optional ``source_lang`` (detected without),
        ``split_sentences``, ``tag_handling``, ``ignore_tags``, ``glossary_id``; answers ``translations``."""
        fields = await deepl.fields(request)
        texts = texts_of(fields)
        source, target = deepl.source(fields), deepl.target(fields)
        check_hints(fields)
        options, ignored = request_options(fields)
        glossary, source = deepl.glossary(fields, source, target)
        contract.check_texts("text", texts, limits)
        dispatcher.service.check_bounds(texts)
        characters = sum(map(len, texts))
        deepl.usage.charge(characters)
        lines = [mark_ignored(t, ignored) for t in texts]
        try:
            results, plan = await dispatcher.run(
                lines, source, [target] * len(lines), options, lambda: client_gone(request), glossary=glossary
            )
        except BaseException:  # nothing translated: nothing counted
            deepl.usage.add(-characters)
            raise
        out = []
        for text, result, route in zip(texts, results, plan.routes):
            found = source if source is not None else (route[0].source if route else target)
            answer = {
                "detected_source_language": base(deepl_code(found)),
                "text": result.text.replace(_KEPT, "") if ignored else result.text,
                "billed_characters": len(text),
            }
            if fields.get("model_type"):
                answer["model_type_used"] = "latency_optimized"
            out.append(answer)
        return {"translations": out}

    async def deepl_languages(request: Request) -> list[dict]:
        """DeepL's languages: ``type`` source (default) or target."""
        fields = await deepl.fields(request)
        kind = string_field(fields, "type") or "source"
        if kind not in ("source", "target"):
            raise ApiError(400, f"Value for 'type' not supported: {kind} (source or target)")
        return source_entries(router.sources) if kind == "source" else target_entries(router.targets)

    languages = {
        "tags": tags,
        "response_model": None,
        "responses": schema.responses(list[schema.LanguageOut], keyed=keyed),
    }
    app.get("/v2/languages", **languages, openapi_extra=schema.LANGUAGES_QUERY)(deepl_languages)
    app.post("/v2/languages", **languages, openapi_extra=schema.languages_body())(deepl_languages)

    async def deepl_usage(request: Request) -> dict:
        """Characters translated since the server started, and its limit (``--char-limit``)."""
        await deepl.fields(request)
        return deepl.usage.answer()

    usage = {"tags": tags, "response_model": None, "responses": schema.responses(schema.UsageOut, keyed=keyed)}
    app.get("/v2/usage", **usage)(deepl_usage)
    app.post("/v2/usage", **usage)(deepl_usage)

    @app.get(
        "/v2/glossary-language-pairs",
        tags=tags,
        response_model=None,
        responses=schema.responses(schema.PairsOut, keyed=keyed),
    )
    async def deepl_glossary_pairs(request: Request) -> dict:
        """The pairs a glossary may have: those a model translates directly."""
        await deepl.fields(request)
        pairs = dict.fromkeys((s, t) for spec in dispatcher.service.pool.specs.values() for s, t in spec.directions)
        return {"supported_languages": [{"source_lang": s.lower(), "target_lang": t.lower()} for s, t in pairs]}
