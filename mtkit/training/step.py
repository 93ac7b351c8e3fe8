"""One optimizer update: ``train_step``, the module it runs the model through, and how an update suits its device.

The loss is label-smoothed cross-entropy fused with the output projection, so no logits tensor is made. Gradients
accumulate over an update's batches and are all-reduced once under DDP. The ``Trainer`` of
``mtkit.training.loop`` calls ``train_step`` and keeps the count of updates.

On a CPU an update reads its losses back at once (the host waits for nothing: it did the arithmetic). On a GPU
(``StepPlan``) every read makes the host wait until the device has finished, so nothing is read between the log
windows: the batches' target positions are worked out on the host, the losses stay on the device until
``settle`` reads a whole window of them in one go, the next update's batches are collated on a worker thread,
widths are padded to multiples of 8 and the loss turns logits into log-probs in a few large chunks.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Optional, Sequence, Union

import numpy as np
import torch
from torch import nn

from mtkit.data.batches import Batch, ParallelData, collate
from mtkit.errors import MtkitError
from mtkit.models import PAD
from mtkit.training import distributed as distmod
from mtkit.training.distributed import is_out_of_memory
from mtkit.training.loss import chunk_rows_for, fused_output_loss, label_smoothed_loss, output_loss


@dataclasses.dataclass(frozen=True)
class StepPlan:
    """How an update runs: ``StepPlan(gpu=False)`` is the CPU's way, ``gpu=True`` a GPU's (``for_device``).

    A plan is plain Python: the GPU's runs on a CPU too, which is how its tests hold it to the CPU's losses.
    """

    gpu: bool = False

    @classmethod
    def for_device(cls, device: torch.device) -> "StepPlan":
        return cls(gpu=device.type == "cuda")

    @property
    def losses_on_device(self) -> bool:
        """The losses stay on the device until ``settle`` (a GPU); else each update reads them (a CPU)."""
        return self.gpu

    @property
    def multiple(self) -> int:
        """Batch widths are padded to a multiple of this (8: tensor cores' tiles, and few distinct shapes)."""
        return 8 if self.gpu else 1

    @property
    def positions(self) -> bool:
        """The target positions the loss keeps come from the host as indices, not as a device-side bool mask."""
        return self.gpu

    @property
    def prefetch(self) -> bool:
        """The next update's batches are collated (and copied to the device) on a worker thread."""
        return self.gpu

    def chunk_rows(self, vocab: int) -> int:
        """Rows of logits the fused loss takes at a time."""
        return chunk_rows_for(torch.device("cuda" if self.gpu else "cpu"), vocab)


class BatchFeed:
    """The training batches as tensors on the device, collated as ``plan`` says.

    With ``plan.prefetch``, ``ahead(group)`` starts collating an update's batches on a worker thread (pinned
    memory, non-blocking copies on CUDA) while the current update runs; ``take(idx)`` returns that batch when it
    was asked for ahead, else collates it now.
    """

    def __init__(self, data: ParallelData, device: torch.device, plan: StepPlan):
        self.data, self.device, self.plan = data, device, plan
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="mtkit-batches") if plan.prefetch else None
        self.pending: list[tuple[np.ndarray, Future]] = []

    def collate(self, idx) -> Batch:
        return collate(self.data, idx, self.device, multiple=self.plan.multiple, positions=self.plan.positions)

    def ahead(self, group: Sequence[np.ndarray]) -> None:
        """Start collating ``group``'s batches (no-op without prefetch)."""
        if self.pool is not None:
            self.pending += [(idx, self.pool.submit(self.collate, idx)) for idx in group]

    def take(self, idx: np.ndarray) -> Batch:
        """The batch of example indices ``idx`` (the very array asked for ahead, if it was)."""
        for j, (wanted, future) in enumerate(self.pending):
            if wanted is idx:
                del self.pending[j]
                return future.result()
        return self.collate(idx)

    def drop(self) -> None:
        """Forget the batches asked for ahead (a new epoch's data copy makes them stale)."""
        for _, future in self.pending:
            future.cancel()
        self.pending = []

    def close(self) -> None:
        self.drop()
        if self.pool is not None:
            self.pool.shutdown(wait=True)


class TeacherForcing(nn.Module):
    """A model's decoder features at the non-pad target positions, (tokens, d): the module training compiles;
    given the targets, their loss (``loss.output_loss``), so that ``training.compile`` compiles model and loss
    as one graph.

    DDP wraps this module, not the model: its gradient hooks need the forward pass to go through what it wraps,
    and ``model.forward`` stays the logits that validation and decoding use.
    """

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(
        self,
        src: torch.Tensor,
        tgt_in: torch.Tensor,
        keep: torch.Tensor,
        target: Optional[torch.Tensor] = None,
        smoothing: float = 0.0,
    ):
        features = self.model.features(src, tgt_in, keep)
        if target is None:
            return features
        return output_loss(features, *self.model.output_projection(), target, smoothing)


@dataclasses.dataclass
class Step:
    """The figures of one optimizer update."""

    update: int  # its number
    # label-smoothed loss and plain NLL: floats summed over every rank, or with ``StepPlan.losses_on_device``
    # this rank's 0-dim device tensors, which ``settle`` reads and sums over the ranks
    loss: Union[float, torch.Tensor]
    nll: Union[float, torch.Tensor]
    tgt_tokens: float  # target tokens, summed over every rank
    src_tokens: int  # source tokens of this rank
    padded: int  # positions of this rank's src + tgt tensors, padding included
    votes: list[float]  # the stop votes and the training seconds, summed over every rank
    lr: float  # the learning rate it used


def _not_finite(loss: float, update: int, ckpt_dir) -> MtkitError:
    return MtkitError(
        f"loss became {loss} at update {update}; stopped without saving it. "
        f"The last good checkpoint is in {ckpt_dir}; lower training.lr or enable "
        "training.clip_norm and resume"
    )


def settle(window, trainer) -> None:
    """Read the losses ``window`` (a ``console.Window``) holds on the device, in one host read, summed over
    the ranks (a collective: every rank calls it at the same update), into its totals.

    Raises:
        MtkitError: an update's loss is not finite (the first such update is named).
    """
    pending = window.take_pending()
    if not pending:
        return
    values = torch.stack([t for _, loss, nll in pending for t in (loss, nll)]).double()  # (2 * updates,)
    distmod.all_reduce_sum(values, trainer.dist)
    flat = values.tolist()
    losses, nlls = flat[0::2], flat[1::2]
    for (update, _, _), loss in zip(pending, losses):
        if not math.isfinite(loss):
            raise _not_finite(loss, update, trainer.ckpt_dir)
    window.add_losses(math.fsum(losses), math.fsum(nlls))


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

    With ``trainer.plan.losses_on_device`` the losses are not read (``Step.loss`` is a device tensor and the
    caller ``settle``s them) and only DDP reads anything back: the summed target tokens and votes.

    Returns:
        The update's summed figures.

    Raises:
        MtkitError: out of memory on a batch, or a loss that is not finite (nothing is stepped then).
    """
    t, d, net, plan = trainer.t, trainer.dist, trainer.net, trainer.plan
    update = trainer.state.update + 1
    loss_sum = torch.zeros((), device=trainer.device)
    nll_sum = torch.zeros((), device=trainer.device)
    tgt_tokens = src_tokens = padded = 0
    chunk_rows = plan.chunk_rows(trainer.model.tgt_vocab_size)
    for i, idx in enumerate(group):
        batch = trainer.feed.take(idx)
        sync = contextlib.nullcontext() if (not d.enabled or i == len(group) - 1) else net.no_sync()
        try:
            with sync:
                with trainer.autocast():
                    if batch.keep is not None:  # positions from the host: no device-side boolean index
                        keep, target = batch.keep, batch.target
                    else:
                        keep = batch.tgt_out.ne(PAD)
                        target = batch.tgt_out[keep]
                    if t.compile:  # model and loss compiled as one graph
                        loss, nll = net(batch.src, batch.tgt_in, keep, target, t.label_smoothing)
                    else:
                        features = net(batch.src, batch.tgt_in, keep)  # (tokens, d)
                        if fused:
                            weight, bias = trainer.model.output_projection()
                            loss, nll = fused_output_loss(features, weight, bias, target, t.label_smoothing, chunk_rows)
                        else:
                            logits = trainer.model.project(features)
                            loss, nll = label_smoothed_loss(logits, target, t.label_smoothing)
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
    if plan.losses_on_device:  # read back once per log window by settle(), this rank's sums until then
        total_loss, total_nll = loss_sum, nll_sum
        if d.enabled:
            stats = torch.tensor([float(tgt_tokens), *votes()], dtype=torch.float64, device=trainer.device)
            total_tokens, *summed_votes = distmod.all_reduce_sum(stats, d).tolist()
        else:
            total_tokens, summed_votes = float(tgt_tokens), [float(v) for v in votes()]
    else:
        stats = torch.tensor(
            [float(tgt_tokens), loss_sum.item(), nll_sum.item(), *votes()], dtype=torch.float64, device=trainer.device
        )
        distmod.all_reduce_sum(stats, d)
        total_tokens, total_loss, total_nll, *summed_votes = stats.tolist()
        if not math.isfinite(total_loss):
            raise _not_finite(total_loss, update, trainer.ckpt_dir)
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
    return Step(update, total_loss, total_nll, total_tokens, src_tokens, padded, summed_votes, lr)
