"""``POST /v1/translate``'s schema in ``/openapi.json`` made this server's: its bounds on texts and hypotheses, its
languages and models, what format html takes and which algorithms a request may name (``tighten``), so that a
request the schema accepts is one the server accepts (contract.py says what stays for 413)."""

from __future__ import annotations

from typing import Any, Optional, Sequence

from mtkit.decoding import algorithms as registry
from mtkit.errors import MtkitError
from mtkit.flags import ServeLimits
from mtkit.serving.contract import most_sentences


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
    """A request naming model ``name`` reads and writes its languages only (a target among its sources too: a text
    already in it stays as it is, ``routing.Router.route``)."""
    sources = list(dict.fromkeys(s for s, _ in pairs))
    targets = list(dict.fromkeys([*(t for _, t in pairs), *sources]))
    return {
        "if": {"properties": {"model": {"const": name}}, "required": ["model"]},
        "then": {"properties": {"source": {"enum": [None, "auto", *sources]}, "target": {"enum": [None, *targets]}}},
    }
