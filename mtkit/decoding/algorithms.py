"""The decoding algorithms, one entry each: its name, its own options (declared here once), what it can do and the
code that runs it. Plain data: importing this imports neither torch nor pydantic (a fast start-up).

The engines dispatch by ``Options.algorithm``; ``Options`` takes every registered algorithm's options by name and
refuses one that belongs to another algorithm; ``mtkit translate`` gets a flag for each option; a sentence's
instructions are checked against the entry's capabilities. Adding an algorithm is one module that calls
``register`` with a ``torch`` runner:

    def run(model, src, options, common, generator, detokenize, **_) -> list[list[Decoded]]

where ``src`` is the (batch, src_len) PAD-padded source ids on the model's device, ``options`` the call's
``Options`` (``options.param("name")`` reads the entry's own options), ``common`` the keywords every search of
``mtkit.decoding`` takes (``max_len_a``, ``max_len_b``, ``need_attention``, ``guide``, ``parts``),
``generator`` a ``torch.Generator`` seeded by the option ``seed`` names, for an algorithm that draws, else None, and
``detokenize`` turns lists of target ids into text (for an algorithm that compares outputs as text).
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any, Callable, Optional

from mtkit.errors import MtkitError


@dataclasses.dataclass(frozen=True)
class Param:
    """One option of an algorithm: its name (a keyword of ``mtkit.load``, ``--name-with-dashes`` on the command
    line unless ``flag`` says otherwise), type ("int", "float" or "str"), default, help and bounds or choices;
    ``count``: its value is a number of hypotheses each sentence decodes, which a server bounds per request (as it
    bounds ``nbest`` and the algorithm's ``rows`` option)."""

    name: str
    type: str
    default: Any
    help: str = ""
    ge: Optional[float] = None
    gt: Optional[float] = None
    le: Optional[float] = None
    lt: Optional[float] = None
    choices: tuple = ()
    flag: str = ""
    count: bool = False

    @property
    def cli_flag(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def kind(self) -> type:
        """The Python type of its values."""
        return {"int": int, "float": float, "str": str}[self.type]

    def convert(self, value: Any) -> Any:
        """``value`` as this option's type (a command line's string converted), or ``MtkitError``."""
        kind = self.kind
        if isinstance(value, bool) or (self.type == "int" and isinstance(value, float) and not value.is_integer()):
            raise MtkitError(f"{self.cli_flag} {value!r}: input should be a valid {self.type}")
        try:
            return kind(value)
        except (TypeError, ValueError):
            raise MtkitError(f"{self.cli_flag} {value!r}: input should be a valid {self.type}") from None

    def check(self, value: Any) -> Any:
        """The value converted and in range, or ``MtkitError`` in one line naming the flag."""
        value = self.convert(value)
        bounds = (
            (self.gt, lambda v, b: v > b, "greater than"),
            (self.ge, lambda v, b: v >= b, "greater than or equal to"),
            (self.lt, lambda v, b: v < b, "less than"),
            (self.le, lambda v, b: v <= b, "less than or equal to"),
        )
        for bound, holds, words in bounds:
            if bound is not None and not holds(value, bound):
                shown = int(bound) if float(bound).is_integer() else bound
                raise MtkitError(f"{self.cli_flag} {value!r}: input should be {words} {shown}")
        if self.choices and value not in self.choices:
            raise MtkitError(f"{self.cli_flag} {value!r}: use {' or '.join(map(str, self.choices))}")
        return value


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """A decoding algorithm.

    Attributes:
        name: what ``decoding.algorithm`` / ``--algorithm`` call it.
        summary: one line for ``--help`` and the docs.
        torch: "module:function" of its torch runner (see the module's docstring), imported when first used.
        params: its own options.
        nbest: it can return several hypotheses a sentence.
        constraints: it honours a sentence's constraints (phrases the output must contain).
        prefix: it honours a sentence's prefix and avoided phrases.
        alignments: its hypotheses can carry cross-attention.
        engines: the engines that run it.
        rows: the option whose value is the hypotheses it steps per sentence ("beam_size", "nbest"), or "" for one.
        seed: the option that seeds its draws, for an algorithm that draws; "" for one that does not.
    """

    name: str
    summary: str
    torch: str
    params: tuple[Param, ...] = ()
    nbest: bool = True
    constraints: bool = False
    prefix: bool = True
    alignments: bool = True
    engines: tuple[str, ...] = ("torch",)
    rows: str = "beam_size"
    seed: str = ""

    def runner(self) -> Callable:
        module, _, function = self.torch.partition(":")
        return getattr(importlib.import_module(module), function)


REGISTRY: dict[str, Algorithm] = {}


def register(algorithm: Algorithm) -> Algorithm:
    """Add ``algorithm`` (its options' names must not be another algorithm's); returns it."""
    taken = {p.name: a.name for a in REGISTRY.values() if a.name != algorithm.name for p in a.params}
    clash = [p.name for p in algorithm.params if p.name in taken]
    if clash:
        raise ValueError(f"option(s) {', '.join(clash)} of {algorithm.name} belong to {taken[clash[0]]} already")
    REGISTRY[algorithm.name] = algorithm
    return algorithm


def get(name: str) -> Algorithm:
    """The algorithm called ``name``, or ``MtkitError`` listing them."""
    found = REGISTRY.get(name)
    if found is None:
        raise MtkitError(f"--algorithm {name!r}: unknown; use one of {', '.join(REGISTRY)}")
    return found


def params() -> dict[str, tuple[Algorithm, Param]]:
    """Every registered option by name, with the algorithm it belongs to."""
    return {p.name: (a, p) for a in REGISTRY.values() for p in a.params}


register(
    Algorithm(
        "beam",
        "beam search (beam_size hypotheses a sentence; with beam_size 1, nbest 1 and no constraint, greedy's loop)",
        torch="mtkit.decoding.search:run_beam",
        constraints=True,
        engines=("torch", "ctranslate2"),
    )
)
register(
    Algorithm(
        "greedy",
        "the most likely subword at every step (beam_size is not used)",
        torch="mtkit.decoding.single_path:run_greedy",
        nbest=False,
        engines=("torch", "ctranslate2"),
        rows="",
    )
)
register(
    Algorithm(
        "sampling",
        "nbest independent samples a sentence, drawn from the model's distribution (temperature, top-k, top-p)",
        torch="mtkit.decoding.sampling:run_sampling",
        params=(
            Param("temperature", "float", 1.0, "divides the log-probs before drawing", gt=0),
            Param("top_k", "int", 0, "sample among the k most likely subwords; 0: all", ge=0),
            Param("top_p", "float", 1.0, "sample in the smallest set of this much probability", gt=0, le=1),
            Param("epsilon", "float", 0.0, "sample among subwords of at least this probability; 0: all", ge=0, lt=1),
            Param("seed", "int", 0, "seed of the draws"),
        ),
        engines=("torch", "ctranslate2"),
        rows="nbest",
        seed="seed",
    )
)
register(
    Algorithm(
        "mbr",
        "minimum Bayes risk: of mbr_candidates candidates, the one that agrees most with the others (chrF or BLEU)",
        torch="mtkit.decoding.mbr:run_mbr",
        params=(
            Param("mbr_candidates", "int", 16, "candidates a sentence", ge=2, le=1024, count=True),
            Param(
                "mbr_epsilon",
                "float",
                0.02,
                "candidates by epsilon sampling at this epsilon; 0: a beam's n-best",
                ge=0,
                lt=1,
            ),
            Param(
                "mbr_pseudo_references",
                "int",
                0,
                "references drawn apart by epsilon sampling (mbr_epsilon, or 0.02); 0: the candidates are the references",
                ge=0,
                le=1024,
                count=True,
            ),
            Param("mbr_utility", "str", "chrf", "the sentence metric candidates agree by", choices=("chrf", "bleu")),
            Param("mbr_seed", "int", 0, "seed of the draws"),
        ),
        engines=("torch", "ctranslate2"),
        rows="mbr_candidates",
        seed="mbr_seed",
    )
)
