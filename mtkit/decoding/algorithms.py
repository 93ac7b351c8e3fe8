"""The decoding algorithms, one entry each: its name, its own options (declared here once), what it can do and the
code that runs it. Plain data: importing this imports neither torch nor pydantic (a fast start-up).

The engines run an entry's own runner for them and name no algorithm; ``Options`` takes every registered
algorithm's options by name, refuses one that belongs to another algorithm and one a value of which the engine
cannot run (``Param.engines``); ``mtkit translate`` gets a flag for each option; a sentence's instructions are
checked against the entry's capabilities. Adding an algorithm is one module that calls ``register`` with a
``torch`` runner, and a ``ctranslate2`` runner where it runs there too:

    def run(model, src, options, common, generator, detokenize, **_) -> list[list[Decoded]]      # torch
    def run(engine, ids, guidance, options) -> list[list[Decoded]]                              # ctranslate2

where ``src`` is the (batch, src_len) PAD-padded source ids on the model's device, ``options`` the call's
``Options`` (``options.param("name")`` reads the entry's own options), ``common`` the keywords every search of
``mtkit.decoding`` takes (``max_len_a``, ``max_len_b``, ``need_attention``, ``guide``, ``parts``),
``generator`` a ``torch.Generator`` seeded by the option ``seed`` names, for an algorithm that draws, else None, and
``detokenize`` turns lists of target ids into text (for an algorithm that compares outputs as text), and
``decode_src`` lists of source ids into text (MBR's COMET utility reads the source). A
CTranslate2 runner gets the engine (``mtkit.inference.ct2_engine.Ct2Engine``), the sources' ids, each sentence's
``Guidance`` or None, and the options; it asks the engine for CTranslate2's hypotheses with ``engine.search``
(a beam, or draws from its seed's stream) and may rank them as it likes.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from typing import Any, Callable, Optional

from mtkit.errors import MtkitError


@dataclasses.dataclass(frozen=True)
class Param:
    """One option of an algorithm: its name (a keyword of ``mtkit.load``, ``--name-with-dashes`` on the command
    line unless ``flag`` says otherwise), type ("int", "float" or "str"), default, help and bounds or choices;
    ``count``: its value is a number of hypotheses each sentence decodes, which a server bounds per request (as it
    bounds ``nbest`` and the algorithm's ``rows`` option). ``engines``: the engines that run a value other than the
    default (empty: every engine of its algorithm), ``why`` says what the others lack. ``request``: a request to
    ``mtkit serve`` may set it (False for a path on the server's disk: set where the model loads only)."""

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
    engines: tuple[str, ...] = ()
    why: str = ""
    request: bool = True

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

    def check_engine(self, value: Any, engine: str) -> None:
        """``MtkitError`` in one line if ``engine`` cannot run ``value`` of this option."""
        if self.engines and engine not in self.engines and value != self.default:
            raise MtkitError(
                f"{self.cli_flag} {value!r} needs the {' or '.join(self.engines)} engine ({self.why}); "
                f"use --engine {self.engines[0]} or drop {self.cli_flag}"
            )

    def edges(self) -> tuple:
        """The values at the edges of its declared range (and its default): each must run."""
        if self.choices:
            return tuple(self.choices)
        found = [self.default]
        for bound, inside in ((self.ge, 0), (self.le, 0), (self.gt, 1), (self.lt, -1)):
            if bound is None:
                continue
            if not inside:
                found.append(self.kind(bound))
            elif self.type == "int":
                found.append(int(bound) + inside)
            else:  # the nearest double inside the bound
                found.append(math.nextafter(float(bound), math.inf if inside > 0 else -math.inf))
        return tuple(dict.fromkeys(found))


@dataclasses.dataclass(frozen=True)
class Algorithm:
    """A decoding algorithm.

    Attributes:
        name: what ``decoding.algorithm`` / ``--algorithm`` call it.
        summary: one line for ``--help`` and the docs.
        torch: "module:function" of its torch runner (see the module's docstring), imported when first used.
        ctranslate2: "module:function" of its CTranslate2 runner; "" where it runs on torch alone.
        params: its own options.
        nbest: it can return several hypotheses a sentence.
        constraints: it honours a sentence's constraints (phrases the output must contain).
        prefix: it honours a sentence's prefix and avoided phrases.
        alignments: its hypotheses can carry cross-attention.
        rows: the option whose value is the hypotheses it steps per sentence ("beam_size", "nbest"), or "" for one.
        seed: the option that seeds its draws, for an algorithm that draws; "" for one that does not.
        fixed: (option, value) pairs it decodes with whatever is asked (greedy: beam_size 1).
        switch: a keyword of ``mtkit.load`` that, true, chooses it (the API's ``sampling=True``).
    """

    name: str
    summary: str
    torch: str
    params: tuple[Param, ...] = ()
    nbest: bool = True
    constraints: bool = False
    prefix: bool = True
    alignments: bool = True
    rows: str = "beam_size"
    seed: str = ""
    ctranslate2: str = ""
    fixed: tuple[tuple[str, Any], ...] = ()
    switch: str = ""

    @property
    def engines(self) -> tuple[str, ...]:
        """The engines it has a runner for."""
        return ("torch", "ctranslate2") if self.ctranslate2 else ("torch",)

    def runner(self, engine: str = "torch") -> Callable:
        """Its runner for ``engine`` (see the module's docstring)."""
        where = self.ctranslate2 if engine == "ctranslate2" else self.torch
        module, _, function = where.partition(":")
        return getattr(importlib.import_module(module), function)


REGISTRY: dict[str, Algorithm] = {}
SEED_MAX = 2**32 - 1  # CTranslate2's seeds are 32-bit
# epsilon samples a feature draws for itself (the calibration's agreement; MBR's pseudo-references): Freitag et al.
# 2023's epsilon; ancestral samples from the whole distribution run long and make worse references
REFERENCE_EPSILON = 0.02
# MBR over a beam's 8-best: docs/benchmarks.md section 24 (chrF and BLEU above 16 epsilon samples, at half their time)
MBR_CANDIDATES = 8
COMET_MODEL = "Unbabel/wmt22-comet-da"  # mtkit.scoring.comet.DEFAULT_MODELS["comet"]


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


def names(default: str = "") -> str:
    """The registered algorithms as help text lists them: "beam (default), greedy, ..."."""
    return ", ".join(f"{n} (default)" if n == default else n for n in REGISTRY)


def refusal(values: dict, engine: str) -> Optional[str]:
    """Why ``engine`` cannot decode with the options ``values`` (an ``algorithm`` and its own options), or None."""
    chosen = get(values.get("algorithm", "beam"))
    if engine not in chosen.engines:
        return f"--algorithm {chosen.name} runs on the {' and '.join(chosen.engines)} engine(s), not {engine}"
    own = {p.name: p for p in chosen.params}
    for name, value in values.items():
        if name in own:
            try:
                own[name].check_engine(value, engine)
            except MtkitError as err:
                return str(err)
    return None


def switches() -> tuple[str, ...]:
    """The keywords that choose an algorithm when true (``Algorithm.switch``)."""
    return tuple(a.switch for a in REGISTRY.values() if a.switch)


def switched(values: Any) -> Optional[str]:
    """The algorithm a true switch chooses among ``values`` (a dict of keywords, or an object with them as
    attributes), or None."""
    for algorithm in REGISTRY.values():
        if algorithm.switch:
            on = values.get(algorithm.switch) if isinstance(values, dict) else getattr(values, algorithm.switch, False)
            if on:
                return algorithm.name
    return None


register(
    Algorithm(
        "beam",
        "beam search (beam_size hypotheses a sentence; with beam_size 1, nbest 1 and no constraint, greedy's loop)",
        torch="mtkit.decoding.search:run_beam",
        ctranslate2="mtkit.inference.ct2_runners:run_search",
        constraints=True,
    )
)
register(
    Algorithm(
        "greedy",
        "the most likely subword at every step (beam_size is not used)",
        torch="mtkit.decoding.single_path:run_greedy",
        ctranslate2="mtkit.inference.ct2_runners:run_search",
        nbest=False,
        rows="",
        fixed=(("beam_size", 1),),
    )
)
SAMPLING = register(
    Algorithm(
        "sampling",
        "nbest independent samples a sentence, drawn from the model's distribution (temperature, top-k, top-p)",
        torch="mtkit.decoding.sampling:run_sampling",
        ctranslate2="mtkit.inference.ct2_runners:run_sampling",
        params=(
            Param("temperature", "float", 1.0, "divides the log-probs before drawing", gt=0),
            Param("top_k", "int", 0, "sample among the k most likely subwords; 0: all", ge=0),
            Param(
                "top_p",
                "float",
                1.0,
                "sample in the smallest set of this much probability (the most likely subword always)",
                gt=0,
                le=1,
            ),
            Param(
                "epsilon",
                "float",
                0.0,
                "sample among subwords of at least this probability; 0: all",
                ge=0,
                lt=1,
                engines=("torch",),
                why="CTranslate2 samples by top-k, top-p and temperature",
            ),
            Param("seed", "int", 0, "seed of the draws", ge=0, le=SEED_MAX),
        ),
        rows="nbest",
        seed="seed",
        switch="sampling",
    )
)
register(
    Algorithm(
        "mbr",
        "minimum Bayes risk: of mbr_candidates candidates, the one that agrees most with the others (chrF, BLEU or COMET)",
        torch="mtkit.decoding.mbr:run_mbr",
        ctranslate2="mtkit.inference.ct2_runners:run_mbr",
        params=(
            Param("mbr_candidates", "int", MBR_CANDIDATES, "candidates a sentence", ge=2, le=1024, count=True),
            Param(
                "mbr_epsilon",
                "float",
                0.0,
                "candidates by epsilon sampling at this epsilon; 0: a beam's n-best",
                ge=0,
                lt=1,
                engines=("torch",),
                why="CTranslate2 has no epsilon sampling",
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
            Param(
                "mbr_utility",
                "str",
                "chrf",
                "the sentence metric candidates agree by (comet: COMET-22 of comet_model, on the source too)",
                choices=("chrf", "bleu", "comet"),
            ),
            Param(
                "comet_model",
                "str",
                COMET_MODEL,
                "COMET-22 model of mbr_utility comet: a directory in the hub's layout or a hub name in the local cache",
                request=False,
            ),
            Param("mbr_seed", "int", 0, "seed of the draws", ge=0, le=SEED_MAX),
        ),
        rows="mbr_candidates",
        seed="mbr_seed",
    )
)


def draws(count: int, epsilon: float = REFERENCE_EPSILON, seed: int = 0) -> dict:
    """The decoding options of ``count`` epsilon samples a sentence from ``seed``'s stream: what a feature that
    draws for itself asks of the registry (``refusal`` says whether an engine can)."""
    return {"algorithm": SAMPLING.name, "nbest": count, "epsilon": epsilon, "seed": seed}
