"""Checkpoint files: saving, loading and checking bundles, listing, pruning and averaging them (the package's
docstring says what a checkpoint holds)."""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save as st_save

from mtkit import config as cfgmod
from mtkit.errors import MtkitError
from mtkit.files import atomic_write_bytes, remove_stale_temps  # noqa: F401 (remove_stale_temps: a run dir's clean-up)
from mtkit.tokenizer import Tokenizer

FORMAT = "mtkit-checkpoint-1"
CKPT_RE = re.compile(r"^ckpt_(\d+)\.safetensors$")


def _crc32(tensor: torch.Tensor) -> int:
    return zlib.crc32(tensor.reshape(-1).view(torch.uint8).numpy())


@dataclass
class Bundle:
    """What one checkpoint file holds."""

    metadata: dict
    model: dict[str, torch.Tensor]
    tokenizer: dict[str, bytes] = field(default_factory=dict)
    train: dict[str, torch.Tensor] = field(default_factory=dict)


def save(path: Path, bundle: Bundle) -> None:
    """Write ``bundle`` to ``path`` whole or not at all, with a CRC-32 of every tensor.

    Tied weights (one storage under several names) are stored once.

    Raises:
        MtkitError: the file cannot be written; the previous file at ``path`` is intact.
    """
    tensors: dict[str, torch.Tensor] = {}
    aliases: dict[str, str] = {}  # tied weights are stored once: alias -> stored name
    seen: dict[tuple, str] = {}
    for k, v in bundle.model.items():
        key = (v.data_ptr(), v.shape, v.stride())
        if key in seen:
            aliases[k] = seen[key]
            continue
        seen[key] = k
        tensors[f"model.{k}"] = v.detach().to("cpu").contiguous()
    for side, blob in bundle.tokenizer.items():
        tensors[f"tokenizer.{side}"] = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
    for k, v in bundle.train.items():
        tensors[f"train.{k}"] = v.detach().to("cpu").contiguous()
    crc = {k: _crc32(v) for k, v in tensors.items()}
    meta = {
        "format": FORMAT,
        "mtkit": json.dumps(bundle.metadata),
        "aliases": json.dumps(aliases),
        "crc32": json.dumps(crc),
    }
    atomic_write_bytes(path, st_save(tensors, metadata=meta))


def save_run(out: Path, cfg, tokenizer: Tokenizer, bundle: Bundle, name: str, verb: str) -> None:
    """A run directory of one checkpoint: ``config.yaml``, the tokenizer's files and ``checkpoints/NAME``, written
    to a temp sibling (``.OUT.VERB-PID.tmp``), fsynced and renamed into place. ``out`` is new or an empty folder,
    or a run that may be replaced: the caller has checked."""
    import os
    import shutil

    from mtkit.files import fsync_tree, replace_dir

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.{verb}-{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        (tmp / "checkpoints").mkdir(parents=True)
        (tmp / "config.yaml").write_text(cfgmod.dump(cfg), encoding="utf-8")
        tokenizer.save(tmp)
        save(tmp / "checkpoints" / name, bundle)
        fsync_tree(tmp)
        replace_dir(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def read_metadata(path: Path) -> dict:
    """The ``metadata`` of the checkpoint at ``path``, without reading its tensors.

    Raises:
        MtkitError: the file is missing, unreadable, not an mtkit checkpoint, or its metadata is damaged.
    """
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise MtkitError(_unreadable(path, err)) from None
    if meta.get("format") != FORMAT:
        raise MtkitError(f"{path}: not an mtkit checkpoint (no '{FORMAT}' metadata)")
    try:
        return json.loads(meta["mtkit"])
    except (KeyError, ValueError):
        raise MtkitError(
            f"{path}: corrupted checkpoint (unreadable mtkit metadata); use an earlier checkpoint of the run"
        ) from None


def _unreadable(path: Path, err: Exception) -> str:
    if isinstance(err, FileNotFoundError):
        return f"{path}: checkpoint not found"
    first = str(err).splitlines()[0] if str(err) else err.__class__.__name__
    return f"{path}: corrupted or truncated checkpoint ({first}); use an earlier checkpoint of the run"


def load(path: Path, *, with_train: bool = False, map_location: str = "cpu") -> Bundle:
    """The checkpoint at ``path``, every tensor checked against its CRC-32.

    Only safetensors is ever parsed: a pickle (torch.save) file is refused without being read.

    Args:
        path: the checkpoint file.
        with_train: read the ``train.*`` tensors too (resuming); they are skipped otherwise.
        map_location: the device of the model and train tensors.

    Raises:
        MtkitError: the file is missing, a pickle, truncated, damaged or fails a CRC-32 check.
    """
    path = Path(path)
    if not path.exists():
        raise MtkitError(f"{path}: checkpoint not found")
    with open(path, "rb") as f:
        head = f.read(9)  # safetensors: 8-byte little-endian header size, then the JSON header
    if head[8:9] != b"{":
        if head[:1] == b"\x80" or head[:2] == b"PK":
            raise MtkitError(
                f"{path}: refusing a pickle/torch.save file: mtkit loads only safetensors checkpoints "
                "(unpickling can run arbitrary code)"
            )
        raise MtkitError(f"{path}: not a safetensors checkpoint, or truncated; use an earlier checkpoint of the run")
    metadata = read_metadata(path)
    model, tokenizer, train = {}, {}, {}
    try:
        with safe_open(str(path), framework="np") as f:
            header = f.metadata() or {}
            aliases = json.loads(header.get("aliases", "{}"))
            crc = json.loads(header.get("crc32", "{}"))  # absent in checkpoints written before it existed
            for key in f.keys():
                group, _, name = key.partition(".")
                if group == "train" and not with_train:
                    continue
                tensor = _get_tensor(f, key, path)
                if key in crc and _crc32(tensor) != crc[key]:
                    raise MtkitError(
                        f"{path}: corrupted checkpoint (tensor '{key}' fails its CRC-32 check); "
                        "use an earlier checkpoint of the run"
                    )
                if group == "model":
                    model[name] = tensor.to(map_location)
                elif group == "tokenizer":
                    tokenizer[name] = tensor.numpy().tobytes()
                elif group == "train":
                    train[name] = tensor.to(map_location)
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise MtkitError(_unreadable(path, err)) from None
    for alias, stored in aliases.items():
        if stored in model:
            model[alias] = model[stored]
    return Bundle(metadata, model, tokenizer, train)


def load_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor], where: Path) -> None:
    """Copy ``weights`` into ``model``.

    Raises:
        MtkitError: the first tensor that is missing, unexpected or misshapen, named with ``where``.
    """
    check_weights({name: tensor.shape for name, tensor in model.state_dict().items()}, weights, where)
    model.load_state_dict(weights, strict=True)


def check_weights(own: dict[str, torch.Size], weights: dict[str, torch.Tensor], where: Path) -> None:
    """``weights`` has exactly the tensors ``own`` names, each of the shape it gives.

    Raises:
        MtkitError: the first tensor that is missing, unexpected or misshapen, named with ``where``.
    """
    for name, shape in own.items():
        if name not in weights:
            raise MtkitError(f"{where}: tensor '{name}' missing from checkpoint; it does not match its config")
        if weights[name].shape != shape:
            raise MtkitError(
                f"{where}: tensor '{name}' has shape {tuple(weights[name].shape)}, the config implies "
                f"{tuple(shape)}; checkpoint and config do not match"
            )
    extra = sorted(set(weights) - set(own))
    if extra:
        raise MtkitError(f"{where}: unexpected tensor '{extra[0]}' in checkpoint; it does not match its config")


def list_checkpoints(ckpt_dir: Path) -> list[tuple[int, Path]]:
    """(update, path) of the numbered training checkpoints, oldest first."""
    if not ckpt_dir.is_dir():
        return []
    found = []
    for p in ckpt_dir.iterdir():
        m = CKPT_RE.match(p.name)
        if m:
            found.append((int(m.group(1)), p))
    return sorted(found)


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
    """The optimizer's state tensors as ``opt.{parameter index}.{name}`` (a training checkpoint's ``train.*``)."""
    tensors = {}
    params = [p for g in optimizer.param_groups for p in g["params"]]
    for i, p in enumerate(params):
        for k, v in optimizer.state.get(p, {}).items():
            if torch.is_tensor(v):
                tensors[f"opt.{i}.{k}"] = v
    return tensors


def restore_optimizer(optimizer: torch.optim.Optimizer, train: dict[str, torch.Tensor], device: torch.device) -> None:
    """Load the ``opt.*`` tensors of ``optimizer_tensors`` back into ``optimizer``, on ``device``."""
    state: dict[int, dict] = {}
    for key, v in train.items():
        if key.startswith("opt."):
            _, i, name = key.split(".", 2)
            state.setdefault(int(i), {})[name] = v.to(device) if name != "step" else v  # Adam keeps step on the CPU
    sd = optimizer.state_dict()
    sd["state"] = state
    optimizer.load_state_dict(sd)


def prune(ckpt_dir: Path, *, keep_last: int, keep_best: int, best_metric: str) -> None:
    """Delete the numbered checkpoints in ``ckpt_dir`` but the ``keep_last`` newest and the ``keep_best`` best.

    The best are ranked by ``best_metric`` of their validation metadata (loss: lowest; BLEU, chrF: highest).
    """
    found = list_checkpoints(ckpt_dir)
    keep = {p for _, p in found[-keep_last:]}
    if keep_best:
        scored = []
        for _, p in found:
            try:
                v = read_metadata(p).get("valid") or {}
            except MtkitError:
                continue
            if best_metric in v:
                sign = 1 if best_metric == "loss" else -1
                scored.append((sign * v[best_metric], p))
        keep |= {p for _, p in sorted(scored)[:keep_best]}
    for _, p in found:
        if p not in keep:
            p.unlink(missing_ok=True)


def load_latest(ckpt_dir: Path) -> tuple[Optional[Path], Optional[Bundle], list[MtkitError]]:
    """The newest numbered checkpoint in ``ckpt_dir`` that loads, with its ``train.*`` tensors.

    A damaged newest checkpoint falls back to the previous one.

    Returns:
        (path, bundle, the errors of the newer damaged ones); (None, None, []) when there is no checkpoint.

    Raises:
        MtkitError: every checkpoint is damaged (the newest one's error).
    """
    errors: list[MtkitError] = []
    for _, path in reversed(list_checkpoints(ckpt_dir)):
        try:
            return path, load(path, with_train=True, map_location="cpu"), errors
        except MtkitError as err:
            errors.append(err)
    if errors:
        raise errors[0]
    return None, None, []


def _get_tensor(f, key: str, path: Path) -> torch.Tensor:
    """Tensor ``key`` of ``f`` (a safetensors file opened for numpy) as a torch tensor. Read through numpy: through
    PyTorch, safetensors 0.8 keeps a few bytes per tensor read for good, which a server that loads models again
    and again would pile up; bfloat16, which numpy lacks, through PyTorch."""
    if f.get_slice(key).get_dtype() == "BF16":
        with safe_open(str(path), framework="pt", device="cpu") as pt:
            return pt.get_tensor(key)
    return torch.from_numpy(f.get_tensor(key))


def latest_loadable(ckpt_dir: Path) -> Optional[Path]:
    """The newest numbered checkpoint whose header reads; a damaged newest one falls back to the previous."""
    for _, path in reversed(list_checkpoints(ckpt_dir)):
        try:
            read_metadata(path)
            with safe_open(str(path), framework="pt") as f:
                list(f.keys())
            return path
        except MtkitError:
            continue
    return None


def resolve(path: Path) -> Path:
    """The checkpoint file to translate with, for a run dir, its checkpoints dir or a checkpoint file.

    average.safetensors comes first, then best.safetensors, then the newest numbered checkpoint that reads.

    Raises:
        MtkitError: ``path`` does not exist or holds no checkpoint.
    """
    path = Path(path)
    if path.is_file():
        return path
    if not path.exists():
        raise MtkitError(f"{path}: no such run directory or checkpoint")
    ckpt_dir = path / "checkpoints" if (path / "checkpoints").is_dir() else path
    for name in ("average.safetensors", "best.safetensors"):
        if (ckpt_dir / name).is_file():
            return ckpt_dir / name
    latest = latest_loadable(ckpt_dir)
    if latest is None:
        raise MtkitError(f"{path}: no checkpoint found; train first (mtkit train CONFIG)")
    return latest


def average(paths: list[Path]) -> Bundle:
    """The mean of the model weights of ``paths``, with the metadata and tokenizer of the last one.

    Raises:
        MtkitError: no paths, a tensor whose shape differs between them, or an unreadable checkpoint.
    """
    if not paths:
        raise MtkitError("no checkpoints to average")
    total: dict[str, torch.Tensor] = {}
    newest = None
    for p in paths:
        bundle = load(p)
        if bundle.metadata.get("lora"):
            raise MtkitError(
                f"{p}: holds LoRA adapters, whose mean is not the mean of the adapted weights; merge each "
                "checkpoint first (mtkit merge-lora)"
            )
        newest = bundle
        for k, v in bundle.model.items():
            if k in total and total[k].shape != v.shape:
                raise MtkitError(f"{p}: tensor '{k}' differs in shape from the other checkpoints")
            total[k] = total[k] + v.double() if k in total else v.double()
    avg = {k: (v / len(paths)).to(newest.model[k].dtype) for k, v in total.items()}
    meta = dict(newest.metadata, averaged=[str(p.name) for p in paths])
    return Bundle(meta, avg, newest.tokenizer)


def average_main(run: Path, *, last: int, output: Optional[Path]) -> Path:
    """`mtkit average`: save the mean of the ``last`` numbered checkpoints of ``run``.

    Returns:
        The file written: ``output``, or the run's checkpoints/average.safetensors.

    Raises:
        MtkitError: ``last`` below 1, a run without numbered checkpoints, or what ``average`` raises.
    """
    if last < 1:
        raise MtkitError(f"--last {last}: give the number of checkpoints to average (1 or more)")
    ckpts = [p for _, p in list_checkpoints(Path(run) / "checkpoints")]
    if not ckpts:
        raise MtkitError(f"{run}: no numbered checkpoints to average")
    chosen = ckpts[-last:]
    out = output or Path(run) / "checkpoints" / "average.safetensors"
    save(out, average(chosen))
    print(f"averaged {len(chosen)} checkpoints ({chosen[0].name} .. {chosen[-1].name}) -> {out}")
    return out
