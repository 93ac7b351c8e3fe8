"""A model's languages, read from a run's ``data`` section: its language token and its (source, target) codes.

Plain functions over a section already validated (no schema import), so that loading an export stays light."""

from __future__ import annotations


def language_tag(lang: str, template: str = "<2{lang}>") -> str:
    """The token that asks a multilingual model for target language ``lang``: ``<2de>`` (or, with Marian's
    template ``>>{lang}<<``, ``>>deu<<``)."""
    return template.replace("{lang}", lang)


LISTED_IN_FULL = 12  # language codes a message lists in full; of more, it names the count and the nearest few


def nearest_codes(codes, wrong: str, n: int = 3) -> list[str]:
    """The ``n`` codes nearest to ``wrong`` (difflib's ratio), for a message about a language a model lacks."""
    import difflib

    return difflib.get_close_matches(wrong, list(codes), n=n, cutoff=0.0)


def run_sources(data) -> tuple[str, ...]:
    """The languages a run translates from: a many-to-many model's languages, its directions' sources (in the order
    they first come), or its one source language."""
    if data.languages:
        return tuple(data.languages)
    if data.directions:
        return tuple(dict.fromkeys(d.src_lang for d in data.directions))
    return (data.src_lang,)


def run_languages(data) -> tuple[tuple[str, str], tuple[str, ...]]:
    """(source, target) codes of a run's ``data`` section, and a multilingual run's targets (() otherwise). A
    multilingual run's source is its directions' one source language, or "" where they have several."""
    if not data.multilingual:
        return (data.src_lang, data.tgt_lang), ()
    if data.languages:  # many-to-many: every language is a source and a target
        return ("", "mul"), tuple(data.languages)
    sources = {d.src_lang for d in data.directions}
    return (sources.pop() if len(sources) == 1 else "", "mul"), tuple(data.targets)
