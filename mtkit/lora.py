"""LoRA adapters (``training.lora``) through PEFT, and what freezes parts of a model (``training.freeze_embeddings``).

PEFT's ``inject_adapter_in_model`` replaces each chosen ``nn.Linear`` of an mtkit model in place by a LoRA layer
(the original layer as its ``base_layer``, plus ``lora_A`` and ``lora_B``); the model's own forward passes are
unchanged, and only the adapters are trainable.

A LoRA run's checkpoints hold only the adapters (``model.*lora_A*``, ``model.*lora_B*``) and, in the metadata entry
``lora``, the adapters' shape and a reference to the base weights: the checkpoint file ``model.init_from`` resolved
to and the SHA-256 of that file's safetensors header. The header lists every tensor with its offsets and its CRC-32,
which ``checkpoint.load`` checks against the data, so the digest changes with any tensor of the base. Resuming,
translating and merging load the base from that file, check the digest, then put the adapters on it
(``checkpoint.load_lora_checkpoint``; ``training.lora_merge`` writes a merged run).
``merged`` folds the adapters into the base weights (PEFT's ``merge``) and gives back plain ``nn.Linear`` layers.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import struct
from pathlib import Path

import torch
from torch import nn

from mtkit.errors import MtkitError

PEFT_MISSING = "LoRA adapters (training.lora) need PEFT, which is not installed: pip install 'mtkit[lora]'"
ADAPTER = re.compile(r"\.lora_[AB]\.")
EMBEDDINGS = ("src_embed", "tgt_embed", "output", "out_proj")  # the token tables and the output projections


def require_peft():
    """The ``peft`` module.

    Raises:
        MtkitError: PEFT is not installed (one line naming the extra).
    """
    try:
        import peft
    except ImportError:
        raise MtkitError(PEFT_MISSING) from None
    return peft


def linear_names(model: nn.Module) -> list[str]:
    """The dotted names of the model's ``nn.Linear`` layers, in module order."""
    return [name for name, module in model.named_modules() if type(module) is nn.Linear]


def _matches(pattern: str, name: str) -> bool:
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(name, pattern) or fnmatch.fnmatchcase(name, f"*.{pattern}")
    return name == pattern or name.endswith(f".{pattern}")


def _layer_kinds(names: list[str]) -> str:
    """The linear layers' names with each layer index as N (encoder.N.attn.qkv), each once."""
    return ", ".join(dict.fromkeys(re.sub(r"\.\d+\.", ".N.", n) for n in names))


def target_layers(model: nn.Module, patterns: list[str]) -> list[str]:
    """The full names of the linear layers that ``training.lora.modules`` names.

    Raises:
        MtkitError: an entry that names no linear layer (the model's linear layers are named).
    """
    names = linear_names(model)
    chosen = []
    for pattern in patterns:
        found = [n for n in names if _matches(pattern, n)]
        if not found:
            raise MtkitError(
                f"training.lora.modules: {pattern!r} names no linear layer of this model; its linear layers are "
                f"{_layer_kinds(names)}"
            )
        chosen += found
    return [n for n in names if n in set(chosen)]


def inject(model: nn.Module, section) -> list[str]:
    """Put LoRA adapters of ``section`` (the ``training.lora`` config) on ``model`` in place; freeze everything else.

    The adapters start as PEFT starts them (lora_A random, lora_B zero: the model computes what it did), drawn from
    torch's global generator.

    Returns:
        The names of the adapted layers.

    Raises:
        MtkitError: PEFT is missing, or a module entry names no linear layer.
    """
    peft = require_peft()
    targets = target_layers(model, list(section.modules))
    config = peft.LoraConfig(
        r=section.rank,
        lora_alpha=section.alpha,
        lora_dropout=section.dropout,
        target_modules=targets,
        bias="none",
    )
    peft.inject_adapter_in_model(config, model)
    for name, p in model.named_parameters():
        p.requires_grad_(bool(ADAPTER.search(f".{name}")))
    return targets


def freeze_embeddings(model: nn.Module) -> list[str]:
    """Stop training the token embeddings and the output projection; returns the frozen parameters' names."""
    frozen = []
    for name, p in model.named_parameters():
        if name.split(".")[0] in EMBEDDINGS:
            p.requires_grad_(False)
            frozen.append(name)
    return frozen


def is_adapter(name: str) -> bool:
    return bool(ADAPTER.search(f".{name}"))


def adapter_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The adapters' tensors, by their names in the model's state dict."""
    return {k: v for k, v in model.state_dict().items() if is_adapter(k)}


def base_name(name: str) -> str:
    return name.replace(".base_layer.", ".")


def merged(model: nn.Module) -> nn.Module:
    """``model`` with each LoRA layer's adapters added into its base weights (PEFT's ``merge``) and the layer replaced
    by that base ``nn.Linear``: the model without adapters that computes the same function (to rounding)."""
    from peft.tuners.lora import LoraLayer

    layers = [(name, module) for name, module in model.named_modules() if isinstance(module, LoraLayer)]
    for name, module in layers:
        with torch.no_grad():
            module.merge()
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        base = module.get_base_layer()
        base.weight.requires_grad_(True)
        if base.bias is not None:
            base.bias.requires_grad_(True)
        setattr(parent, child, base)
    for p in model.parameters():
        p.requires_grad_(True)
    return model


# ---------------------------------------------------------------------------------------- the base reference
def header_digest(path: Path) -> str:
    """The SHA-256 of a safetensors file's header: every tensor's name, dtype, shape and offsets, and for an mtkit
    checkpoint the CRC-32 of each (which ``checkpoint.load`` checks against the data) and its metadata."""
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        return hashlib.sha256(f.read(size)).hexdigest()


def metadata(section, targets: list[str], base: Path) -> dict:
    """The ``lora`` metadata entry of a LoRA run's checkpoints."""
    return {
        "rank": section.rank,
        "alpha": section.alpha,
        "dropout": section.dropout,
        "layers": targets,
        "base": str(Path(base).resolve()),
        "base_sha256": header_digest(base),
    }


def check_shape(saved: dict, section, where: Path) -> None:
    """A resumed LoRA run's adapters must keep their shape.

    Raises:
        MtkitError: ``training.lora`` has another rank or other layers than the checkpoint ``where`` (``saved``: its
            ``lora`` entry), or one of them has no LoRA.
    """
    if saved is None or section is None:
        have, want = ("no training.lora", "training.lora") if saved is None else ("training.lora", "no training.lora")
        raise MtkitError(f"{where}: was trained with {have}, the config has {want}; start a new run instead")
    if saved["rank"] != section.rank:
        raise MtkitError(
            f"{where}: its LoRA adapters have rank {saved['rank']}, the config asks for training.lora.rank "
            f"{section.rank}; adapters cannot change shape on resume: start a new run (model.init_from) instead"
        )
