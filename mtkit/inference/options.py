"""The decoding options: one type, built from a run's ``decoding:`` section plus overrides and checked once.

The command line (``mtkit translate``, ``mtkit serve``), ``mtkit.load``, the server's requests and both engines
use ``Options``; every rule that ties two options together is in ``Options.check`` (and, for one sentence's
instructions, ``check_instructions``), so the same request meets the same answer or the same error at every
front door.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from mtkit.errors import MtkitError
from mtkit.inference import plain_fields
from mtkit.interop.ct2_export import QUANTIZATIONS as CT2_COMPUTE_TYPES

# The schema's defaults (mtkit/config/schema.py, mtkit/flags.py) as plain_fields holds them: Options repeats none
# of them, and neither pydantic nor the schema is imported unless a value needs its verdict (a fast start-up).
_DECODING = {name: field["default"] for name, field in plain_fields.DECODING.items()}
_SAMPLING = {name: field["default"] for name, field in plain_fields.SAMPLING.items()}

ALIGNMENTS_NEED_TORCH = "alignments (--alignments, --plot-attention) need the torch engine (--engine torch)"


@dataclasses.dataclass(frozen=True)
class Options:
    """Every decoding option: how the search runs, what each hypothesis carries, where the model runs.

    Every instance is checked when made (``MtkitError`` otherwise); ``Options.build`` makes one from a run's
    ``decoding`` section. ``engine``, ``device``,
    ``dtype``, ``threads`` and ``shortlist`` are fixed when a model is loaded; the others may change per call.
    """

    engine: str = "torch"
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
    sampling: bool = False
    temperature: float = _SAMPLING["temperature"]
    top_k: int = _SAMPLING["top_k"]
    top_p: float = _SAMPLING["top_p"]
    seed: int = _SAMPLING["seed"]
    scores: bool = False  # fill score, log_prob and token_log_probs (CTranslate2: a rescoring pass)
    alignments: bool = False  # fill each hypothesis's cross-attention
    split_sentences: bool = True  # cut each line into sentences, translate them, join them with its whitespace
    device: str = _DECODING["device"]
    dtype: Optional[str] = _DECODING["dtype"]  # None: the engine's own default (CTranslate2: the exported type)
    threads: Optional[int] = _DECODING["threads"]
    shortlist: int = _DECODING["shortlist"]
    shortlist_frequent: int = _DECODING["shortlist_frequent"]

    def __post_init__(self):
        self.check()

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
        given = {k: v for k, v in overrides.items() if v is not None}
        unknown = sorted(set(given) - _FIELD_NAMES)
        if unknown:
            raise MtkitError(f"unknown decoding option(s): {', '.join(unknown)}")
        section = dict(
            decoding if isinstance(decoding, dict) else _DECODING if decoding is None else decoding.model_dump()
        )
        if given.get("engine") == "ctranslate2":
            section["dtype"] = None  # the schema's torch dtypes do not apply: the exported type is the default
        return cls(**{**{k: v for k, v in section.items() if k in _FIELD_NAMES}, **given})

    def replace(self, **changes) -> "Options":
        """A copy with ``changes`` applied (None keeps a value), checked."""
        given = {k: v for k, v in changes.items() if v is not None}
        return dataclasses.replace(self, **given) if given else self

    def check(self) -> None:
        """Raise ``MtkitError`` for a value out of its range or options that do not go together."""
        check_flags(engine=self.engine)
        _check_ranges(self)
        _check_sampling(self)
        if self.nbest > self.beam_size and not self.sampling:
            raise MtkitError(
                f"nbest {self.nbest} is larger than beam_size {self.beam_size}: beam search keeps at most "
                "beam_size hypotheses; ask for fewer or raise beam_size"
            )
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


def _check_sampling(options: Options) -> None:
    """The sampling flags: each in its range, and set only with ``sampling``."""
    values = {name: getattr(options, name) for name in plain_fields.SAMPLING}
    if not accepts(plain_fields.SAMPLING, values):
        from pydantic import ValidationError

        from mtkit.flags import SamplingOptions

        try:
            SamplingOptions(**values)
        except ValidationError as err:
            first = err.errors()[0]
            name = str(first["loc"][0])
            message = first["msg"][0].lower() + first["msg"][1:]
            raise MtkitError(f"--{name.replace('_', '-')} {values[name]!r}: {message}") from None
    if not options.sampling:
        changed = [name for name, value in values.items() if value != _SAMPLING[name]]
        if changed:
            flags = ", ".join("--" + name.replace("_", "-") for name in changed)
            verb = "takes" if len(changed) == 1 else "take"
            raise MtkitError(f"{flags} {verb} effect with --sampling only; add --sampling or drop them")


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
    if options.sampling:
        raise MtkitError("constraints need beam search: sampling cannot honour them; drop --sampling")
    if options.shortlist:
        raise MtkitError("constraints need the whole target vocabulary; drop --shortlist")
