"""DeepL's language codes and the server's: DeepL writes ``DE``, ``EN-GB``, ``PT-BR``, ``ZH-HANS``; the models'
codes are ISO 639 (``de``, ``en``, ``pt``, or with a region, ``pt_BR``).

A source is named by its language (``EN``); a target by its language or, where DeepL offers variants, a variant
(``EN-US``, ``EN-GB``, ``PT-BR``, ``PT-PT``, ``ZH-HANS``, ``ZH-HANT``), each going to the language's model (a
model of that exact variant, ``pt_BR``, is named by it alone). A code is read in upper or lower case.
"""

from __future__ import annotations

from typing import Iterable, Optional

from mtkit.text.names import language_name

# the variants DeepL lists as targets for a language (its plain code is taken too, as DeepL takes it)
VARIANTS = {"en": ("EN-GB", "EN-US"), "pt": ("PT-BR", "PT-PT"), "zh": ("ZH-HANS", "ZH-HANT")}


def deepl_code(code: str) -> str:
    """A model's code as DeepL writes it: ``pt_BR`` -> ``PT-BR``."""
    return code.replace("_", "-").upper()


def base(code: str) -> str:
    """The language of a DeepL code: ``EN-GB`` -> ``EN``."""
    return code.split("-")[0]


def sources(codes: Iterable[str]) -> dict[str, str]:
    """The source codes a request may give, each with the model code it names."""
    return {deepl_code(c): c for c in codes}


def targets(codes: Iterable[str]) -> dict[str, str]:
    """The target codes a request may give (those ``GET /v2/languages?type=target`` lists, and each language's
    plain code), each with the model code it names."""
    out: dict[str, str] = {}
    for code in codes:
        out.setdefault(deepl_code(code), code)
        for variant in VARIANTS.get(code.lower(), ()):
            out.setdefault(variant, code)
    return out


def model_code(given: str, table: dict[str, str]) -> Optional[str]:
    """The model code ``given`` names in ``table`` (``sources`` or ``targets``), in upper or lower case; None for
    a code the server does not have."""
    if given not in (given.upper(), given.lower()):
        return None
    return table.get(given.upper())


def spellings(table: dict[str, str]) -> list[str]:
    """Every way a request may write a code of ``table``: upper and lower case."""
    return [c for code in table for c in dict.fromkeys((code, code.lower()))]


def source_entries(codes: Iterable[str]) -> list[dict]:
    """``GET /v2/languages``' source languages."""
    return [{"language": code, "name": language_name(base(code).lower())} for code in sources(codes)]


def target_entries(codes: Iterable[str]) -> list[dict]:
    """``GET /v2/languages?type=target``: each target, a language with variants as its variants."""
    listed = [code for code in targets(codes) if code.lower() not in VARIANTS]
    return [{"language": c, "name": language_name(base(c).lower()), "supports_formality": False} for c in listed]
