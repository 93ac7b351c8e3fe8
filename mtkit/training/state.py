"""The training state, and the one place it goes into a checkpoint and comes back out.

``TrainState`` holds the counters of a run: its update, where it is in the data, its best validation score, its
patience counter and its training time. ``bundle`` turns a trainer and its state into a checkpoint bundle;
``restore`` puts a bundle back into a trainer and returns the state. The state's fields are top-level keys of the
checkpoint's metadata, under their own names; the optimizer moments and RNG states are ``train.*`` tensors.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Optional

import torch

from mtkit import checkpoint as ckpt
from mtkit import config as cfgmod
from mtkit import lora
from mtkit.errors import MtkitError
from mtkit.training import distributed as distmod


@dataclasses.dataclass
class TrainState:
    """Where a run is: everything a resumed run needs besides the weights, the optimizer and the RNG."""

    update: int = 0  # optimizer updates done
    epoch: int = 1  # the epoch being read, from 1
    position: int = 0  # batches of this rank's shard of the epoch already trained on
    elapsed: float = 0.0  # training seconds over every start of the run
    best: Optional[float] = None  # best validation score by training.best_metric
    bad_validations: int = 0  # validations since the best one (training.patience)

    def advance(self, batches: int, elapsed: float) -> None:
        """Count one update made of ``batches`` batches, with ``elapsed`` training seconds so far."""
        self.update += 1
        self.position += batches
        self.elapsed = elapsed

    def next_epoch(self) -> None:
        """Move to the first batch of the next epoch."""
        self.epoch, self.position = self.epoch + 1, 0

    def record_validation(self, improved: bool, score: Optional[float]) -> None:
        """Keep ``score`` as the best when it ``improved``; otherwise count one more validation without progress."""
        if improved:
            self.best, self.bad_validations = score, 0
        else:
            self.bad_validations += 1

    def to_metadata(self) -> dict[str, Any]:
        """The fields as checkpoint metadata entries."""
        return dataclasses.asdict(self)

    @classmethod
    def from_metadata(cls, meta: dict, world_size: int) -> "TrainState":
        """The state a checkpoint's metadata holds, for a run of ``world_size`` processes.

        Args:
            meta: the checkpoint's metadata.
            world_size: processes of the resumed run; ``position`` is rescaled when it differs from the saved one.

        Raises:
            KeyError: ``meta`` lacks update, epoch or position (not a training checkpoint).
        """
        state = cls(
            update=meta["update"],
            epoch=meta["epoch"],
            position=meta["position"],
            elapsed=meta.get("elapsed", 0.0),
            best=meta.get("best"),
            bad_validations=meta.get("bad_validations", 0),
        )
        saved_world = meta.get("world_size", 1)
        if saved_world != world_size:
            # position counts batches of one rank's shard: saved_world * position of the epoch's batches are done
            state.position = state.position * saved_world // world_size
        return state


def bundle(trainer, valid: Optional[dict], *, train: bool = True) -> ckpt.Bundle:
    """The checkpoint of ``trainer`` now: its state, weights, tokenizer and, with ``train``, optimizer and RNG.

    Args:
        trainer: a ``loop.Trainer``; its cfg, tokenizer, model, optimizer, scaler, dist and state are read.
        valid: the metrics of a validation at this update, or None.
        train: include the optimizer moments and every rank's RNG states (a resumable checkpoint). With it this is
            a collective: under DDP every rank must call it; without it (best.safetensors) any rank may.

    Returns:
        The bundle; only the main rank's is meant to be saved.
    """
    metadata = {
        "config": cfgmod.to_dict(trainer.cfg),
        "src_vocab_size": trainer.tokenizer.src_vocab_size,
        "tgt_vocab_size": trainer.tokenizer.tgt_vocab_size,
        "joint_vocab": trainer.tokenizer.joint,
        "tokenizer_fingerprint": trainer.tokenizer.fingerprint(),
        **trainer.state.to_metadata(),
        "valid": valid,
        "world_size": trainer.dist.world_size,
        "scaler": trainer.scaler.state_dict() if trainer.scaler else None,
        "torch": torch.__version__,
    }
    tensors = _train_tensors(trainer) if train else {}
    weights = trainer.model.state_dict()
    if trainer.lora_layers is not None:  # the adapters, and which base weights they go on
        metadata["lora"] = trainer.lora_meta
        weights = lora.adapter_state(trainer.model)
    return ckpt.Bundle(metadata, weights, trainer.tokenizer.model_bytes(), tensors)


def _train_tensors(trainer) -> dict[str, torch.Tensor]:
    d = trainer.dist
    tensors = ckpt.optimizer_tensors(trainer.optimizer)
    for r, state in enumerate(distmod.all_gather_bytes(torch.get_rng_state(), d)):
        tensors[f"rng.cpu.{r}"] = state
    if trainer.device.type == "cuda":
        for r, state in enumerate(distmod.all_gather_bytes(torch.cuda.get_rng_state(trainer.device), d)):
            tensors[f"rng.cuda.{r}"] = state
    return tensors


def restore(trainer, path: Path, saved: ckpt.Bundle) -> TrainState:
    """Load a training checkpoint back into ``trainer``: weights, optimizer, RNG and loss scaler.

    Args:
        trainer: a ``loop.Trainer``; its model, optimizer, scaler, tokenizer, dist and device are written or read.
        path: where ``saved`` was read from, for messages.
        saved: a bundle loaded with its ``train.*`` tensors.

    Returns:
        The run's state at the checkpoint. The trainer's ``state`` is left to the caller.

    Raises:
        MtkitError: the checkpoint was trained with another tokenizer, or its weights do not fit the model.
    """
    meta, d = saved.metadata, trainer.dist
    if meta.get("tokenizer_fingerprint") != trainer.tokenizer.fingerprint():
        raise MtkitError(
            f"{path}: was trained with another tokenizer than {trainer.cfg.data.dir}; "
            "re-run prepare with the run's data config or start a new run"
        )
    if trainer.lora_layers is not None or meta.get("lora") is not None:
        lora.check_shape(meta.get("lora"), trainer.t.lora, path)
        base, weights = ckpt.lora_base_weights(meta["lora"], path)
        ckpt.load_base_weights(trainer.model, weights, base)
        if meta["lora"]["layers"] != trainer.lora_layers:
            raise MtkitError(f"{path}: its LoRA adapters are on other layers than training.lora.modules now names")
        ckpt.load_adapters(trainer.model, saved.model, path)
        trainer.lora_meta = meta["lora"]
    else:
        ckpt.load_weights(trainer.model, saved.model, path)
    ckpt.restore_optimizer(trainer.optimizer, saved.train, trainer.device)
    rng = saved.train.get(f"rng.cpu.{d.rank}")
    if rng is not None and meta.get("world_size", 1) == d.world_size:  # saved by a process of another world otherwise
        torch.set_rng_state(rng)
    cuda_rng = saved.train.get(f"rng.cuda.{d.rank}")
    if cuda_rng is not None and trainer.device.type == "cuda":
        torch.cuda.set_rng_state(cuda_rng, trainer.device)
    if trainer.scaler and meta.get("scaler"):
        trainer.scaler.load_state_dict(meta["scaler"])
    return TrainState.from_metadata(meta, d.world_size)
