"""The training loss: label-smoothed cross-entropy, and the same loss fused with the output projection.

``fused_output_loss(features, weight, bias, target, smoothing)`` equals
``label_smoothed_loss(F.linear(features, weight, bias), target, smoothing)`` (``model.project`` of the features)
without a (tokens, vocab) logits tensor of its own: the logits live in a reused buffer and are overwritten by
their gradient in the forward pass.
"""

from __future__ import annotations

from typing import Optional

import torch

from mtkit.tokenizer import PAD


def _smoothed_gradient(
    log_probs: torch.Tensor, target: torch.Tensor, smoothing: float, out: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """d loss / d logits of the label-smoothed loss, from (rows, vocab) log-probs and (rows, 1) targets:
    softmax - ((1 - eps) * onehot(target) + eps / vocab), written into ``out`` (default: over ``log_probs``)."""
    grad = torch.exp(log_probs, out=log_probs if out is None else out)
    grad.sub_(smoothing / log_probs.size(-1))
    return grad.scatter_add_(1, target, grad.new_full((target.size(0), 1), -(1.0 - smoothing)))


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Label-smoothed cross-entropy of (tokens, vocab) logits, summed, with the gradient written in one pass.

    loss = (1 - eps) * nll + eps * mean_over_vocab(-log p)   (uniform label smoothing, Szegedy et al.)
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


def label_smoothed_loss(
    logits: torch.Tensor, target: torch.Tensor, smoothing: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The label-smoothed loss and the plain NLL of ``logits``, each summed over the non-pad target tokens.

    Args:
        logits: (batch, tgt_len, vocab) with ``target`` (batch, tgt_len), or (tokens, vocab) with ``target``
            (tokens,) holding no padding.
        target: the target token ids.
        smoothing: the label-smoothing epsilon.

    Returns:
        (loss, nll); the nll carries no gradient.
    """
    if logits.dim() == 3:
        keep = target.ne(PAD)
        logits, target = logits[keep], target[keep]
    loss, nll = _SmoothedCrossEntropy.apply(logits, target, smoothing)
    return loss, nll.detach()


class _OutputBuffers:
    """Reusable flat buffers for the (tokens, vocab) logits of the fused output loss, one free list per device
    and dtype. A forward pass takes one (or allocates one), the backward pass gives it back; a graph that is never
    backpropagated just drops its buffer. glibc's malloc neither keeps a logits-sized block mapped between updates
    (it maps and unmaps it, paying a page fault per page every time) nor reuses a freed block for the next aligned
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

    The logits go into a reused buffer (one matmul), then ``chunk_rows`` rows at a time turn into log-probs
    (on a CPU ``CHUNK_ROWS``, while they are in cache; on a GPU ``chunk_rows_for``'s few large chunks, since
    there every chunk costs a dozen kernel launches and the memory is there), and the gradient with respect to
    the logits (softmax minus the smoothed target) overwrites them in place. Backward is then two matmuls with
    that gradient: no (tokens, vocab) tensor is allocated per update, and the logits are read and written once
    instead of four times. Autocast (bf16/fp16) is honoured: the matmuls run in its dtype, the softmax in float32.
    """

    CHUNK_ROWS = 128

    @staticmethod
    def forward(ctx, features, weight, bias, target, smoothing: float, chunk_rows: int):
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
            for start in range(0, tokens, chunk_rows):
                chunk = logits[start : start + chunk_rows]
                log_probs = chunk.float().log_softmax(dim=-1)
                tgt = target[start : start + chunk_rows, None]
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
        return grad_features, grad_weight, grad_bias, None, None, None


# float32 log-probs of one chunk on a GPU: 2**28 elements (1 GiB), so 32k tokens of an 8k vocabulary are one chunk
GPU_CHUNK_ELEMENTS = 1 << 28


def chunk_rows_for(device: torch.device, vocab: int) -> int:
    """The rows of logits the fused loss turns into log-probs at a time on ``device``: ``CHUNK_ROWS`` on a CPU
    (the chunk stays in cache), as many as ``GPU_CHUNK_ELEMENTS`` allow elsewhere (few kernel launches)."""
    if device.type == "cpu":
        return _FusedOutputLoss.CHUNK_ROWS
    return max(_FusedOutputLoss.CHUNK_ROWS, GPU_CHUNK_ELEMENTS // max(vocab, 1))


def fused_output_loss(
    features: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor],
    target: torch.Tensor,
    smoothing: float,
    chunk_rows: Optional[int] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``label_smoothed_loss(F.linear(features, weight, bias), target, smoothing)`` without a logits tensor.

    Args:
        features: (tokens, d) decoder features.
        weight: (vocab, d) output projection.
        bias: (vocab,) or None.
        target: (tokens,) target ids, holding no padding.
        smoothing: the label-smoothing epsilon.
        chunk_rows: rows of logits turned into log-probs at a time; None: ``chunk_rows_for`` the features' device.

    Returns:
        (loss, nll), summed; the nll carries no gradient. The loss supports one backward pass.
    """
    rows = chunk_rows or chunk_rows_for(features.device, weight.size(0))
    loss, nll = _FusedOutputLoss.apply(features, weight, bias, target, smoothing, rows)
    return loss, nll.detach()


def output_loss(
    features: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor], target: torch.Tensor, smoothing: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``fused_output_loss`` in plain differentiable ops, for ``torch.compile``: the compiler fuses the softmax,
    the gather and the smoothing term into a few kernels and writes the backward pass itself (the fused
    function's reused buffer and in-place gradient are opaque to it). Same arguments and results.
    """
    logits = torch.nn.functional.linear(features, weight, bias)  # (tokens, vocab), in autocast's dtype
    log_probs = logits.float().log_softmax(dim=-1)
    nll = -log_probs.gather(1, target[:, None]).sum()
    smooth = -log_probs.mean(dim=-1).sum()
    return (1.0 - smoothing) * nll + smoothing * smooth, nll.detach()
