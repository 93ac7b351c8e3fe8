"""Validation during training: label-smoothed loss and perplexity of the valid split, and BLEU / chrF of its
translations, decoded with the same search code as ``mtkit translate``."""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Callable, Optional

import torch

from mtkit import checkpoint as ckpt
from mtkit.data.batches import ParallelData, collate, make_batches
from mtkit.decoding.search import beam_search, greedy
from mtkit.errors import MtkitError
from mtkit.scoring.score import corpus_scores
from mtkit.training.console import append_jsonl
from mtkit.training.distributed import is_out_of_memory
from mtkit.training.loss import label_smoothed_loss


@torch.no_grad()
def validate(model, data: ParallelData, tokenizer, cfg, device: torch.device, autocast: Callable) -> dict:
    """{"loss", "nll", "ppl"[, "bleu", "chrf", "example"]} of ``model`` on ``data``; ``cfg`` is the run's config."""
    t = cfg.training
    was_training = model.training
    model.eval()
    loss_sum = nll_sum = tokens = 0.0
    batches = make_batches(data.src_lengths, data.tgt_lengths, t.batch_tokens, seed=0, epoch=0, shuffle=False)
    for idx in batches:
        batch = collate(data, idx, device)
        with autocast():
            logits = model(batch.src, batch.tgt_in)
        loss, nll = label_smoothed_loss(logits, batch.tgt_out, t.label_smoothing)
        loss_sum, nll_sum, tokens = loss_sum + loss.item(), nll_sum + nll.item(), tokens + batch.tgt_tokens
    result = {"loss": loss_sum / tokens, "nll": nll_sum / tokens, "ppl": math.exp(min(nll_sum / tokens, 50))}
    if t.valid_bleu:
        n = len(data) if t.valid_max_sentences is None else min(len(data), t.valid_max_sentences)
        order = sorted(range(n), key=lambda i: int(data.src_lengths[i]))
        hyps: list[str] = [""] * n
        dec = cfg.decoding
        for start in range(0, n, dec.batch_size):
            idx = order[start : start + dec.batch_size]
            batch = collate(data, idx, device)
            with autocast():
                if t.valid_beam_size > 1:
                    out = beam_search(
                        model,
                        batch.src,
                        beam_size=t.valid_beam_size,
                        length_penalty=dec.length_penalty,
                        max_len_a=dec.max_len_a,
                        max_len_b=dec.max_len_b,
                        stopping=dec.stopping,
                    )
                else:
                    out = greedy(model, batch.src, max_len_a=dec.max_len_a, max_len_b=dec.max_len_b)
            for i, hyp in zip(idx, tokenizer.decode_tgt([h[0].tokens for h in out])):
                hyps[i] = hyp
        refs = data.reference_lines()[:n]
        scores = corpus_scores(hyps, [refs], metrics=("bleu", "chrf"))
        result["bleu"], result["chrf"] = scores["bleu"]["score"], scores["chrf"]["score"]
        result["example"] = {"hyp": hyps[order[len(order) // 2]], "ref": refs[order[len(order) // 2]]}
    model.train(was_training)
    return result


def record_validation(trainer, metrics_path: Path, progress) -> Optional[dict]:
    """Validate on the main rank, keep best.safetensors and the patience counter, log the record; every rank
    returns with the same counter. None without a valid split."""
    if trainer.valid_data is None:
        return None
    valid = None
    if trainer.dist.is_main:
        start = time.perf_counter()
        try:
            valid = trainer.validate()
        except (torch.OutOfMemoryError, RuntimeError) as err:
            if not is_out_of_memory(err):
                raise
            raise MtkitError(
                f"out of memory while validating at update {trainer.update}; lower training.batch_tokens "
                f"(now {trainer.t.batch_tokens}, the loss batches) or decoding.batch_size (now "
                f"{trainer.cfg.decoding.batch_size}, the BLEU decoding batches)"
            ) from None
        valid["seconds"] = time.perf_counter() - start
        better = _improved(trainer, valid)
        trainer.bad_validations = 0 if better else trainer.bad_validations + 1
        if better:
            bundle = ckpt.Bundle(trainer.metadata(valid), trainer.model.state_dict(), trainer.tokenizer.model_bytes())
            ckpt.save(trainer.ckpt_dir / "best.safetensors", bundle)
        record = {
            "kind": "valid",
            "update": trainer.update,
            "epoch": trainer.epoch,
            "elapsed": trainer.elapsed,
            "best": better,
            **valid,
        }
        append_jsonl(metrics_path, record)
        progress.log(record)
    # every rank needs the same patience counter to stop together
    bad = torch.tensor([float(trainer.bad_validations)], device=trainer.device)
    if trainer.dist.enabled:
        torch.distributed.broadcast(bad, src=0)
    trainer.bad_validations = int(bad.item())
    return valid


def _improved(trainer, valid: dict) -> bool:
    value = valid.get(trainer.t.best_metric)
    if value is None:
        return False
    better = trainer.best is None or (value < trainer.best if trainer.t.best_metric == "loss" else value > trainer.best)
    if better:
        trainer.best = value
    return better
