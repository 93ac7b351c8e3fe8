"""What every importer of a model saved with `transformers` shares: reading its JSON, weights and SentencePiece
models, and the mtkit checkpoint it becomes."""

from __future__ import annotations

import json
from pathlib import Path

import sentencepiece as spm
import torch

from mtkit import checkpoint as ckpt
from mtkit import config as cfgmod
from mtkit.errors import MtkitError


def read_json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise MtkitError(f"{path}: unreadable JSON ({err.__class__.__name__})") from None
    if not isinstance(data, dict):
        raise MtkitError(f"{path}: expected a JSON object")
    return data


def read_weights(hf_dir: Path) -> tuple[dict[str, torch.Tensor], Path]:
    """Read a model directory's weights: ``model.safetensors`` or its shards (``model.safetensors.index.json``),
    else ``pytorch_model.bin`` through torch's restricted unpickler (``weights_only=True``).

    Args:
        hf_dir: the directory save_pretrained wrote.

    Returns:
        (the state dict, names stripped of a leading ``model.``; the file it came from, the first shard if sharded).

    Raises:
        MtkitError: no weights, an unreadable file, or a pickle the restricted unpickler refuses or that is not a
            dict of tensors.
    """
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    single, index, pickled = hf_dir / "model.safetensors", hf_dir / "model.safetensors.index.json", None
    if single.is_file() or index.is_file():
        weight_map = {} if single.is_file() else read_json(index).get("weight_map")
        if not single.is_file() and not isinstance(weight_map, dict):
            raise MtkitError(f"{index}: no weight_map object; save the model again with save_pretrained")
        files = [single] if single.is_file() else sorted({hf_dir / f for f in weight_map.values()})
        weights, source = {}, files[0]
        for file in files:
            try:
                weights.update(load_file(str(file)))
            except (SafetensorError, OSError, ValueError) as err:
                raise MtkitError(f"{file}: unreadable safetensors file ({str(err).splitlines()[0]})") from None
    elif (hf_dir / "pytorch_model.bin").is_file():
        pickled = source = hf_dir / "pytorch_model.bin"
        try:
            weights = torch.load(pickled, map_location="cpu", weights_only=True)
        except Exception as err:  # any failure of the restricted unpickler: refuse, never retry unrestricted
            first = str(err).strip().splitlines()[0][:160] if str(err).strip() else err.__class__.__name__
            raise MtkitError(
                f"{pickled}: cannot be read safely (torch.load with weights_only=True refused it: {first}); "
                "save the model as model.safetensors (save_pretrained does by default)"
            ) from None
        if not isinstance(weights, dict) or not all(torch.is_tensor(v) for v in weights.values()):
            raise MtkitError(f"{pickled}: not a state dict of tensors")
    else:
        raise MtkitError(f"{hf_dir}: no weights (model.safetensors or pytorch_model.bin)")
    return {(k[len("model.") :] if k.startswith("model.") else k): v for k, v in weights.items()}, source


def spm_bytes(path: Path) -> bytes:
    blob = path.read_bytes()
    try:
        spm.SentencePieceProcessor(model_proto=blob)
    except (OSError, RuntimeError, TypeError):
        raise MtkitError(f"{path}: not a SentencePiece model") from None
    return blob


def imported_bundle(cfg, model, tokenizer, hf_dir: Path, vocab_size: int) -> ckpt.Bundle:
    """The checkpoint of an imported model: update 0 of a run of ``cfg``, its weights and tokenizer, joint vocabulary
    of ``vocab_size``, and the folder it came from."""
    metadata = {
        "config": cfgmod.to_dict(cfg),
        "src_vocab_size": vocab_size,
        "tgt_vocab_size": vocab_size,
        "joint_vocab": True,
        "tokenizer_fingerprint": tokenizer.fingerprint(),
        "update": 0,
        "epoch": 1,
        "position": 0,
        "elapsed": 0.0,
        "best": None,
        "bad_validations": 0,
        "valid": None,
        "world_size": 1,
        "scaler": None,
        "torch": torch.__version__,
        "imported_from": hf_dir.resolve().name,
    }
    return ckpt.Bundle(metadata, model.state_dict(), tokenizer.model_bytes())
