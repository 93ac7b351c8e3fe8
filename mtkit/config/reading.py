"""Reading and writing the experiment config.

``load(path, overrides)`` applies dotted ``--set key=value`` overrides before validation, and turns any problem
into one ``MtkitError`` line naming the file and the dotted key path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from mtkit.config.schema import Config
from mtkit.errors import MtkitError


def _parse_override(item: str) -> tuple[list[str], Any]:
    if "=" not in item:
        raise MtkitError(f"--set {item!r}: expected section.key=value, e.g. --set training.lr=3e-4")
    key, raw = item.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.strip().split("."), value


def apply_overrides(tree: dict, overrides: list[str]) -> dict:
    for item in overrides:
        path, value = _parse_override(item)
        node = tree
        for part in path[:-1]:
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise MtkitError(f"--set {item!r}: {part!r} is not a section")
            node = child
        node[path[-1]] = value
    return tree


def _loc(loc: tuple) -> str:
    # drop the discriminator tag pydantic inserts for tagged unions: model.transformer.d_model -> model.d_model
    parts = [str(p) for p in loc]
    if len(parts) >= 2 and parts[0] == "model" and parts[1] in ("transformer", "bahdanau", "luong"):
        parts.pop(1)
    return ".".join(parts)


def validation_message(err: ValidationError, where: str) -> str:
    first = err.errors()[0]
    loc = _loc(first["loc"])
    kind, msg = first["type"], first["msg"]
    if kind == "extra_forbidden":
        return f"{where}: unknown key '{loc}'; check its spelling (see configs/ for the accepted keys)"
    if kind == "missing":
        return f"{where}: missing required key '{loc}'"
    if kind == "union_tag_invalid":
        return f"{where}: {loc}.arch must be one of transformer, bahdanau, luong"
    got = first.get("input")
    got_s = "" if isinstance(got, (dict, list)) else f" (got {got!r})"
    where_key = f"'{loc}'" if loc else "top level"
    return f"{where}: {where_key}: {msg}{got_s}"


def from_dict(tree: dict, where: str = "config") -> Config:
    try:
        return Config.model_validate(tree)
    except ValidationError as err:
        raise MtkitError(validation_message(err, where)) from None


def read_yaml(path: Path, what: str):
    """The YAML tree of the file at ``path`` (None for an empty file).

    Raises:
        MtkitError: one line naming ``path`` (and the line and column of a syntax error) and ``what`` it is, e.g.
            "config file": it is missing, unreadable or not YAML.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise MtkitError(f"{path}: {what} not found") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as err:
        raise MtkitError(f"{path}: cannot read the {what} ({type(err).__name__})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        pos = f":{mark.line + 1}:{mark.column + 1}" if mark else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        raise MtkitError(f"{path}{pos}: YAML syntax error: {problem}") from None


def load(path: str | Path, overrides: list[str] | None = None) -> Config:
    path = Path(path)
    tree = read_yaml(path, "config file")
    if tree is None:
        tree = {}
    if not isinstance(tree, dict):
        raise MtkitError(f"{path}: the config must be a mapping with sections data, model, training, decoding")
    tree = apply_overrides(tree, overrides or [])
    return from_dict(_with_init_from(tree, str(path)), str(path))


INIT_FROM_OWN_KEYS = ("init_from", "dropout", "attention_dropout", "activation_dropout")


def _with_init_from(tree: dict, where: str) -> dict:
    """A model section with ``init_from: RUN`` is RUN's model section (its config.yaml); of its own it may only set
    the dropouts, or repeat RUN's values. A run's saved config (complete, with ``arch``) also reads without RUN."""
    model = tree.get("model")
    if not isinstance(model, dict) or not model.get("init_from"):
        return tree
    saved = Path(str(model["init_from"])) / "config.yaml"
    try:
        whole = yaml.safe_load(saved.read_text(encoding="utf-8"))
        base = whole["model"]
        if not isinstance(base, dict):
            raise TypeError
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        if "arch" in model:
            return tree
        raise MtkitError(
            f"{where}: model.init_from: {saved.parent} is not a run directory (no readable config.yaml); give one "
            "written by mtkit train or mtkit import-hf"
        ) from None
    for key, value in model.items():
        if key not in INIT_FROM_OWN_KEYS and key in base and base[key] != value:
            raise MtkitError(
                f"{where}: model.{key} = {value!r} differs from {base[key]!r} in {saved}; with model.init_from "
                "the architecture is that run's: remove model.{key}".replace("{key}", key)
            )
    return {**tree, "model": {**base, **model}, **_language_tokens(tree, whole.get("data"), saved, where)}


INIT_FROM_TAG_KEYS = ("source_tag", "target_tag", "tag_template")


def _language_tokens(tree: dict, base: object, saved: Path, where: str) -> dict:
    """{"data": ...} with ``data.directions`` reading and writing the language tokens as the ``init_from`` run does,
    where that run reads its source language as a token (an imported M2M-100 or NLLB-200 model): its source_tag,
    target_tag and tag_template, which the config may leave out or repeat; {} for any other run."""
    data = tree.get("data")
    if not isinstance(base, dict) or not base.get("source_tag") or not isinstance(data, dict):
        return {}
    if not data.get("directions"):
        return {}
    for key in INIT_FROM_TAG_KEYS:
        if key in data and data[key] != base.get(key):
            raise MtkitError(
                f"{where}: data.{key} = {data[key]!r} differs from {base.get(key)!r} in {saved}; the model reads "
                f"its languages as its own tokens: remove data.{key}"
            )
    return {"data": {**{k: base[k] for k in INIT_FROM_TAG_KEYS if k in base}, **data}}


def to_dict(cfg: Config) -> dict:
    return cfg.model_dump(mode="json")


def dump(cfg: Config) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False)
