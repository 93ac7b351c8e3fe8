"""The optimizer and its learning-rate schedule.

Adam or AdamW over weight-decay groups; the learning rate is a function of the update number, and with
``training.decay_over: minutes`` or ``both`` (cosine) of the training time spent, too.
"""

from __future__ import annotations

import math

import torch


def learning_rate(update: int, t, d_model: int, elapsed: float = 0.0) -> float:
    """The learning rate of optimizer update number ``update`` (from 1) after ``elapsed`` training seconds; ``t`` is
    the training config.

    inverse_sqrt: linear warmup to lr, then lr * sqrt(warmup / update) (fairseq)
    noam:         lr * d_model^-0.5 * min(update^-0.5, update * warmup^-1.5) (Vaswani et al.; lr is the factor)
    cosine:       linear warmup, then cosine decay from lr to min_lr as the run's progress (``cosine_progress``)
                  goes from 0 to 1
    constant:     linear warmup, then lr
    """
    step, warmup = max(update, 1), t.warmup_updates
    if t.schedule == "noam":
        return t.lr * d_model**-0.5 * min(step**-0.5, step * max(warmup, 1) ** -1.5)
    if warmup and step < warmup:
        return t.lr * step / warmup
    if t.schedule == "inverse_sqrt":
        return t.lr * math.sqrt(max(warmup, 1) / step)
    if t.schedule == "cosine":
        progress = cosine_progress(step, elapsed, t)
        return t.min_lr + 0.5 * (t.lr - t.min_lr) * (1 + math.cos(math.pi * progress))
    return t.lr


def cosine_progress(update: int, elapsed: float, t) -> float:
    """How far the cosine schedule is, 0 to 1, by ``training.decay_over``.

    updates: the share of the updates after warmup done, out of max_updates;
    minutes: the share of max_minutes spent (a slow machine decays sooner and stops on time at min_lr);
    both:    the larger of the two: max_updates ends the run on a fast machine, max_minutes on a slow one.
    """
    warmup = t.warmup_updates
    by_updates = (update - warmup) / max(1, (t.max_updates or update) - warmup)
    by_minutes = elapsed / (60.0 * t.max_minutes) if t.max_minutes else 0.0
    progress = {"updates": by_updates, "minutes": by_minutes, "both": max(by_updates, by_minutes)}[t.decay_over]
    return min(1.0, max(0.0, progress))


def model_width(model_cfg) -> int:
    """The width the noam schedule scales by: d_model (Transformer) or hidden_size (RNN)."""
    return getattr(model_cfg, "d_model", None) or getattr(model_cfg, "hidden_size", 512)


def make_optimizer(model: torch.nn.Module, t, lr: float) -> torch.optim.Optimizer:
    """The optimizer of training config ``t`` over ``model``'s parameters, starting at learning rate ``lr``.

    Adam decays every parameter; AdamW decays none of the biases and norms.
    """
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:  # frozen: training.lora's base weights, training.freeze_embeddings
            continue
        (no_decay if p.dim() < 2 or "norm" in name else decay).append(p)
    groups = [{"params": decay, "weight_decay": t.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    kind = torch.optim.AdamW if t.optimizer == "adamw" else torch.optim.Adam
    if t.optimizer == "adam":
        groups = [{"params": decay + no_decay, "weight_decay": t.weight_decay}]
    # the fused kernel (one pass over each parameter) exists for CPU and CUDA tensors in torch >= 2.4
    return kind(groups, lr=lr, betas=tuple(t.betas), eps=t.eps, fused=True)
