"""One optimizer update: ``train_step`` and the module it runs the model through.

The loss is label-smoothed cross-entropy fused with the output projection, so no logits tensor is made. Gradients
accumulate over an update's batches and are all-reduced once under DDP. The ``Trainer`` of
``mtkit.training.loop`` calls ``train_step`` and keeps the count of updates.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from typing import Callable, Sequence

import numpy as np
import torch
from torch import nn

from mtkit.data.batches import collate
from mtkit.errors import MtkitError
from mtkit.models import PAD
from mtkit.training import distributed as distmod
from mtkit.training.distributed import is_out_of_memory
from mtkit.training.loss import fused_output_loss, label_smoothed_loss


class TeacherForcing(nn.Module):
    """A model's decoder features at the non-pad target positions, (tokens, d): the module training compiles.

    DDP wraps this module, not the model: its gradient hooks need the forward pass to go through what it wraps,
    and ``model.forward`` stays the logits that validation and decoding use.
    """

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        return self.model.features(src, tgt_in, keep)


@dataclasses.dataclass
class Step:
    """The figures of one optimizer update."""

    loss: float  # label-smoothed loss, summed over every rank
    nll: float  # plain NLL, summed over every rank
    tgt_tokens: float  # target tokens, summed over every rank
    src_tokens: int  # source tokens of this rank
    padded: int  # positions of this rank's src + tgt tensors, padding included
    votes: list[float]  # the stop votes and the training seconds, summed over every rank
    lr: float  # the learning rate it used


def train_step(
    trainer, group: Sequence[np.ndarray], votes: Callable[[], Sequence[float]] = tuple, fused: bool = True
) -> Step:
    """One optimizer update, number ``trainer.state.update + 1``, over this rank's batches ``group``.

    Per batch: forward to the decoder features, the label-smoothed loss fused with the output projection (no logits
    tensor), backward; gradients accumulate over the batches. Under DDP the gradient all-reduce runs on the last
    batch only. Then one all-reduce sums the losses, the target tokens and ``votes()`` over the ranks. The gradients
    are divided by the update's target tokens and clipped to training.clip_norm. The optimizer steps with the
    learning rate of this update. The trainer's state is left to the caller.

    Args:
        trainer: a ``loop.Trainer``; its model, optimizer, data and state are used, its state is not changed.
        group: this rank's batches of example indices (training.update_freq of them, fewer at an epoch's end).
        votes: the stop requests of this rank and its training seconds, asked once the batches are done.
        fused: False (for profiling) computes the logits with ``model.project`` first, then the same loss on them.

    Returns:
        The update's summed figures.

    Raises:
        MtkitError: out of memory on a batch, or a loss that is not finite (nothing is stepped then).
    """
    t, d, net = trainer.t, trainer.dist, trainer.net
    update = trainer.state.update + 1
    loss_sum = torch.zeros((), device=trainer.device)
    nll_sum = torch.zeros((), device=trainer.device)
    tgt_tokens = src_tokens = padded = 0
    for i, idx in enumerate(group):
        batch = collate(trainer.train_data, idx, trainer.device)
        sync = contextlib.nullcontext() if (not d.enabled or i == len(group) - 1) else net.no_sync()
        try:
            with sync:
                with trainer.autocast():
                    keep = batch.tgt_out.ne(PAD)
                    features = net(batch.src, batch.tgt_in, keep)  # (tokens, d)
                    if fused:
                        loss, nll = fused_output_loss(
                            features, *trainer.model.output_projection(), batch.tgt_out[keep], t.label_smoothing
                        )
                    else:
                        loss, nll = label_smoothed_loss(
                            trainer.model.project(features), batch.tgt_out[keep], t.label_smoothing
                        )
                (trainer.scaler.scale(loss) if trainer.scaler else loss).backward()
        except (torch.OutOfMemoryError, RuntimeError) as err:
            if is_out_of_memory(err):
                shape = tuple(batch.src.shape)
                raise MtkitError(
                    f"out of memory on a batch of {shape[0]} sentences x {max(shape[1], batch.tgt_in.size(1))} "
                    f"tokens at update {update}; lower training.batch_tokens "
                    f"(now {t.batch_tokens}) and raise training.update_freq to keep the "
                    "effective batch"
                ) from None
            raise
        loss_sum += loss.detach()
        nll_sum += nll
        tgt_tokens += batch.tgt_tokens
        src_tokens += batch.src_tokens
        padded += batch.src.numel() + batch.tgt_in.numel()
    stats = torch.tensor(
        [float(tgt_tokens), loss_sum.item(), nll_sum.item(), *votes()], dtype=torch.float64, device=trainer.device
    )
    distmod.all_reduce_sum(stats, d)
    total_tokens, total_loss, total_nll, *summed_votes = stats.tolist()
    if not math.isfinite(total_loss):
        raise MtkitError(
            f"loss became {total_loss} at update {update}; stopped without saving it. "
            f"The last good checkpoint is in {trainer.ckpt_dir}; lower training.lr or enable "
            "training.clip_norm and resume"
        )
    optimizer, scaler = trainer.optimizer, trainer.scaler
    if scaler:
        scaler.unscale_(optimizer)
    grads = [p.grad for p in trainer.model.parameters() if p.grad is not None]
    torch._foreach_mul_(grads, d.world_size / max(total_tokens, 1.0))
    if t.clip_norm > 0:
        torch.nn.utils.clip_grad_norm_(trainer.model.parameters(), t.clip_norm)
    # the ranks' mean training time (the third vote), so that a schedule over max_minutes agrees on every rank
    elapsed = summed_votes[2] / d.world_size if len(summed_votes) > 2 else 0.0
    lr = trainer.lr_at(update, elapsed)
    for g in optimizer.param_groups:
        g["lr"] = lr
    if scaler:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return Step(total_loss, total_nll, total_tokens, src_tokens, padded, summed_votes, lr)
