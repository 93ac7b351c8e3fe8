"""``POST /v1/translate``'s requests: the request models, each algorithm's options among them (their schema is at
``/openapi.json``; the answers are in answers.py)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    WithJsonSchema,
    create_model,
    model_validator,
)

from mtkit.decoding import algorithms
from mtkit.errors import MtkitError
from mtkit.inference.segments import with_parallel
from mtkit.text.glossary import MAX_ENTRIES, MAX_TERM_CHARS, check_term

# a phrase holds a character that is not whitespace (str.isspace's), as mtkit.inference.segments requires
_VISIBLE = r"[^\t-\r\x1c- \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"  # a character not whitespace


def _not_blank(phrase: str) -> str:
    if not phrase.strip():
        raise ValueError("a phrase must not be empty or blank; give a word or phrase")
    return phrase


_CONTROL = "\\x00-\\x1f\\x7f\\u2028\\u2029"  # what no glossary term holds (text.glossary.check_term)
_TERM = f"^[^{_CONTROL}]*[^{_CONTROL} \\x85\\xa0\\u1680\\u2000-\\u200a\\u202f\\u205f\\u3000][^{_CONTROL}]*$"


def _term(term: str) -> str:
    try:
        return check_term(term.strip(), "glossary")
    except MtkitError as err:
        raise ValueError(str(err)) from None


# a glossary term: its spaces at either end dropped, a visible character, no tab, line break or control character
Term = Annotated[StrictStr, AfterValidator(_term)]

_TERM_SCHEMA = {"type": "string", "maxLength": MAX_TERM_CHARS, "pattern": _TERM}
Entries = Annotated[
    dict[Term, Term],
    Field(max_length=MAX_ENTRIES),
    WithJsonSchema(
        {
            "type": "object",
            "maxProperties": MAX_ENTRIES,
            "propertyNames": _TERM_SCHEMA,
            "additionalProperties": _TERM_SCHEMA,
        }
    ),
]

# the pattern tells /openapi.json's readers (and schemathesis) what the validator refuses, in a readable message
Phrase = Annotated[StrictStr, AfterValidator(_not_blank), WithJsonSchema({"type": "string", "pattern": _VISIBLE})]


def _integral(value: Any) -> Any:
    """A float with no fraction is the integer JSON Schema takes it for (4.0 is 4)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


Count = Annotated[StrictInt, Field(ge=1), BeforeValidator(_integral)]  # a count of one or more


class RequestOptions(BaseModel):
    """A request's decoding options (``mtkit.load``'s ``Options`` hold the rest, fixed when the model loaded)."""

    model_config = ConfigDict(extra="forbid", title="Options")  # the name clients see in /openapi.json
    nbest: Optional[Count] = Field(None, description="Hypotheses per sentence, best first.")
    scores: StrictBool = Field(
        False, description="Give each hypothesis its score, log-probability, subwords and their log-probabilities."
    )
    alignments: StrictBool = Field(
        False, description="Give each hypothesis its cross-attention: a row per target subword and EOS (torch engine)."
    )
    format: Literal["text", "html"] = Field(
        "text", description="html: each text is an HTML fragment; its tags go around the words they enclose."
    )
    split_sentences: StrictBool = Field(
        True, description="Cut each text into sentences and join their translations with its own whitespace."
    )
    # the search's bounds a call may set (mtkit.load's keywords), within the server's: beyond these, a length
    # penalty overflows a float and a limit outgrows every model's positions
    length_penalty: Optional[Annotated[StrictFloat, Field(ge=0, le=10, allow_inf_nan=False)]] = Field(
        None, description="GNMT's alpha (default: the model's); 0: the raw log-probability ranks the hypotheses."
    )
    max_len_a: Optional[Annotated[StrictFloat, Field(ge=0, le=10, allow_inf_nan=False)]] = Field(
        None, description="Target subwords allowed per source subword (default: the model's)."
    )
    max_len_b: Optional[Annotated[StrictInt, Field(ge=0, le=1024), BeforeValidator(_integral)]] = Field(
        None, description="Target subwords allowed beyond those (default: the model's)."
    )

    def decoding(self) -> tuple[tuple[str, Any], ...]:
        """The decoding options this request gives, as (name, value) pairs: the search's bounds (``CALL``), the
        algorithm and its options (``options_model``'s fields beyond these)."""
        own = (type(self).model_fields.keys() - RequestOptions.model_fields.keys()) | set(CALL)
        return tuple((name, getattr(self, name)) for name in sorted(own) if getattr(self, name) is not None)


CALL = ("length_penalty", "max_len_a", "max_len_b")  # RequestOptions' fields that are decoding options


def _option_field(owner: algorithms.Algorithm, param: algorithms.Param, most: Optional[int] = None) -> tuple:
    """A registered algorithm's option as an optional field of a request's options; a count of hypotheses (its
    ``count`` or ``rows`` option) at most ``most`` (None: as registered)."""
    bounds = {key: getattr(param, key) for key in ("ge", "gt", "le", "lt") if getattr(param, key) is not None}
    if most is not None and (param.count or owner.rows == param.name):
        bounds["le"] = min(bounds.get("le", most), most)
    if param.choices:
        kind = Literal[param.choices]
    elif param.type == "int":
        whole = {key: int(value) if float(value).is_integer() else value for key, value in bounds.items()}
        kind = Annotated[StrictInt, Field(**whole), BeforeValidator(_integral)]
    elif param.type == "float":
        kind = Annotated[StrictFloat, Field(allow_inf_nan=False, **bounds)]
    else:
        kind = StrictStr
    about = f"With algorithm {owner.name}: {param.help} (default {param.default})."
    return Optional[kind], Field(None, description=about)


def _options_of_their_algorithm(options: RequestOptions) -> RequestOptions:
    """An algorithm's option is given with that algorithm named."""
    for name, _value in options.decoding():
        if name == "algorithm" or name in CALL:
            continue
        owner = algorithms.params()[name][0].name
        if options.algorithm != owner:
            raise ValueError(f'{name} is an option of algorithm {owner}: add "algorithm": "{owner}" or drop it')
    return options


def options_model(names: Optional[list[str]] = None, most: Optional[int] = None) -> type[RequestOptions]:
    """``RequestOptions`` with ``algorithm`` and the options of each algorithm in ``names`` (default: every one
    registered now, ``mtkit.decoding.algorithms``): a request may decode with another algorithm than the loaded
    one (the loaded one's options left behind), e.g. ``{"algorithm": "sampling", "top_p": 0.9, "nbest": 4}``.
    ``most``: the most hypotheses a sentence may decode (``ServeLimits.max_hypotheses``), bounding ``nbest`` and
    each option that counts them (``mbr_candidates``: MBR then gives at most its distinct candidates)."""
    chosen = [algorithms.get(name) for name in (list(algorithms.REGISTRY) if names is None else names)]
    fields = {
        "algorithm": (
            Optional[Literal[tuple(a.name for a in chosen)]],
            Field(
                None,
                description="The decoding algorithm (default: the model's own): "
                + "; ".join(f"{a.name}: {a.summary}" for a in chosen)
                + ".",
            ),
        ),
        **{p.name: _option_field(a, p, most) for a in chosen for p in a.params if p.request},
    }
    if most is not None:
        fields["nbest"] = (Optional[Annotated[Count, Field(le=most)]], RequestOptions.model_fields["nbest"])
    return create_model(
        "RequestOptions",
        __base__=RequestOptions,
        __module__=__name__,
        __validators__={"_own_algorithm": model_validator(mode="after")(_options_of_their_algorithm)},
        **fields,
    )


class SegmentIn(BaseModel):
    """A sentence with its decoding instructions (docs/decoding.md)."""

    model_config = ConfigDict(extra="forbid")
    text: StrictStr = Field(..., description="The sentence to translate.")
    prefix: Optional[StrictStr] = Field(None, description="The translation starts with this text.")
    constraints: list[Phrase] = Field([], description="Phrases the translation must contain.")
    avoid: list[Phrase] = Field([], description="Phrases the translation must not contain.")
    target: Optional[StrictStr] = Field(None, description="Its target language (a multilingual model's).")


def _items(value: Any) -> Any:
    """A sentence or an object alone is a list of one; a sentence is an object with only ``text``."""
    if isinstance(value, (str, dict)):
        value = [value]
    return [{"text": x} if isinstance(x, str) else x for x in value] if isinstance(value, list) else value


Sentences = Annotated[
    list[SegmentIn], BeforeValidator(_items, json_schema_input_type=Union[str, SegmentIn, list[Union[str, SegmentIn]]])
]


IN_ORDER = (
    " Entry i goes with sentence i, unless the sentence's object has its own; a shorter list leaves the sentences"
    " after it without, entries past the last sentence are not used."
)


class TranslateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: Sentences = Field(
        ..., description="A sentence or a list of sentences; each a string or an object with its instructions."
    )
    prefix: Optional[list[Optional[StrictStr]]] = Field(None, description="A prefix (or null) per sentence." + IN_ORDER)
    constraints: Optional[list[Optional[list[Phrase]]]] = Field(
        None, description="A list of phrases to include (or null) per sentence." + IN_ORDER
    )
    avoid: Optional[list[Optional[list[Phrase]]]] = Field(
        None, description="A list of phrases to avoid (or null) per sentence." + IN_ORDER
    )
    target: Optional[StrictStr] = Field(
        None,
        description="The target language (default: the one the source translates into); a text item's own wins.",
    )
    source: Optional[StrictStr] = Field(
        None,
        description="The source language, or auto: each text's detected among the server's sources (default: the"
        " server's one source, auto where it reads several).",
    )
    model: Optional[StrictStr] = Field(
        None, description="The model to translate with, among those serving the pair (GET /v1/models)."
    )
    glossary: Optional[Union[StrictStr, Entries]] = Field(
        None,
        description="A glossary's id (GET /v2/glossaries), or its entries {source term: target term}: each sentence"
        " holding a source term (whole words, any case) carries its target term; of source terms that differ only"
        " in case, the first.",
    )
    options: RequestOptions = Field(default_factory=RequestOptions)

    @classmethod
    def with_options(cls, options: type[RequestOptions]) -> type["TranslateRequest"]:
        """This request with ``options`` (an ``options_model``) as its ``options``."""
        return create_model(
            "TranslateRequest",
            __base__=cls,
            __module__=__name__,
            options=(options, Field(default_factory=options, description="How to decode and what to give back.")),
        )

    def lines(self) -> list:
        """The sentences with their instructions merged from the parallel lists.

        Returns:
            One per sentence: a plain str when it has no instructions, else a ``segments.Segment``.

        Raises:
            MtkitError: an instruction that does not fit its sentence.
        """
        items = [x.model_dump() for x in self.text]
        lists = {"prefix": self.prefix, "constraints": self.constraints, "avoid": self.avoid}
        for i, item in enumerate(items):
            if item["target"] == "":
                raise MtkitError(f"text item {i + 1}: target '' is no language; leave it out for the request's")
            if item["target"] is None:
                item["target"] = self.target
            for key, values in lists.items():  # the sentence's own instruction wins
                if values is not None and i < len(values) and values[i] is not None and not item[key]:
                    item[key] = values[i]
        segments = with_parallel(items, None, None, None, "text item")
        return [s.text if s.plain and s.target is None else s for s in segments]  # plain: the plain string path

    def instructed(self) -> bool:
        """Whether any sentence or parallel list, used or not, carries an instruction."""
        own = any(x.prefix or x.constraints or x.avoid for x in self.text)
        return own or any(any(v) for v in (self.prefix, self.constraints, self.avoid) if v)
