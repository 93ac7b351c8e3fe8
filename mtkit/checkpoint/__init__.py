"""Self-describing checkpoints: saving, loading and checking bundles, pruning, averaging, loading for inference.

A checkpoint is one safetensors file, written atomically; pickles are never read. It holds
- ``model.*``: the weights;
- ``tokenizer.src`` / ``tokenizer.tgt``: the SentencePiece model bytes (uint8), so a checkpoint translates alone;
- ``train.*`` (training checkpoints only): optimizer moments, RNG states;
and a JSON ``metadata`` entry: the resolved config, vocab sizes, tokenizer fingerprint, the training state
(``mtkit.training.state``), validation metrics. A CRC-32 of every tensor goes beside it: safetensors has no
checksum of its own, so a flipped byte in the data would otherwise load silently. ``best.safetensors`` and
``average.safetensors`` carry no ``train.*``.
"""

from mtkit.checkpoint.model import (
    Loaded,
    load_adapters,
    load_base_weights,
    load_checkpoint,
    load_lora_checkpoint,
    lora_base_weights,
    whole_weights,
)
from mtkit.checkpoint.store import (
    CKPT_RE,
    FORMAT,
    Bundle,
    average,
    average_main,
    check_weights,
    latest_loadable,
    list_checkpoints,
    load,
    load_latest,
    load_weights,
    optimizer_tensors,
    prune,
    read_metadata,
    remove_stale_temps,
    resolve,
    restore_optimizer,
    save,
    save_run,
)

__all__ = [
    "CKPT_RE",
    "FORMAT",
    "Bundle",
    "Loaded",
    "average",
    "average_main",
    "check_weights",
    "latest_loadable",
    "list_checkpoints",
    "load",
    "load_adapters",
    "load_base_weights",
    "load_checkpoint",
    "load_latest",
    "load_lora_checkpoint",
    "load_weights",
    "lora_base_weights",
    "optimizer_tensors",
    "prune",
    "read_metadata",
    "remove_stale_temps",
    "resolve",
    "restore_optimizer",
    "save",
    "save_run",
    "whole_weights",
]
