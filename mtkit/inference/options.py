"""The decoding options: one type, built from a run's ``decoding:`` section plus overrides and checked once.

The command line (``mtkit translate``, ``mtkit serve``), ``mtkit.load``, the server's requests and both engines
use ``Options``; every rule that ties two options together is in ``Options.check`` (and, for one sentence's
instructions, ``check_instructions``), so the same request meets the same answer or the same error at every
front door.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from mtkit.decoding import algorithms
from mtkit.errors import MtkitError
from mtkit.inference import plain_fields
from mtkit.interop.ct2_export import QUANTIZATIONS as CT2_COMPUTE_TYPES

# The schema's defaults (mtkit/config/schema.py, mtkit/flags.py) as plain_fields holds them: Options repeats none
# of them, and neither pydantic nor the schema is imported unless a value needs its verdict (a fast start-up).
_DECODING = {name: field["default"] for name, field in plain_fields.DECODING.items()}

ALIGNMENTS_NEED_TORCH = "alignments (--alignments, --plot-attention) need the torch engine (--engine torch)"


@dataclasses.dataclass(frozen=True)
class Options:
    """Every decoding option: how the search runs, what each hypothesis carries, where the model runs.

    Every instance is checked when made (``MtkitError`` otherwise); ``Options.build`` makes one from a run's
    ``decoding`` section. As in CTranslate2, the ``LOAD_TIME`` options (engine, device, dtype, threads, shortlist)
    are fixed when a model is loaded; the others are a call's (``for_call``): the algorithm and its options, the
    search's bounds, what each hypothesis carries, the batches.

    ``algorithm`` names an entry of ``mtkit.decoding.algorithms`` (a true switch of an entry, ``sampling=True``, is
    that entry; an entry's ``fixed`` options, greedy's beam_size 1, hold whatever is asked). The algorithms' own
    options are in ``params``, those given, as (name, value) pairs: ``build`` and ``replace`` take them by name,
    and ``options.top_p`` (or ``param``) reads one, its registered default where it was not given.
    """

    engine: str = "torch"
    algorithm: str = _DECODING["algorithm"]
    beam_size: int = _DECODING["beam_size"]
    length_penalty: float = _DECODING["length_penalty"]
    max_len_a: float = _DECODING["max_len_a"]
    max_len_b: int = _DECODING["max_len_b"]
    nbest: int = _DECODING["nbest"]
    stopping: str = _DECODING["stopping"]
    search: str = _DECODING["search"]  # the CTranslate2 engine's: ranked as mtkit ranks, or CTranslate2's own
    batch_size: int = _DECODING["batch_size"]
    batch_tokens: Optional[int] = _DECODING["batch_tokens"]
    step_rows: int = _DECODING["step_rows"]
    chunk_size: int = _DECODING["chunk_size"]
    sampling: bool = False  # the API's switch of the algorithm registered with it (``Algorithm.switch``)
    params: tuple[tuple[str, Any], ...] = ()  # the algorithms' own options that were given, sorted by name
    scores: bool = False  # fill score, log_prob and token_log_probs (CTranslate2: a rescoring pass)
    alignments: bool = False  # fill each hypothesis's cross-attention
    split_sentences: bool = True  # cut each line into sentences, translate them, join them with its whitespace
    device: str = _DECODING["device"]
    dtype: Optional[str] = _DECODING["dtype"]  # None: the engine's own default (CTranslate2: the exported type)
    threads: Optional[int] = _DECODING["threads"]
    shortlist: int = _DECODING["shortlist"]
    shortlist_frequent: int = _DECODING["shortlist_frequent"]

    def __post_init__(self):
        switched = algorithms.switched(self)
        if switched and self.algorithm == _DECODING["algorithm"]:
            object.__setattr__(self, "algorithm", switched)
        chosen = algorithms.REGISTRY.get(self.algorithm)
        if chosen is not None:
            if chosen.switch:
                object.__setattr__(self, chosen.switch, True)
            for name, value in chosen.fixed:
                object.__setattr__(self, name, value)
        self.check()

    def __getattr__(self, name: str) -> Any:  # an algorithm's own option: options.top_p
        if name.startswith("_") or name not in algorithms.params():
            raise AttributeError(name)
        return self.param(name)

    @property
    def chosen(self) -> algorithms.Algorithm:
        """The registry's entry of ``algorithm``."""
        return algorithms.get(self.algorithm)

    @property
    def rows_per_sentence(self) -> int:
        """The hypotheses the algorithm steps per sentence: the value of its ``rows`` option, 1 where it has none."""
        rows = self.chosen.rows
        return getattr(self, rows) if rows else 1

    @property
    def most_hypotheses(self) -> int:
        """The most hypotheses a sentence may ask for (``nbest``) under this algorithm: 0 for no bound of its own
        (samples; an algorithm whose width is an option of its own, which a call may raise)."""
        chosen = self.chosen
        if not chosen.nbest:
            return 1
        return 0 if chosen.rows == "nbest" or chosen.rows in algorithms.params() else self.rows_per_sentence

    def param(self, name: str) -> Any:
        """The value of an algorithm's own option ``name``: as given, else its registered default."""
        given = dict(self.params)
        if name in given:
            return given[name]
        return algorithms.params()[name][1].default

    @staticmethod
    def _split(values: dict) -> tuple[dict, dict]:
        """``values`` as (Options' own fields, the algorithms' options)."""
        registered = algorithms.params()
        return (
            {k: v for k, v in values.items() if k not in registered},
            {k: v for k, v in values.items() if k in registered},
        )

    @classmethod
    def build(cls, decoding=None, **overrides) -> "Options":
        """The options of a run's ``decoding`` section with ``overrides`` applied.

        Args:
            decoding: the run's ``decoding`` section, a ``config.DecodingConfig`` or its ``model_dump()`` (default:
                the schema's defaults).
            **overrides: any field of ``Options``; None keeps the section's value.

        Returns:
            The checked options.

        Raises:
            MtkitError: an unknown name, a value out of its range, or two options that do not go together.
        """
        given, own = cls._split({k: v for k, v in overrides.items() if v is not None})
        unknown = sorted(set(given) - _FIELD_NAMES - {"params"})
        if unknown:
            raise MtkitError(f"unknown decoding option(s): {', '.join(unknown)}")
        section = dict(
            decoding if isinstance(decoding, dict) else _DECODING if decoding is None else decoding.model_dump()
        )
        if given.get("engine") == "ctranslate2":
            section["dtype"] = None  # the schema's torch dtypes do not apply: the exported type is the default
        switched = algorithms.switched(given)
        if switched and "algorithm" not in given:  # a switch wins over the run's algorithm
            section["algorithm"] = switched
        fields = {**{k: v for k, v in section.items() if k in _FIELD_NAMES}, **given}
        # the section's values of the chosen algorithm's options (another's are left to that algorithm)
        chosen = fields.get("algorithm", _DECODING["algorithm"])
        registered = algorithms.params()
        kept = {
            k: v
            for k, v in section.items()
            if k in registered and registered[k][0].name == chosen and v != registered[k][1].default
        }
        return cls(**fields, params=_merge(_merge(fields.get("params", ()), kept), own))

    def replace(self, **changes) -> "Options":
        """A copy with ``changes`` applied (None keeps a value), checked."""
        given, own = self._split({k: v for k, v in changes.items() if v is not None})
        if own:
            given["params"] = _merge(self.params, own)
        return dataclasses.replace(self, **given) if given else self

    def for_call(self, **changes) -> "Options":
        """``replace`` for one call of a loaded model: ``changes`` may be any option but the ``LOAD_TIME`` ones.

        A new ``algorithm`` drops the loaded algorithm's own options (the call's may be given beside it).

        Raises:
            MtkitError: a load-time option, an unknown one, or values that do not go together.
        """
        given = {k: v for k, v in changes.items() if v is not None}
        fixed = sorted(set(given) & LOAD_TIME)
        if fixed:
            raise MtkitError(
                f"{', '.join(fixed)}: fixed when the model loads; give {'it' if len(fixed) == 1 else 'them'} to "
                "mtkit.load (or the command line), not to a call"
            )
        own, _ = self._split(given)
        unknown = sorted(set(own) - _FIELD_NAMES)
        if unknown:
            raise MtkitError(f"unknown decoding option(s): {', '.join(unknown)}")
        algorithm = given.get("algorithm")
        if algorithm is None or algorithm == self.algorithm:
            return self.replace(**given)
        mine = {p.name for p in algorithms.get(algorithm).params}
        kept = tuple(kv for kv in self.params if kv[0] in mine)
        given, own = self._split(given)
        off = dict.fromkeys(algorithms.switches(), False)
        return dataclasses.replace(self, **{**off, **given}, params=_merge(kept, own))

    def check(self) -> None:
        """Raise ``MtkitError`` for a value out of its range or options that do not go together."""
        check_flags(engine=self.engine)
        _check_ranges(self)
        chosen = self.chosen  # an unknown algorithm first: its options are checked against it
        _check_params(self)
        switched = algorithms.switched(self)
        if switched and self.algorithm != switched:
            switch = algorithms.get(switched).switch
            raise MtkitError(f"{switch}=True is --algorithm {switched}: drop it or --algorithm {self.algorithm}")
        if not chosen.nbest and self.nbest > 1:
            several = " or ".join(a.name for a in algorithms.REGISTRY.values() if a.nbest)
            raise MtkitError(
                f"--algorithm {chosen.name} gives one hypothesis a sentence: drop --nbest {self.nbest} or use {several}"
            )
        if chosen.rows == "beam_size" and self.nbest > self.beam_size:
            raise MtkitError(
                f"nbest {self.nbest} is larger than beam_size {self.beam_size}: --algorithm {chosen.name} keeps at "
                "most beam_size hypotheses; ask for fewer or raise beam_size"
            )
        refused = algorithms.refusal({"algorithm": chosen.name, **dict(self.params)}, self.engine)
        if refused:
            raise MtkitError(refused)
        if self.alignments and not chosen.alignments:
            raise MtkitError(f"--algorithm {chosen.name} gives no alignments; drop --alignments")
        if self.engine == "ctranslate2":
            if self.alignments:
                raise MtkitError(ALIGNMENTS_NEED_TORCH)
            if self.stopping != "beam_full":
                raise MtkitError(
                    f"stopping {self.stopping!r} needs the torch engine: CTranslate2 stops a sentence once "
                    "beam_size hypotheses finished (stopping beam_full)"
                )
            if self.shortlist:
                raise MtkitError("--shortlist needs the torch engine (--engine torch)")
            if self.dtype not in (None, "default", "auto", *CT2_COMPUTE_TYPES):
                raise MtkitError(
                    f"--dtype {self.dtype!r}: the ctranslate2 engine computes in one of "
                    f"{', '.join(CT2_COMPUTE_TYPES)} (default: the exported type)"
                )
        else:
            if self.search != "mtkit":
                raise MtkitError(
                    f"--search {self.search} is the CTranslate2 engine's own beam search: add --engine ctranslate2 "
                    "(or translate an export dir), or drop --search"
                )
            if self.device != "auto" and self.dtype != "auto":  # auto: checked once the device is known
                self.check_device(self.device, self.dtype)

    def check_device(self, device_type: str, dtype: str) -> None:
        """Raise ``MtkitError`` if the torch engine cannot compute in ``dtype`` on a ``device_type`` device (the
        device ``auto`` resolved to, and ``dtype`` after ``auto`` was resolved)."""
        if (dtype == "float16" and device_type != "cuda") or (dtype == "int8" and device_type != "cpu"):
            raise MtkitError(DTYPE_NEEDS_DEVICE[dtype])


DTYPE_NEEDS_DEVICE = {
    "float16": "--dtype float16 needs a CUDA GPU; use float32 (or bfloat16) on CPU",
    "int8": "--dtype int8 is for the CPU (--device cpu); on a GPU use float16 or bfloat16, or --engine ctranslate2",
}
_FIELD_NAMES = {f.name for f in dataclasses.fields(Options)}
# what a loaded model keeps whatever a call asks (CTranslate2's load-time options: device, compute type, threads)
LOAD_TIME = frozenset({"engine", "device", "dtype", "threads", "shortlist", "shortlist_frequent"})
_dataclass_init = Options.__init__


def _init(self, *args, **kwargs):
    """Options' own fields as the dataclass takes them; an algorithm's options (``top_p=0.9``) into ``params``."""
    fields, own = Options._split(kwargs)
    if own:
        fields["params"] = _merge(fields.get("params", ()), own)
    _dataclass_init(self, *args, **fields)


Options.__init__ = _init


def _merge(params, new: dict) -> tuple[tuple[str, Any], ...]:
    """``params`` ((name, value) pairs) updated with ``new``, sorted by name."""
    return tuple(sorted({**dict(params), **new}.items()))


def accepts(fields: dict[str, dict], values: dict) -> bool:
    """Whether the schema surely accepts every value, by its plain fields (``plain_fields``): of its field's type
    exactly, in its choices and bounds. False leaves the verdict, and the wording of any error, to pydantic."""
    for name, value in values.items():
        field = fields.get(name)
        if field is None:
            return False
        if value is None:
            if field.get("optional"):
                continue
            return False
        kind = field["type"]
        if kind == "choice":
            if type(value) is not str or value not in field["choices"]:
                return False
            continue
        if type(value) not in {"int": (int,), "float": (int, float), "str": (str,)}[kind]:
            return False
        if not (
            value >= field.get("ge", value)
            and value <= field.get("le", value)
            and ("gt" not in field or value > field["gt"])
            and ("lt" not in field or value < field["lt"])
        ):
            return False
    return True


def check_flags(**values) -> None:
    """``mtkit.flags.check_flags`` (``--format``, ``--input-format``, ``--engine``), which only a value outside
    their choices imports."""
    if not accepts(plain_fields.OUTPUT, values):
        from mtkit.flags import check_flags as check_with_schema

        check_with_schema(**values)


def _check_ranges(options: Options) -> None:
    """Each option the ``decoding`` section has, in the range its schema gives."""
    values = {name: getattr(options, name) for name in plain_fields.DECODING}
    if options.engine == "ctranslate2" or values["dtype"] is None:
        values.pop("dtype")  # checked against CTranslate2's compute types instead
    if accepts(plain_fields.DECODING, values):
        return
    from pydantic import ValidationError

    from mtkit import config as cfgmod

    try:
        cfgmod.DecodingConfig.model_validate(values)
    except ValidationError as err:
        raise MtkitError(cfgmod.validation_message(err, "decoding options")) from None


def _check_params(options: Options) -> None:
    """The algorithms' own options: each known, in its range, and given only with its algorithm."""
    registered = algorithms.params()
    checked, elsewhere = [], {}
    for name, value in options.params:
        if name not in registered:
            raise MtkitError(f"unknown decoding option: {name}")
        owner, param = registered[name]
        checked.append((name, param.check(value)))
        if owner.name != options.algorithm and value != param.default:
            elsewhere.setdefault(owner.name, []).append(param.cli_flag)
    if tuple(checked) != options.params:
        object.__setattr__(options, "params", tuple(checked))  # a command line's strings, as their types
    for owner, flags in elsewhere.items():
        verb = "takes" if len(flags) == 1 else "take"
        switch = f"--algorithm {owner}"
        raise MtkitError(f"{', '.join(flags)} {verb} effect with {switch} only; add {switch} or drop them")


def check_instructions(options: Options, constraints: bool) -> None:
    """Raise ``MtkitError`` if a sentence's instructions cannot be followed under ``options``.

    Args:
        options: the options the sentence is decoded with.
        constraints: whether the sentence has phrases the output must contain.
    """
    if not constraints:
        return
    if options.engine != "torch":
        raise MtkitError("constraints need --engine torch (the CTranslate2 engine has no constrained decoding)")
    if not options.chosen.constraints:
        honour = ", ".join(a.name for a in algorithms.REGISTRY.values() if a.constraints)
        raise MtkitError(
            f"constraints need an algorithm that honours them ({honour}); {options.algorithm} cannot: "
            f"drop --algorithm {options.algorithm}"
        )
    if options.shortlist:
        raise MtkitError("constraints need the whole target vocabulary; drop --shortlist")
