"""`mtkit train`: one visible, step-based training loop.

Token batches from length buckets -> label-smoothed cross-entropy -> gradient accumulation (no_sync under DDP)
-> clip -> Adam with a pure learning-rate function -> validation (loss, BLEU, chrF through the search code)
-> atomic safetensors checkpoints holding everything needed to resume bit-for-bit.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F

from mtkit import checkpoint as ckpt
from mtkit import config as cfgmod
from mtkit import distributed as distmod
from mtkit.errors import MtkitError
from mtkit.files import RunLock, atomic_write_bytes, atomic_write_text, remove_stale_temps
from mtkit.manifest import MANIFEST, read_manifest
from mtkit.models import PAD, build_model

STOP_KEYS = {"max_updates", "max_epochs", "max_minutes", "patience", "validate_every", "save_every", "log_every",
             "keep_last", "keep_best", "average_last", "valid_max_sentences", "threads", "compile", "devices",
             "run_dir"}


# ------------------------------------------------------------------------------------- pure pieces
def learning_rate(update: int, t, d_model: int) -> float:
    """Learning rate of optimizer update number ``update`` (1-based); ``t`` is the training config.

    inverse_sqrt: linear warmup to lr, then lr * sqrt(warmup / update) (fairseq)
    noam:         lr * d_model^-0.5 * min(update^-0.5, update * warmup^-1.5) (Vaswani et al.; lr is the factor)
    cosine:       linear warmup, then cosine decay from lr to min_lr at max_updates
    constant:     linear warmup, then lr
    """
    step, warmup = max(update, 1), t.warmup_updates
    if t.schedule == "noam":
        return t.lr * d_model ** -0.5 * min(step ** -0.5, step * max(warmup, 1) ** -1.5)
    if warmup and step < warmup:
        return t.lr * step / warmup
    if t.schedule == "inverse_sqrt":
        return t.lr * math.sqrt(max(warmup, 1) / step)
    if t.schedule == "cosine":
        progress = min(1.0, (step - warmup) / max(1, (t.max_updates or step) - warmup))
        return t.min_lr + 0.5 * (t.lr - t.min_lr) * (1 + math.cos(math.pi * progress))
    return t.lr


def _smoothed_gradient(log_probs: torch.Tensor, target: torch.Tensor, smoothing: float,
                       out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """d loss / d logits of the label-smoothed loss, from (rows, vocab) log-probs and (rows, 1) targets:
    softmax - ((1 - eps) * onehot(target) + eps / vocab), written into ``out`` (default: over ``log_probs``)."""
    grad = torch.exp(log_probs, out=log_probs if out is None else out)
    grad.sub_(smoothing / log_probs.size(-1))
    return grad.scatter_add_(1, target, grad.new_full((target.size(0), 1), -(1.0 - smoothing)))


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Label-smoothed cross-entropy of (tokens, vocab) logits, summed, with the gradient written in one pass.

    loss = (1 - eps) * nll + eps * mean_over_vocab(-log p)   (the uniform smoothing of Szegedy et al. 2016)
    d loss / d logits = softmax(logits) - ((1 - eps) * onehot(target) + eps / vocab)
    Rows whose target is PAD are expected to be removed by the caller.
    """

    @staticmethod
    def forward(ctx, logits, target, smoothing: float):
        log_probs = logits.float().log_softmax(dim=-1)  # (tokens, vocab)
        nll = -log_probs.gather(1, target[:, None]).squeeze(1)  # (tokens,)
        smooth = -log_probs.mean(dim=-1)
        loss = ((1.0 - smoothing) * nll + smoothing * smooth).sum()
        ctx.save_for_backward(log_probs, target)
        ctx.smoothing, ctx.in_dtype = smoothing, logits.dtype
        return loss, nll.sum()

    @staticmethod
    def backward(ctx, grad_loss, grad_nll):
        log_probs, target = ctx.saved_tensors
        grad = _smoothed_gradient(log_probs, target[:, None], ctx.smoothing)  # in place: log_probs is not needed again
        grad.mul_(grad_loss)
        return grad.to(ctx.in_dtype), None, None


def label_smoothed_loss(logits: torch.Tensor, target: torch.Tensor, smoothing: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed over non-pad target tokens: (label-smoothed loss, plain NLL (no gradient)).

    ``logits`` is (batch, tgt_len, vocab) with ``target`` (batch, tgt_len), or already (tokens, vocab) with
    ``target`` (tokens,) holding no padding.
    """
    if logits.dim() == 3:
        keep = target.ne(PAD)
        logits, target = logits[keep], target[keep]
    loss, nll = _SmoothedCrossEntropy.apply(logits, target, smoothing)
    return loss, nll.detach()


class _OutputBuffers:
    """Reusable flat buffers for the (tokens, vocab) logits of the fused output loss, one free list per device
    and dtype. A forward pass takes one (or allocates one), the backward pass gives it back; a graph that is never
    backpropagated just drops its buffer. glibc's malloc neither keeps a 120 MB block mapped between updates (it
    maps and unmaps it, paying a page fault per 4 KiB every time) nor reuses a freed block for the next aligned
    request, so a fresh (tokens, vocab) tensor per update costs more than the arithmetic done in it."""

    def __init__(self):
        self.free: dict[tuple, list[torch.Tensor]] = {}

    def take(self, numel: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        pool = self.free.setdefault((device, dtype), [])
        while pool:
            flat = pool.pop()
            if flat.numel() >= numel:
                return flat
        return torch.empty(numel, dtype=dtype, device=device)

    def give(self, flat: torch.Tensor) -> None:
        pool = self.free.setdefault((flat.device, flat.dtype), [])
        if len(pool) < 2:
            pool.append(flat)


_BUFFERS = _OutputBuffers()


class _FusedOutputLoss(torch.autograd.Function):
    """Output projection + label-smoothed cross-entropy in one function: features (tokens, d) and the projection
    weight (vocab, d) [+ bias (vocab,)] -> (summed loss, summed NLL), the loss of ``_SmoothedCrossEntropy`` on
    ``F.linear(features, weight, bias)``.

    The logits go into a reused buffer (one matmul), then ``CHUNK_ROWS`` rows at a time turn into log-probs
    while they are in cache, and the gradient with respect to the logits (softmax minus the smoothed target)
    overwrites them in place. Backward is then two matmuls with that gradient: no (tokens, vocab) tensor is
    allocated per update, and the logits are read and written once instead of four times. Autocast (bf16/fp16)
    is honoured: the matmuls run in its dtype, the softmax in float32.
    """

    CHUNK_ROWS = 128

    @staticmethod
    def forward(ctx, features, weight, bias, target, smoothing: float):
        want_grad = any(ctx.needs_input_grad[:3])
        device_type = features.device.type
        compute = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else features.dtype
        tokens, vocab = features.size(0), weight.size(0)
        with torch.autocast(device_type, enabled=False):
            x, w = features.to(compute), weight.to(compute)
            flat = _BUFFERS.take(tokens * vocab, compute, features.device)
            logits = flat[: tokens * vocab].view(tokens, vocab)
            if bias is None:
                torch.mm(x, w.t(), out=logits)
            else:
                torch.addmm(bias.to(compute), x, w.t(), out=logits)
            nll = features.new_zeros((), dtype=torch.float32)
            smooth = features.new_zeros((), dtype=torch.float32)
            for start in range(0, tokens, _FusedOutputLoss.CHUNK_ROWS):
                chunk = logits[start : start + _FusedOutputLoss.CHUNK_ROWS]
                log_probs = chunk.float().log_softmax(dim=-1)
                tgt = target[start : start + _FusedOutputLoss.CHUNK_ROWS, None]
                nll -= log_probs.gather(1, tgt).sum()
                smooth -= log_probs.sum() / vocab
                if want_grad:  # d loss / d logits, written over the logits of this chunk
                    if chunk.dtype == torch.float32:
                        _smoothed_gradient(log_probs, tgt, smoothing, out=chunk)
                    else:  # computed in float32, stored in the autocast dtype
                        chunk.copy_(_smoothed_gradient(log_probs, tgt, smoothing))
        if want_grad:
            ctx.save_for_backward(x, w)
            ctx.grad_logits, ctx.flat, ctx.has_bias = logits, flat, bias is not None
            ctx.dtypes = (features.dtype, weight.dtype)
        else:
            _BUFFERS.give(flat)
        return (1.0 - smoothing) * nll + smoothing * smooth, nll

    @staticmethod
    def backward(ctx, grad_loss, grad_nll):
        x, w = ctx.saved_tensors
        g = ctx.grad_logits
        if g is None:
            raise RuntimeError("the fused output loss supports one backward pass per forward (no retain_graph)")
        grad_features = grad_weight = grad_bias = None
        # scaled after the cast to the inputs' (float32) dtypes: a loss scale of fp16 training cannot overflow
        with torch.autocast(g.device.type, enabled=False):
            if ctx.needs_input_grad[0]:
                grad_features = (g @ w).to(ctx.dtypes[0]).mul_(grad_loss)
            if ctx.needs_input_grad[1]:
                grad_weight = (g.t() @ x).to(ctx.dtypes[1]).mul_(grad_loss)
            if ctx.has_bias and ctx.needs_input_grad[2]:
                grad_bias = g.sum(0, dtype=torch.float32).to(ctx.dtypes[1]).mul_(grad_loss)
        ctx.grad_logits = None
        _BUFFERS.give(ctx.flat)
        ctx.flat = None
        return grad_features, grad_weight, grad_bias, None, None


def fused_output_loss(features: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                      target: torch.Tensor, smoothing: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``label_smoothed_loss(F.linear(features, weight, bias), target, smoothing)`` without materialising the
    logits as a tensor of their own: features (tokens, d), target (tokens,) holding no padding."""
    loss, nll = _FusedOutputLoss.apply(features, weight, bias, target, smoothing)
    return loss, nll.detach()


def teacher_forced_loss(model, projection: tuple, batch, smoothing: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(summed label-smoothed loss, summed NLL) of a training batch, the way training computes it: ``model``
    (possibly DDP-wrapped) returns the features at the non-pad target positions, and ``projection`` (the raw
    model's ``output_projection()``) is fused with the loss."""
    keep = batch.tgt_out.ne(PAD)
    features = model(batch.src, batch.tgt_in, keep, features=True)  # (tokens, d)
    return fused_output_loss(features, *projection, batch.tgt_out[keep], smoothing)


# --------------------------------------------------------------------------------------- run dir
def _differences(a: dict, b: dict, prefix: str = "") -> list[str]:
    keys = sorted(set(a) | set(b))
    out = []
    for k in keys:
        path = f"{prefix}{k}"
        if isinstance(a.get(k), dict) and isinstance(b.get(k), dict):
            out += _differences(a[k], b[k], path + ".")
        elif a.get(k) != b.get(k) and not (prefix == "training." and k in STOP_KEYS):
            out.append(path)
    return out


def resolve_config(config: Optional[Path], overrides: list[str], resume: Optional[Path], force: bool):
    """-> (config, resuming). With --resume the run's saved config is the base; a CONFIG given too must match it."""
    if resume is None:
        if config is None:
            raise MtkitError("give a CONFIG file, or --resume RUN_DIR to continue a run")
        cfg = cfgmod.load(config, overrides)
        if cfg.training is None:
            raise MtkitError(f"{config}: missing section 'training' (at least training.run_dir)")
        run_dir = Path(cfg.training.run_dir)
        if ckpt.list_checkpoints(run_dir / "checkpoints"):
            raise MtkitError(f"{run_dir}: already holds checkpoints; continue it with "
                             f"'mtkit train --resume {run_dir}' or set another training.run_dir")
        return cfg, False
    saved_path = Path(resume) / "config.yaml"
    if not saved_path.is_file():
        raise MtkitError(f"{resume}: not a run directory (no config.yaml); start it with mtkit train CONFIG")
    saved = cfgmod.load(saved_path, overrides)
    if config is None and overrides and not force:
        diff = _differences(cfgmod.to_dict(cfgmod.load(saved_path, [])), cfgmod.to_dict(saved))
        if diff:
            raise MtkitError(f"--set changes the run's config {saved_path} at {', '.join(diff[:4])}; only stopping "
                             "and logging keys may change on resume: add --force to resume with it anyway")
    if config is not None:
        given = cfgmod.load(config, overrides)
        diff = _differences(cfgmod.to_dict(saved), cfgmod.to_dict(given))
        if diff and not force:
            raise MtkitError(f"{config}: differs from the run's config {saved_path} at {', '.join(diff[:4])}; "
                             "drop CONFIG to resume as saved, or add --force to resume with it")
        saved = given
    if saved.training is None:
        raise MtkitError(f"{saved_path}: missing section 'training'")
    if Path(saved.training.run_dir).resolve() != Path(resume).resolve():
        saved = cfgmod.from_dict(cfgmod.apply_overrides(cfgmod.to_dict(saved), [f"training.run_dir={resume}"]))
    return saved, True


# ------------------------------------------------------------------------------------------ main
def train_main(*, config: Optional[Path], overrides: list[str], resume: Optional[Path], force: bool, gpus: int) -> None:
    cfg, resuming = resolve_config(config, overrides, resume, force)  # config errors once, before any launch
    if gpus > 1 and "LOCAL_RANK" not in os.environ:
        launch_torchrun(gpus, cfg, config=config, overrides=overrides, resume=resume, force=force)
        return
    Trainer(cfg, resuming=resuming).run()


def launch_torchrun(nproc: int, cfg, *, config: Optional[Path], overrides: list[str], resume: Optional[Path],
                    force: bool) -> None:
    """`mtkit train --gpus N ...` = `torchrun --standalone --nproc_per_node N -m mtkit train ...` (one machine).

    With training.devices cpu (or auto without a GPU) the N processes train on the CPU over gloo.
    """
    device = distmod.pick_device(cfg.training.devices)
    if device.type == "cuda" and nproc > torch.cuda.device_count():
        raise MtkitError(f"--gpus {nproc}: only {torch.cuda.device_count()} CUDA GPU(s) visible; "
                         f"use --gpus {torch.cuda.device_count()} or set training.devices: cpu")
    args = ["train"] + ([str(config)] if config is not None else [])
    args += [a for item in overrides for a in ("--set", item)]
    args += (["--resume", str(resume)] if resume is not None else []) + (["--force"] if force else [])
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", "-m", "mtkit"]
    proc = subprocess.Popen(cmd + args)
    interrupted = []

    def forward(signum, frame):  # torchrun passes it on to the workers, which save and stop
        interrupted.append(signum)
        proc.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    while True:
        try:
            code = proc.wait()
            break
        except KeyboardInterrupt:  # the workers got the same Ctrl-C: wait while they save and stop
            interrupted.append(signal.SIGINT)
    if interrupted:
        raise KeyboardInterrupt  # the workers said where they stopped and how to resume
    if code:
        raise MtkitError(f"torchrun exited with code {code}; see the messages of the failing rank above")


class Trainer:
    def __init__(self, cfg: cfgmod.Config, *, resuming: bool = False):
        from mtkit.data import ParallelData
        from mtkit.tokenizer import Tokenizer

        self.cfg, self.t = cfg, cfg.training
        if self.t.schedule == "cosine" and not self.t.max_updates:
            raise MtkitError("training.schedule cosine decays to min_lr at training.max_updates: set "
                             "training.max_updates (or use schedule inverse_sqrt)")
        self.run_dir = Path(self.t.run_dir)
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.resuming = resuming
        if self.t.threads:
            torch.set_num_threads(self.t.threads)
        self.dist = distmod.setup(self.t.devices)
        self.device = self.dist.device
        data_dir = Path(cfg.data.dir)
        if not (data_dir / MANIFEST).is_file():
            raise MtkitError(f"{data_dir}: no prepared data (manifest.json missing); run 'mtkit prepare CONFIG' first")
        self.manifest = read_manifest(data_dir)
        self.tokenizer = Tokenizer.from_dir(data_dir)
        self.train_data = ParallelData(data_dir, "train")
        self.valid_data = ParallelData(data_dir, "valid") if "valid" in self.manifest.get("splits", {}) else None
        torch.manual_seed(self.t.seed + self.dist.rank)
        self.model = build_model(cfg.model, self.tokenizer.src_vocab_size, self.tokenizer.tgt_vocab_size,
                                 self.tokenizer.joint).to(self.device)
        self.optimizer = self._optimizer()
        self.scaler = torch.amp.GradScaler("cuda") if self.t.precision == "fp16" and self.device.type == "cuda" else None
        if self.t.precision == "fp16" and self.device.type != "cuda":
            raise MtkitError("training.precision fp16 needs a CUDA GPU; use bf16 or fp32 on CPU")
        self.update, self.epoch, self.position, self.elapsed = 0, 1, 0, 0.0
        self.best: Optional[float] = None
        self.bad_validations = 0
        self.stop_signal: Optional[str] = None

    # -- set-up -------------------------------------------------------------------------------------
    def _optimizer(self):
        decay, no_decay = [], []
        for name, p in self.model.named_parameters():
            (no_decay if p.dim() < 2 or "norm" in name else decay).append(p)
        groups = [{"params": decay, "weight_decay": self.t.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
        kind = torch.optim.AdamW if self.t.optimizer == "adamw" else torch.optim.Adam
        if self.t.optimizer == "adam":
            groups = [{"params": decay + no_decay, "weight_decay": self.t.weight_decay}]
        # the fused kernel (one pass over each parameter) exists for CPU and CUDA tensors in torch >= 2.4
        return kind(groups, lr=self.lr_at(1), betas=tuple(self.t.betas), eps=self.t.eps, fused=True)

    def lr_at(self, update: int) -> float:
        width = getattr(self.cfg.model, "d_model", None) or getattr(self.cfg.model, "hidden_size", 512)
        return learning_rate(update, self.t, width)

    def autocast(self):
        if self.t.precision == "fp32":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.t.precision == "bf16" else torch.float16
        return torch.autocast(self.device.type, dtype=dtype)

    # -- checkpoints ------------------------------------------------------------------------------
    def metadata(self, valid: Optional[dict]) -> dict:
        return {
            "config": cfgmod.to_dict(self.cfg),
            "src_vocab_size": self.tokenizer.src_vocab_size,
            "tgt_vocab_size": self.tokenizer.tgt_vocab_size,
            "joint_vocab": self.tokenizer.joint,
            "tokenizer_fingerprint": self.tokenizer.fingerprint(),
            "update": self.update, "epoch": self.epoch, "position": self.position,
            "elapsed": self.elapsed, "best": self.best, "bad_validations": self.bad_validations,
            "valid": valid, "world_size": self.dist.world_size,
            "scaler": self.scaler.state_dict() if self.scaler else None,
            "torch": torch.__version__,
        }

    def tokenizer_blobs(self) -> dict[str, bytes]:
        return self.tokenizer.model_bytes()

    def train_tensors(self) -> dict[str, torch.Tensor]:
        tensors = {}
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        for i, p in enumerate(params):
            for k, v in self.optimizer.state.get(p, {}).items():
                if torch.is_tensor(v):
                    tensors[f"opt.{i}.{k}"] = v
        for r, state in enumerate(distmod.all_gather_bytes(torch.get_rng_state(), self.dist)):
            tensors[f"rng.cpu.{r}"] = state
        if self.device.type == "cuda":
            for r, state in enumerate(distmod.all_gather_bytes(torch.cuda.get_rng_state(self.device), self.dist)):
                tensors[f"rng.cuda.{r}"] = state
        return tensors

    def raw_model(self):
        return self.model

    def save_checkpoint(self, valid: Optional[dict]) -> None:
        train = self.train_tensors()  # collective under DDP: every rank takes part
        if self.dist.is_main:
            bundle = ckpt.Bundle(self.metadata(valid), self.raw_model().state_dict(), self.tokenizer_blobs(), train)
            path = self.ckpt_dir / f"ckpt_{self.update:07d}.safetensors"
            ckpt.save(path, bundle)
            self.prune_checkpoints()
        distmod.barrier(self.dist)

    def prune_checkpoints(self) -> None:
        found = ckpt.list_checkpoints(self.ckpt_dir)
        keep = {p for _, p in found[-self.t.keep_last :]}
        if self.t.keep_best and self.valid_data is not None:
            scored = []
            for _, p in found:
                try:
                    v = ckpt.read_metadata(p).get("valid") or {}
                except MtkitError:
                    continue
                if self.t.best_metric in v:
                    sign = 1 if self.t.best_metric == "loss" else -1
                    scored.append((sign * v[self.t.best_metric], p))
            keep |= {p for _, p in sorted(scored)[: self.t.keep_best]}
        for _, p in found:
            if p not in keep:
                p.unlink(missing_ok=True)

    def restore(self) -> None:
        found = [p for _, p in ckpt.list_checkpoints(self.ckpt_dir)]
        if not found:
            if self.dist.is_main:
                print(f"no checkpoint in {self.ckpt_dir} yet: starting from update 0")
            return
        bundle, errors = None, []
        for path in reversed(found):  # a damaged newest checkpoint falls back to the previous one
            try:
                bundle = ckpt.load(path, with_train=True, map_location="cpu")
                break
            except MtkitError as err:
                errors.append(err)
        if bundle is None:
            raise errors[0]
        if self.dist.is_main:
            for err in errors:
                print(f"mtkit: warning: {err} -- resuming from {path.name} instead", file=sys.stderr)
        meta = bundle.metadata
        if meta.get("tokenizer_fingerprint") != self.tokenizer.fingerprint():
            raise MtkitError(f"{path}: was trained with another tokenizer than {self.cfg.data.dir}; "
                             "re-run prepare with the run's data config or start a new run")
        ckpt.load_weights(self.raw_model(), bundle.model, path)
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        state = {}
        for key, v in bundle.train.items():
            if key.startswith("opt."):
                _, i, name = key.split(".", 2)
                state.setdefault(int(i), {})[name] = v.to(self.device) if name != "step" else v
        sd = self.optimizer.state_dict()
        sd["state"] = state
        self.optimizer.load_state_dict(sd)
        del params
        rng = bundle.train.get(f"rng.cpu.{self.dist.rank}")
        if rng is not None and meta.get("world_size", 1) == self.dist.world_size:
            torch.set_rng_state(rng)
        cuda_rng = bundle.train.get(f"rng.cuda.{self.dist.rank}")
        if cuda_rng is not None and self.device.type == "cuda":
            torch.cuda.set_rng_state(cuda_rng, self.device)
        if self.scaler and meta.get("scaler"):
            self.scaler.load_state_dict(meta["scaler"])
        self.update, self.epoch, self.position = meta["update"], meta["epoch"], meta["position"]
        self.elapsed, self.best, self.bad_validations = meta["elapsed"], meta["best"], meta["bad_validations"]
        saved_world = meta.get("world_size", 1)
        if saved_world != self.dist.world_size:
            # position counts batches of one rank's shard: W_saved * position of the epoch's batches are done
            self.position = self.position * saved_world // self.dist.world_size
        if self.dist.is_main:
            moved = f" ({saved_world} -> {self.dist.world_size} processes)" if saved_world != self.dist.world_size else ""
            print(f"resumed from {path.name}: update {self.update}, epoch {self.epoch}{moved}")

    # -- validation ----------------------------------------------------------------------------------
    @torch.no_grad()
    def validate(self) -> dict:
        from mtkit.data import collate, make_batches
        from mtkit.score import corpus_scores
        from mtkit.search import beam_search, greedy

        model = self.raw_model()
        was_training = model.training
        model.eval()
        data = self.valid_data
        loss_sum = nll_sum = tokens = 0.0
        batches = make_batches(data.src_lengths, data.tgt_lengths, self.t.batch_tokens, seed=0, epoch=0, shuffle=False)
        for idx in batches:
            batch = collate(data, idx, self.device)
            with self.autocast():
                logits = model(batch.src, batch.tgt_in)
            loss, nll = label_smoothed_loss(logits, batch.tgt_out, self.t.label_smoothing)
            loss_sum, nll_sum, tokens = loss_sum + loss.item(), nll_sum + nll.item(), tokens + batch.tgt_tokens
        result = {"loss": loss_sum / tokens, "nll": nll_sum / tokens, "ppl": math.exp(min(nll_sum / tokens, 50))}
        if self.t.valid_bleu:
            n = len(data) if self.t.valid_max_sentences is None else min(len(data), self.t.valid_max_sentences)
            order = sorted(range(n), key=lambda i: int(data.src_lengths[i]))
            hyps: list[str] = [""] * n
            dec = self.cfg.decoding
            for start in range(0, n, dec.batch_size):
                idx = order[start : start + dec.batch_size]
                batch = collate(data, idx, self.device)
                with self.autocast():
                    if self.t.valid_beam_size > 1:
                        out = beam_search(model, batch.src, beam_size=self.t.valid_beam_size,
                                          length_penalty=dec.length_penalty, max_len_a=dec.max_len_a,
                                          max_len_b=dec.max_len_b, stopping=dec.stopping)
                    else:
                        out = greedy(model, batch.src, max_len_a=dec.max_len_a, max_len_b=dec.max_len_b)
                for i, hyp in zip(idx, self.tokenizer.decode_tgt([h[0].tokens for h in out])):
                    hyps[i] = hyp
            refs = data.reference_lines()[:n]
            scores = corpus_scores(hyps, [refs], metrics=("bleu", "chrf"))
            result["bleu"], result["chrf"] = scores["bleu"]["score"], scores["chrf"]["score"]
            result["example"] = {"hyp": hyps[order[len(order) // 2]], "ref": refs[order[len(order) // 2]]}
        model.train(was_training)
        return result

    def improved(self, valid: dict) -> bool:
        value = valid.get(self.t.best_metric)
        if value is None:
            return False
        better = self.best is None or (value < self.best if self.t.best_metric == "loss" else value > self.best)
        if better:
            self.best = value
        return better

    # -- the loop ------------------------------------------------------------------------------------
    def run(self) -> None:
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self.ckpt_dir.mkdir(exist_ok=True)
        except OSError as err:
            raise MtkitError(f"{self.run_dir}: cannot create the run directory ({err.strerror or err}); "
                             "choose another training.run_dir") from None
        lock = RunLock(self.run_dir) if self.dist.is_main else contextlib.nullcontext()
        handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        with lock:
            if self.dist.is_main:
                remove_stale_temps(self.ckpt_dir)
                remove_stale_temps(self.run_dir)
            try:
                self._run()
            except RuntimeError as err:
                if not (self.dist.enabled and distmod.peer_lost(err)):
                    raise
                first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                raise MtkitError(f"rank {self.dist.rank}: another process of this run failed or stopped answering "
                                 f"({first[:200]}); its own error is above. Continue from the last checkpoint "
                                 f"with: mtkit train --resume {self.run_dir}") from None
            finally:
                for s, h in handlers.items():
                    if h is not None:
                        signal.signal(s, h)
                distmod.teardown(self.dist)

    def _install_signal_handlers(self):
        first_at = [0.0]

        def handler(signum, frame):
            # torchrun passes a Ctrl-C on to its workers, which also got it from the terminal: a repeat within
            # a second is that echo, not a second request
            if self.stop_signal is not None and time.monotonic() - first_at[0] > 1.0:  # second signal: stop now
                raise KeyboardInterrupt
            if self.stop_signal is None:
                self.stop_signal, first_at[0] = signal.Signals(signum).name, time.monotonic()

        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, handler)

    def _run(self) -> None:
        from mtkit.data import collate, make_batches, shard_batches
        from mtkit.console import Progress, print_summary

        t, d = self.t, self.dist
        if self.resuming:
            self.restore()
            if not distmod.same_on_all_ranks(self.update, d):
                raise MtkitError(f"{self.ckpt_dir}: the {d.world_size} processes found different latest checkpoints; "
                                 "on several machines training.run_dir must be one shared directory")
        if d.is_main:
            cfgmod_text = cfgmod.dump(self.cfg)
            atomic_write_text(self.run_dir / "config.yaml", cfgmod_text)
            for side, blob in self.tokenizer_blobs().items():
                atomic_write_bytes(self.run_dir / f"spm.{side}.model", blob)
            if self.resuming:
                trim_metrics(self.run_dir / "metrics.jsonl", self.update)
            print_summary(self.cfg, self.model, self.manifest, self.dist)
        model = self.model
        if t.compile:
            model = torch.compile(model)
        if d.enabled:
            from torch.nn.parallel import DistributedDataParallel as DDP

            model = DDP(model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        self.train_model = model
        model.train()
        self._install_signal_handlers()
        metrics_path = self.run_dir / "metrics.jsonl"
        progress = Progress(enabled=d.is_main, total=t.max_updates, start=self.update)
        data = self.train_data

        def epoch_batches(epoch: int):
            data.use_epoch(epoch)  # a new sampled segmentation each epoch, where prepare wrote them
            batches = make_batches(data.src_lengths, data.tgt_lengths, t.batch_tokens, seed=t.seed, epoch=epoch)
            return shard_batches(batches, d.rank, d.world_size)

        batches = epoch_batches(self.epoch)
        if not batches:
            raise MtkitError(f"{self.cfg.data.dir}: no training batch for rank {d.rank}; the corpus is too small for "
                             f"{d.world_size} processes")
        window = {"loss": 0.0, "nll": 0.0, "tokens": 0.0, "src": 0.0, "padded": 0.0, "updates": 0, "time": time.perf_counter()}
        run_start = time.perf_counter() - self.elapsed
        last_validated = last_saved = self.update if self.resuming else -1
        finished_reason = None
        if t.max_updates and self.update >= t.max_updates:  # resuming a finished run trains nothing more
            finished_reason = f"max_updates={t.max_updates} already reached"
        while finished_reason is None:
            if self.position >= len(batches):
                self.epoch += 1
                self.position = 0
                if t.max_epochs and self.epoch > t.max_epochs:
                    finished_reason = f"max_epochs={t.max_epochs}"
                    self.epoch -= 1
                    self.position = len(batches)
                    break
                batches = epoch_batches(self.epoch)
            group = batches[self.position : self.position + t.update_freq]
            # --- one optimizer update over len(group) accumulated batches ---
            loss_sum = torch.zeros((), device=self.device)
            nll_sum = torch.zeros((), device=self.device)
            tgt_tokens = src_tokens = padded = 0
            for i, idx in enumerate(group):
                batch = collate(data, idx, self.device)
                sync = contextlib.nullcontext() if (not d.enabled or i == len(group) - 1) else model.no_sync()
                try:
                    with sync:
                        with self.autocast():  # the output projection is fused with the loss (no logits tensor)
                            loss, nll = teacher_forced_loss(model, self.raw_model().output_projection(), batch,
                                                            t.label_smoothing)
                        (self.scaler.scale(loss) if self.scaler else loss).backward()
                except (torch.OutOfMemoryError, RuntimeError) as err:
                    if is_out_of_memory(err):
                        shape = tuple(batch.src.shape)
                        raise MtkitError(f"out of memory on a batch of {shape[0]} sentences x {max(shape[1], batch.tgt_in.size(1))} "
                                         f"tokens at update {self.update + 1}; lower training.batch_tokens "
                                         f"(now {t.batch_tokens}) and raise training.update_freq to keep the "
                                         "effective batch") from None
                    raise
                loss_sum += loss.detach()
                nll_sum += nll
                tgt_tokens += batch.tgt_tokens
                src_tokens += batch.src_tokens
                padded += batch.src.numel() + batch.tgt_in.numel()
            self.position += len(group)
            time_up = t.max_minutes is not None and (time.perf_counter() - run_start) / 60 >= t.max_minutes
            stats = torch.tensor([float(tgt_tokens), loss_sum.item(), nll_sum.item(),
                                  1.0 if (time_up or self.stop_signal) else 0.0, 1.0 if self.stop_signal else 0.0],
                                 dtype=torch.float64, device=self.device)
            distmod.all_reduce_sum(stats, d)
            total_tokens, total_loss, total_nll, stop_votes, signal_votes = stats.tolist()
            if not math.isfinite(total_loss):
                raise MtkitError(f"loss became {total_loss} at update {self.update + 1}; stopped without saving it. "
                                 f"The last good checkpoint is in {self.ckpt_dir}; lower training.lr or enable "
                                 "training.clip_norm and resume")
            if self.scaler:
                self.scaler.unscale_(self.optimizer)
            grads = [p.grad for p in self.model.parameters() if p.grad is not None]
            torch._foreach_mul_(grads, d.world_size / max(total_tokens, 1.0))
            if t.clip_norm > 0:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), t.clip_norm)
            lr = self.lr_at(self.update + 1)
            for g in self.optimizer.param_groups:
                g["lr"] = lr
            if self.scaler:
                self.scaler.step(self.optimizer)
                self.scaler.update()
            else:
                self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.update += 1
            self.elapsed = time.perf_counter() - run_start
            # --- bookkeeping ---
            w = window
            w["loss"] += total_loss
            w["nll"] += total_nll
            w["tokens"] += total_tokens
            w["src"] += src_tokens * d.world_size
            w["padded"] += padded * d.world_size
            w["updates"] += 1
            if self.update % t.log_every == 0 and d.is_main:
                now = time.perf_counter()
                record = {
                    "kind": "train", "update": self.update, "epoch": self.epoch,
                    "loss": w["loss"] / w["tokens"], "nll": w["nll"] / w["tokens"],
                    "ppl": math.exp(min(w["nll"] / w["tokens"], 50)), "lr": lr,
                    "tgt_tokens_per_s": w["tokens"] / (now - w["time"]),
                    "padding": 1 - (w["tokens"] + w["src"]) / max(w["padded"], 1),
                    "batch_tokens": w["tokens"] / w["updates"], "elapsed": self.elapsed,
                }
                append_jsonl(metrics_path, record)
                progress.log(record)
                window = {"loss": 0.0, "nll": 0.0, "tokens": 0.0, "src": 0.0, "padded": 0.0, "updates": 0, "time": now}
            progress.advance(self.update)
            stop = None
            if t.max_updates and self.update >= t.max_updates:
                stop = f"max_updates={t.max_updates}"
            elif stop_votes > 0:
                stop = self.stop_signal or ("signal" if signal_votes > 0 else f"max_minutes={t.max_minutes}")
            valid = None
            if self.update % t.validate_every == 0 or (stop and not signal_votes and self.update != last_validated):
                valid = self.run_validation(metrics_path, progress)
                last_validated = self.update
                if t.patience and self.bad_validations >= t.patience:
                    stop = stop or f"no improvement in {t.patience} validations (patience)"
            if self.update % (t.save_every or t.validate_every) == 0 or stop:
                if self.update != last_saved:
                    self.save_checkpoint(valid)
                    last_saved = self.update
                    # keep the clock honest: checkpointing time counts towards the budget
            if stop:
                finished_reason = stop
                break
        progress.close()
        if self.update != last_saved:
            self.save_checkpoint(None)
        if d.is_main:
            if t.average_last > 1:
                ckpt.average_main(self.run_dir, last=t.average_last, output=None)
            try:
                from mtkit.plots import plot_curves

                plot_curves(self.run_dir)
            except Exception as err:  # a plot must never fail a training run
                print(f"note: could not draw curves ({err})")
            print(f"stopped at update {self.update} ({finished_reason}); run dir: {self.run_dir}")
            if self.stop_signal:
                print(f"resume with: mtkit train --resume {self.run_dir}")

    def run_validation(self, metrics_path: Path, progress) -> Optional[dict]:
        if self.valid_data is None:
            return None
        valid = None
        if self.dist.is_main:
            start = time.perf_counter()
            try:
                valid = self.validate()
            except (torch.OutOfMemoryError, RuntimeError) as err:
                if not is_out_of_memory(err):
                    raise
                raise MtkitError(f"out of memory while validating at update {self.update}; lower training.batch_tokens "
                                 f"(now {self.t.batch_tokens}, the loss batches) or decoding.batch_size (now "
                                 f"{self.cfg.decoding.batch_size}, the BLEU decoding batches)") from None
            valid["seconds"] = time.perf_counter() - start
            better = self.improved(valid)
            self.bad_validations = 0 if better else self.bad_validations + 1
            if better:
                bundle = ckpt.Bundle(self.metadata(valid), self.raw_model().state_dict(), self.tokenizer_blobs())
                ckpt.save(self.ckpt_dir / "best.safetensors", bundle)
            record = {"kind": "valid", "update": self.update, "epoch": self.epoch, "elapsed": self.elapsed,
                      "best": better, **valid}
            append_jsonl(metrics_path, record)
            progress.log(record)
        # every rank needs the same patience counter to stop together
        bad = torch.tensor([float(self.bad_validations)], device=self.device)
        if self.dist.enabled:
            torch.distributed.broadcast(bad, src=0)
        self.bad_validations = int(bad.item())
        return valid


def is_out_of_memory(err: BaseException) -> bool:
    """CUDA's OutOfMemoryError, or the RuntimeError of a CPU / MPS allocation that failed."""
    return isinstance(err, torch.OutOfMemoryError) or "out of memory" in str(err) or "can't allocate" in str(err)


def trim_metrics(path: Path, update: int) -> None:
    """Keep the records of updates <= ``update`` (the resumed checkpoint's): a killed run's later records, and a
    line cut by the kill, would otherwise mix with their replay."""
    if not path.is_file():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and record.get("update", 0) <= update:
            kept.append(line + "\n")
    atomic_write_text(path, "".join(kept))


def append_jsonl(path: Path, record: dict) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")
        f.flush()
