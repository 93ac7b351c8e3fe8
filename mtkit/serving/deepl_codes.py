"""DeepL's language codes and the server's: DeepL writes ``DE``, ``EN-GB``, ``PT-BR``, ``ZH-HANS``; the models'
codes are ISO 639 (``de``, ``en``, ``pt``, or with a region, ``pt_BR``).

A source is named by its language (``EN``); a target by its language or, where DeepL offers variants, a variant
(``EN-US``, ``EN-GB``, ``PT-BR``, ``PT-PT``, ``ZH-HANS``, ``ZH-HANT``): a variant goes to a model of that exact
variant where the server has one, else to the language's model. A code is matched without regard to case.
"""

from __future__ import annotations

from typing import Iterable, Optional

from mtkit.text.names import language_name

# the variants DeepL lists as targets for a language (its plain code is no target there)
VARIANTS = {"en": ("EN-GB", "EN-US"), "pt": ("PT-BR", "PT-PT"), "zh": ("ZH-HANS", "ZH-HANT")}


def deepl_code(code: str) -> str:
    """A model's code as DeepL writes it: ``pt_BR`` -> ``PT-BR``."""
    return code.replace("_", "-").upper()


def base(code: str) -> str:
    """The language of a DeepL code: ``EN-GB`` -> ``EN``."""
    return code.split("-")[0]


def model_code(given: str, codes: Iterable[str]) -> Optional[str]:
    """The code among ``codes`` (the server's) that DeepL's ``given`` names: the same code, else its language's;
    None where the server has neither."""
    wanted = deepl_code(given.strip())
    mine = {deepl_code(c): c for c in codes}
    return mine.get(wanted) or mine.get(base(wanted))


def source_entries(codes: Iterable[str]) -> list[dict]:
    """``GET /v2/languages``' source languages: each language once, by its DeepL code."""
    seen = dict.fromkeys(base(deepl_code(c)) for c in codes)
    return [{"language": code, "name": language_name(code.lower())} for code in seen]


def target_entries(codes: Iterable[str]) -> list[dict]:
    """``GET /v2/languages?type=target``: each target, a language with variants as its variants."""
    out: dict[str, str] = {}
    for code in codes:
        mine = deepl_code(code)
        for listed in VARIANTS.get(code.lower(), (mine,)):
            out.setdefault(listed, language_name(base(listed).lower()))
    return [{"language": code, "name": name, "supports_formality": False} for code, name in out.items()]
