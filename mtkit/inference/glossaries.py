"""A glossary applied to the sentences of a call: each sentence holding source terms gets their target terms as
constraints (beam search, torch engine), added to any it has; every other sentence is decoded as without the
glossary."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Optional, Union

from mtkit.errors import MtkitError
from mtkit.inference.segments import Segment
from mtkit.text.glossary import Glossary

GlossaryLike = Union[Glossary, dict, list, tuple, str, Path, None]


def as_glossary(glossary: GlossaryLike) -> Optional[Glossary]:
    """A ``Glossary`` from what a call may give: one, a dict {source: target}, a list of (source, target) pairs,
    or the path of a TSV or CSV file; None for none (an empty dict or list too).

    Raises:
        MtkitError: entries a glossary cannot hold, a file that is not a glossary.
    """
    if glossary is None or isinstance(glossary, Glossary):
        return glossary
    if isinstance(glossary, (str, Path)):
        return Glossary.read(Path(glossary))
    if isinstance(glossary, dict):
        entries = tuple(glossary.items())
    elif isinstance(glossary, (list, tuple)):
        entries = tuple(tuple(e) if isinstance(e, (list, tuple)) else e for e in glossary)
    else:
        raise MtkitError(f"glossary: expected a Glossary, a dict, a list of pairs or a file, not {type(glossary)}")
    try:
        return Glossary(entries) if entries else None
    except MtkitError as err:
        raise MtkitError(f"glossary: {err}") from None


def guide(engine, sentences: list[Segment], guidance: list, glossary: Optional[Glossary], options) -> list:
    """``guidance`` (one entry per sentence, None for a plain one) with the glossary's constraints: a sentence
    holding source terms is guided by its own instructions plus their target terms.

    Raises:
        MtkitError: terms that cannot be constraints under ``options`` (the CTranslate2 engine, an algorithm
            without constraints), naming the sentence.
    """
    if glossary is None or not glossary.entries:
        return guidance
    out = list(guidance)
    for i, sentence in enumerate(sentences):
        terms = glossary.terms(sentence.text)
        if not terms:
            continue
        guided = dataclasses.replace(sentence, constraints=tuple(dict.fromkeys((*sentence.constraints, *terms))))
        try:
            out[i] = engine.guidance(guided, options)
        except MtkitError as err:
            raise MtkitError(f"glossary terms in {_short(sentence.text)}: {err}") from None
    return out


class WithGlossary:
    """A model whose every ``translate_batch`` follows ``glossary``: what a document's format module is handed
    (``documents.files`` calls ``check_format`` and ``translate_batch`` only)."""

    def __init__(self, model, glossary: Optional[Glossary]):
        self.model, self.glossary = model, glossary

    def check_format(self, *args, **kwargs):
        return self.model.check_format(*args, **kwargs)

    def translate_batch(self, lines, **kwargs):
        return self.model.translate_batch(lines, glossary=self.glossary, **kwargs)


def _short(text: str, most: int = 40) -> str:
    return repr(text if len(text) <= most else text[: most - 3] + "...")
