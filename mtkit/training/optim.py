"""The optimizer and its learning-rate schedule.

Adam or AdamW over weight-decay groups; the learning rate is a pure function of the update number.
"""

from __future__ import annotations

import math

import torch


def learning_rate(update: int, t, d_model: int) -> float:
    """The learning rate of optimizer update number ``update`` (from 1); ``t`` is the training config.

    inverse_sqrt: linear warmup to lr, then lr * sqrt(warmup / update) (fairseq)
    noam:         lr * d_model^-0.5 * min(update^-0.5, update * warmup^-1.5) (Vaswani et al.; lr is the factor)
    cosine:       linear warmup, then cosine decay from lr to min_lr at max_updates
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
        progress = min(1.0, (step - warmup) / max(1, (t.max_updates or step) - warmup))
        return t.min_lr + 0.5 * (t.lr - t.min_lr) * (1 + math.cos(math.pi * progress))
    return t.lr


def model_width(model_cfg) -> int:
    """The width the noam schedule scales by: d_model (Transformer) or hidden_size (RNN)."""
    return getattr(model_cfg, "d_model", None) or getattr(model_cfg, "hidden_size", 512)


def make_optimizer(model: torch.nn.Module, t, lr: float) -> torch.optim.Optimizer:
    """The optimizer of training config ``t`` over ``model``'s parameters, starting at learning rate ``lr``.

    Adam decays every parameter; AdamW decays none of the biases and norms.
    """
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if p.dim() < 2 or "norm" in name else decay).append(p)
    groups = [{"params": decay, "weight_decay": t.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    kind = torch.optim.AdamW if t.optimizer == "adamw" else torch.optim.Adam
    if t.optimizer == "adam":
        groups = [{"params": decay + no_decay, "weight_decay": t.weight_decay}]
    # the fused kernel (one pass over each parameter) exists for CPU and CUDA tensors in torch >= 2.4
    return kind(groups, lr=lr, betas=tuple(t.betas), eps=t.eps, fused=True)
