"""The checkpoints of LoRA runs (``training.lora``): adapters only, on base weights kept in the base run's
checkpoint, which the ``lora`` entry of the metadata names with its digest. Loading builds the base model from
those weights, then puts the adapters on the layers the entry names."""

from __future__ import annotations

from pathlib import Path

import torch

from mtkit import lora
from mtkit.checkpoint import Bundle, check_weights, load, load_checkpoint, load_weights
from mtkit.errors import MtkitError


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
