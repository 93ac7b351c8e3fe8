"""The models one ``mtkit serve`` translates with: run directories on the command line and the entries of a models
file (``--models FILE``), each read into a ``ModelSpec`` without loading its weights.

A models file is a YAML list, one entry per model (docs/serving.md)::

    - path: ../runs/en-de        # a run directory, a checkpoint or a CTranslate2 export, relative to the file
      name: en-de                # optional: how requests and /v1/models name it (default: from the path)
      languages: [en-de]         # optional: the directions it serves (default: those of its run)
      engine: torch              # optional (default: --engine)
      decoding: {beam_size: 4}   # optional: mtkit.load's options; they win over the command line's
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Annotated, Literal, Optional, Sequence

from pydantic import AfterValidator, Field, ValidationError, create_model

from mtkit.config import Section, read_yaml
from mtkit.errors import MtkitError
from mtkit.inference.options import Options
from mtkit.serving.languages import data_directions, run_config
from mtkit.serving.v1_schema import most_hypotheses

NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"
_NOT_A_MODELS = {"engine", "scores", "alignments"}  # the engine is an entry's own key; the others are per request
Pair = tuple[str, str]


def _direction(text: str) -> str:
    parts = text.split("-")
    if len(parts) != 2 or not all(parts):
        raise ValueError(f"write a direction as source-target, e.g. en-de, not {text!r}")
    if parts[0] == parts[1]:
        raise ValueError(f"{text}: the source and target are the same language")
    return text


DecodingEntry = create_model(
    "DecodingEntry",
    __base__=Section,
    **{  # every option of mtkit.load, each optional: None keeps the run's (or the command line's) value
        f.name: (Optional[typing.get_type_hints(Options)[f.name]], None)
        for f in dataclasses.fields(Options)
        if f.name not in _NOT_A_MODELS
    },
)


class ModelEntry(Section):
    """One entry of a models file."""

    path: str = Field(min_length=1, description="run directory, checkpoint or CTranslate2 export")
    name: Optional[str] = Field(None, pattern=NAME)
    languages: Optional[list[Annotated[str, AfterValidator(_direction)]]] = Field(None, min_length=1)
    engine: Optional[Literal["torch", "ctranslate2"]] = None
    decoding: DecodingEntry = Field(default_factory=DecodingEntry)  # type: ignore[valid-type]


@dataclasses.dataclass(frozen=True, eq=False)
class ModelSpec:
    """A model the server may load: where it is, what it serves and how it decodes.

    ``beam_size``, ``html`` and ``alignments`` say what requests may ask of it (``/openapi.json``): the most
    hypotheses per sentence (0: no bound, a sampling model's), whether it translates HTML and gives alignments.
    """

    name: str
    path: Optional[Path]
    directions: tuple[Pair, ...]
    multilingual: bool = False  # its target language goes with each call (``translate_batch``'s ``target``)
    engine: str = "torch"
    options: dict = dataclasses.field(default_factory=dict)  # mtkit.load's keyword options
    named: bool = False  # the name was given, not made from the path
    batch_size: int = 200  # the sentences of one call (its ``decoding.batch_size``)
    beam_size: int = 0
    html: bool = True
    alignments: bool = True
    algorithms: tuple[tuple[str, int], ...] = ()  # v1_schema.most_hypotheses: what a request naming one may ask


def model_spec(
    path: Path,
    *,
    name: Optional[str] = None,
    languages: Optional[Sequence[str]] = None,
    engine: str = "torch",
    options: Optional[dict] = None,
    where: str = "",
) -> ModelSpec:
    """The spec of the model at ``path``, from its run's metadata (no weights are read).

    Args:
        path: a run directory, a checkpoint or a CTranslate2 export directory.
        name: its name; None to make one from the path.
        languages: the directions it serves as ``src-tgt``; None for those of its run (``data_directions``).
        engine: ``torch`` or ``ctranslate2`` (an export directory is always ``ctranslate2``).
        options: ``mtkit.load``'s decoding options; None values keep the run's.
        where: what the error messages start with (a models file and its entry), or "".

    Returns:
        The spec.

    Raises:
        MtkitError: a path that holds no model, languages it cannot serve, or options that do not go together.
    """
    from mtkit.interop.ct2_export import is_export_dir

    path, lead = Path(path), f"{where}: " if where else ""
    if not path.exists():
        raise MtkitError(f"{lead}{path}: no such run directory, checkpoint or export")
    options = {k: v for k, v in (options or {}).items() if v is not None}
    engine = "ctranslate2" if is_export_dir(path) else engine
    try:
        cfg = run_config(path)
        quality = {"qe_model", "rerank"}  # mtkit.load's, not decoding options (inference.quality)
        decoding = Options.build(cfg.decoding, **{k: v for k, v in options.items() if k not in quality}, engine=engine)
    except MtkitError as err:
        raise MtkitError(f"{lead}{err}") from None
    directions, multilingual = data_directions(cfg.data)
    if languages:
        directions = _chosen(languages, directions, multilingual, list(cfg.data.targets), f"{lead}languages")
    return ModelSpec(
        name=name or (path.name if path.is_dir() else path.stem),
        path=path,
        directions=directions,
        multilingual=multilingual,
        engine=engine,
        options=options,
        named=name is not None,
        batch_size=decoding.batch_size,
        beam_size=decoding.most_hypotheses,
        html=engine == "torch" and decoding.nbest == 1,
        alignments=engine == "torch",
        algorithms=tuple(most_hypotheses(decoding).items()),
    )


def _chosen(languages: Sequence[str], own: tuple[Pair, ...], multilingual: bool, targets: list, where: str):
    """The directions a models file gives a model: a bilingual model's one direction may be renamed; a multilingual
    model serves any source into each of its targets."""
    pairs = tuple(dict.fromkeys(tuple(d.split("-")) for d in languages))
    if not multilingual and len(pairs) != 1:
        raise MtkitError(f"{where}: a bilingual model serves one direction ({'-'.join(own[0])}), not {len(pairs)}")
    for source, target in pairs:
        if multilingual and target not in targets:
            raise MtkitError(f"{where}: {source}-{target}: the model translates into {', '.join(targets)} only")
    return pairs


def _entry_problem(err: ValidationError, where: str) -> str:
    """One pydantic problem of a models file's entry as one line naming the key."""
    first = err.errors()[0]
    loc = ".".join(str(p) for p in first["loc"])
    if first["type"] == "extra_forbidden":
        if loc.startswith("decoding."):
            return f"{where}: unknown decoding option '{loc}'; see mtkit translate --help for the options"
        return f"{where}: unknown key '{loc}'; a model takes path, name, languages, engine and decoding"
    if first["type"] == "missing":
        return f"{where}: missing required key '{loc}'"
    got = first.get("input")
    shown = "" if isinstance(got, (dict, list)) else f" (got {got!r})"
    message = first["msg"].removeprefix("Value error, ")
    return f"{where}: '{loc}': {message}{shown}"


def read_models_file(path: Path, *, engine: str = "torch", options: Optional[dict] = None) -> list[ModelSpec]:
    """The models of a models file, each checked as ``model_spec`` checks a model.

    Args:
        path: the YAML file; the paths in it are relative to its folder.
        engine: the engine of entries without their own.
        options: the command line's decoding options; an entry's ``decoding`` wins.

    Returns:
        One spec per entry, in order.

    Raises:
        MtkitError: one line naming the file (and the entry and key): a file that is missing or not YAML, not a
            list of models, an unknown key or a bad value, or a model that does not read.
    """
    path = Path(path)
    tree = read_yaml(path, "models file")
    if not isinstance(tree, list) or not tree:
        raise MtkitError(f"{path}: a models file is a YAML list of models, each a mapping with a path")
    specs = []
    for i, item in enumerate(tree, 1):
        named = item.get("name") if isinstance(item, dict) else None
        where = f"{path}: entry {i}" + (f" ({named})" if isinstance(named, str) else "")
        if not isinstance(item, dict):
            raise MtkitError(
                f"{where}: a model is a mapping with path and optionally name, languages, engine, decoding"
            )
        try:
            entry = ModelEntry.model_validate(item)
        except ValidationError as err:
            raise MtkitError(_entry_problem(err, where)) from None
        own = {k: v for k, v in entry.decoding.model_dump().items() if v is not None}
        specs.append(
            model_spec(
                path.parent / entry.path,
                name=entry.name,
                languages=entry.languages,
                engine=entry.engine or engine,
                options={**(options or {}), **own},
                where=where,
            )
        )
    return specs


def model_specs(
    runs: Sequence[Path], models_file: Optional[Path], *, engine: str = "torch", options: Optional[dict] = None
) -> list[ModelSpec]:
    """The models of ``mtkit serve``: its run arguments, then the entries of its models file; names made unique.

    Raises:
        MtkitError: no model at all, two models given one name, or what ``model_spec`` and ``read_models_file``
            raise.
    """
    specs = [model_spec(run, engine=engine, options=options) for run in runs]
    if models_file is not None:
        specs += read_models_file(models_file, engine=engine, options=options)
    if not specs:
        raise MtkitError("no model to serve: give run directories (mtkit serve RUN) or a models file (--models)")
    return unique_names(specs)


def unique_names(specs: list[ModelSpec]) -> list[ModelSpec]:
    """``specs`` with names made from paths given a suffix where they meet another name (``run``, ``run-2``).

    Raises:
        MtkitError: two models were given the same name.
    """
    given = [s.name for s in specs if s.named]
    for name in given:
        if given.count(name) > 1:
            raise MtkitError(f"two models are named {name!r}; give each its own name")
    taken, out = set(given), []
    for spec in specs:
        name, n = spec.name, 1
        while not spec.named and name in taken:
            n += 1
            name = f"{spec.name}-{n}"
        taken.add(name)
        out.append(spec if name == spec.name else dataclasses.replace(spec, name=name))
    return out
