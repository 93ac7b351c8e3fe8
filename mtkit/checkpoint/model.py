"""A checkpoint's model for inference: built from its config, its weights loaded (a LoRA checkpoint's adapters
on the base weights it refers to, then merged), in eval mode, with its tokenizer."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from mtkit import config as cfgmod
from mtkit import lora
from mtkit.checkpoint.store import Bundle, check_weights, load, load_weights, resolve
from mtkit.errors import MtkitError
from mtkit.models import Seq2Seq, build_model
from mtkit.models.int8 import quantize_int8
from mtkit.tokenizer import Tokenizer


@dataclass
class Loaded:
    """A checkpoint loaded for inference."""

    model: Seq2Seq
    tokenizer: object
    config: cfgmod.Config
    metadata: dict
    path: Path


def load_checkpoint(
    path: Path, device: torch.device = torch.device("cpu"), dtype: torch.dtype = torch.float32
) -> Loaded:
    """The model of a run dir or checkpoint file, in eval mode, with its tokenizer and config.

    Args:
        path: what ``resolve`` takes.
        device: where the model goes.
        dtype: its dtype; ``torch.qint8`` quantizes the linear layers per row (on the CPU).

    Raises:
        MtkitError: no checkpoint, a damaged one, or metadata, tokenizer and weights that do not match.
    """
    file = resolve(Path(path))
    bundle = load(file)
    meta = bundle.metadata
    try:
        cfg = cfgmod.from_dict(meta["config"], f"{file} (embedded config)")
        src_v, tgt_v, joint = meta["src_vocab_size"], meta["tgt_vocab_size"], meta["joint_vocab"]
    except KeyError as err:
        raise MtkitError(f"{file}: checkpoint metadata lacks {err}; it was not written by mtkit train") from None
    if not bundle.tokenizer:
        raise MtkitError(f"{file}: checkpoint carries no tokenizer models")
    tokenizer = Tokenizer.from_model_bytes(bundle.tokenizer)
    if (tokenizer.src_vocab_size, tokenizer.tgt_vocab_size) != (src_v, tgt_v):
        raise MtkitError(
            f"{file}: embedded tokenizer vocab sizes {(tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)} "
            f"do not match the model's {(src_v, tgt_v)}"
        )
    model = build_model(cfg.model, src_v, tgt_v, joint)
    if meta.get("lora"):  # adapters on base weights kept elsewhere: merged into them here
        load_lora_checkpoint(model, bundle, file, cfg.training.lora if cfg.training else None)
        model = lora.merged(model)
    else:
        load_weights(model, bundle.model, file)
    if dtype == torch.qint8:
        model = quantize_int8(model.eval())
    else:
        model.to(device=device, dtype=dtype).eval()
    return Loaded(model, tokenizer, cfg, meta, file)


# ------------------------------------------------------------------------------- LoRA runs' checkpoints


def load_base_weights(model: torch.nn.Module, weights: dict[str, torch.Tensor], where: Path) -> None:
    """Copy base weights (names of the model without adapters) into a model that has adapters, or none.

    Raises:
        MtkitError: the first tensor missing, unexpected or misshapen, as ``checkpoint.load_weights`` names it.
    """
    own = {lora.base_name(k): k for k in model.state_dict() if not lora.is_adapter(k)}
    shapes = model.state_dict()
    check_weights({k: shapes[v].shape for k, v in own.items()}, weights, where)
    missing, unexpected = model.load_state_dict({own[k]: v for k, v in weights.items()}, strict=False)
    assert not unexpected and all(lora.is_adapter(k) for k in missing), (missing, unexpected)


def load_adapters(model: torch.nn.Module, weights: dict[str, torch.Tensor], where: Path) -> None:
    """Copy a LoRA checkpoint's adapters into a model with the same adapters.

    Raises:
        MtkitError: an adapter tensor missing, unexpected or misshapen.
    """
    own = {k: v.shape for k, v in model.state_dict().items() if lora.is_adapter(k)}
    check_weights(own, weights, where)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    assert not unexpected and not any(lora.is_adapter(k) for k in missing), (missing, unexpected)


def lora_base_weights(meta: dict, where: Path) -> tuple[Path, dict[str, torch.Tensor]]:
    """The base weights a LoRA checkpoint's ``lora`` entry ``meta`` refers to, checked against its digest.

    Raises:
        MtkitError: the base checkpoint is gone, damaged, or not the one the adapters were trained on.
    """
    base = Path(meta["base"])
    if not base.is_file():
        raise MtkitError(
            f"{where}: its LoRA adapters need the base weights {base}, which are gone; restore that file "
            "(or merge the adapters where it exists: mtkit merge-lora)"
        )
    if lora.header_digest(base) != meta["base_sha256"]:
        raise MtkitError(
            f"{where}: the base weights {base} changed since its LoRA adapters were trained on them "
            "(another SHA-256); restore that checkpoint of the base run"
        )
    return base, whole_weights(base)


def whole_weights(file: Path) -> dict[str, torch.Tensor]:
    """The model weights of checkpoint ``file``; a LoRA checkpoint's adapters merged into its base weights."""
    bundle = load(file)
    if bundle.metadata.get("lora"):
        return load_checkpoint(file).model.state_dict()
    return bundle.model


def load_lora_checkpoint(model: torch.nn.Module, bundle: Bundle, file: Path, section) -> list[str]:
    """Build a LoRA checkpoint's model: the base weights it refers to, then its adapters on the layers it names.

    Args:
        model: a freshly built model without adapters (of the checkpoint's config).
        bundle: the LoRA checkpoint.
        file: where it was read from, for messages.
        section: the adapters' config (``training.lora``).

    Returns:
        The adapted layers' names.
    """
    meta = bundle.metadata["lora"]
    base, weights = lora_base_weights(meta, file)
    load_weights(model, weights, base)
    targets = lora.inject(model, section)
    if targets != meta["layers"]:
        raise MtkitError(f"{file}: its LoRA adapters are on other layers than training.lora.modules now names")
    load_adapters(model, bundle.model, file)
    return targets
