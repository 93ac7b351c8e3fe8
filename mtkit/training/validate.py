"""Validation during training: the valid split's loss and perplexity, and the BLEU / chrF of its translations.

The translations come from the same search code as ``mtkit translate``. ``validation`` returns a
``ValidationResult``; the training loop records it in its state.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Callable, Optional

import torch

from mtkit.data.batches import ParallelData, collate, make_batches
from mtkit.decoding.constraints import Guidance, Guide
from mtkit.decoding.search import beam_search, greedy
from mtkit.errors import MtkitError
from mtkit.scoring.score import corpus_scores
from mtkit.training.distributed import is_out_of_memory
from mtkit.training.loss import label_smoothed_loss


@torch.no_grad()
def validate(model, data: ParallelData, tokenizer, cfg, device: torch.device, autocast: Callable) -> dict:
    """The metrics of ``model`` on the valid split ``data``.

    Args:
        model: the model; it is put in eval mode and back into the mode it was in.
        data: the valid split.
        tokenizer: decodes the translations for BLEU and chrF.
        cfg: the run's config (training.label_smoothing, valid_bleu, valid_beam_size, valid_max_sentences; the
            decoding section's batch size and length limits).
        device: where the batches go.
        autocast: returns the autocast context of training.precision.

    Returns:
        {"loss", "nll", "ppl"} per target token; with training.valid_bleu also "bleu", "chrf" and an "example":
        the first sentence's {"src", "hyp", "ref"} (the same sentence at every validation).
    """
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
        forced = _forced_tag(data, tokenizer)  # a multilingual model's language token, first in every output
        for start in range(0, n, dec.batch_size):
            idx = order[start : start + dec.batch_size]
            batch = collate(data, idx, device)
            guide = Guide([Guidance(prefix=(forced,))] * len(idx), device) if forced is not None else None
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
                        guide=guide,
                    )
                else:
                    out = greedy(model, batch.src, max_len_a=dec.max_len_a, max_len_b=dec.max_len_b, guide=guide)
            tokens = [h[0].tokens[1:] if forced is not None else h[0].tokens for h in out]
            for i, hyp in zip(idx, tokenizer.decode_tgt(tokens)):
                hyps[i] = hyp
        refs = data.reference_lines()[:n]
        scores = corpus_scores(hyps, [refs], metrics=("bleu", "chrf"))
        result["bleu"], result["chrf"] = scores["bleu"]["score"], scores["chrf"]["score"]
        result["example"] = {"src": _first_source(data), "hyp": hyps[0], "ref": refs[0]}
    model.train(was_training)
    return result


def _first_source(data: ParallelData) -> str:
    """The first sentence of the split's cleaned source text ("" where prepare kept none)."""
    path = data.text_path("src")
    if path is None or not path.is_file():
        return ""
    with open(path, encoding="utf-8", newline="\n") as f:
        return f.readline().rstrip("\n")


def _forced_tag(data: ParallelData, tokenizer) -> Optional[int]:
    """The language token a multilingual model with ``target_tag: decoder`` must start this split's outputs
    with (its direction's target, from the split's name, ``valid.en-de``); None for any other model."""
    if data.manifest.get("target_tag") != "decoder":
        return None
    tag = data.manifest["targets"][data.split.rpartition("-")[2]]
    return tokenizer.encode_tgt([tag])[0][0]


def over_directions(found: dict[str, dict]) -> dict:
    """One validation of a multilingual model from each direction's ``validate`` metrics.

    Args:
        found: direction name (``en-de``) -> its metrics.

    Returns:
        "loss", "nll", "ppl", "bleu", "chrf": the mean over directions (each direction counts once, whatever
        its size); "directions": each direction's own metrics; "example": the first direction's.
    """
    out: dict = {"directions": {name: {k: v for k, v in m.items() if k != "example"} for name, m in found.items()}}
    for key in ("loss", "nll", "bleu", "chrf"):
        values = [m[key] for m in found.values() if key in m]
        if values:
            out[key] = sum(values) / len(values)
    out["ppl"] = math.exp(min(out["nll"], 50))
    first = next(iter(found.values()))
    if "example" in first:
        out["example"] = first["example"]
    return out


@dataclasses.dataclass
class ValidationResult:
    """One validation during training: its metrics, and the verdict every rank shares."""

    metrics: Optional[dict]  # validate()'s result plus "seconds", on the main rank; None on the others
    score: Optional[float]  # metrics[training.best_metric] on every rank; None where it was not measured
    improved: bool  # score beats the best so far


def is_better(score: Optional[float], best: Optional[float], metric: str) -> bool:
    """Whether ``score`` beats ``best`` by ``metric`` (loss: lower; BLEU, chrF: higher); no score never does."""
    if score is None:
        return False
    return best is None or (score < best if metric == "loss" else score > best)


def validation(run: Callable[[], dict], *, update: int, best: Optional[float], cfg, dist) -> ValidationResult:
    """Validate on the main rank and judge its score against ``best``; every rank returns the same verdict.

    Args:
        run: returns ``validate``'s metrics of the model now; called on the main rank only.
        update: the update being validated, for messages.
        best: the best score so far by ``cfg.training.best_metric``, the same on every rank.
        cfg: the run's config.
        dist: the run's ``distributed.Dist``; under DDP this is a collective (a broadcast from rank 0).

    Returns:
        The metrics (main rank only), the score and whether it improved on ``best``.

    Raises:
        MtkitError: out of memory while validating; it names the batch sizes to lower.
    """
    metric = cfg.training.best_metric
    metrics, score = None, None
    if dist.is_main:
        start = time.perf_counter()
        try:
            metrics = run()
        except (torch.OutOfMemoryError, RuntimeError) as err:
            if not is_out_of_memory(err):
                raise
            raise MtkitError(
                f"out of memory while validating at update {update}; lower training.batch_tokens "
                f"(now {cfg.training.batch_tokens}, the loss batches) or decoding.batch_size (now "
                f"{cfg.decoding.batch_size}, the BLEU decoding batches)"
            ) from None
        metrics["seconds"] = time.perf_counter() - start
        score = metrics.get(metric)
    if dist.enabled:  # every rank needs the same verdict to keep the same patience counter and stop together
        shared = torch.tensor([math.nan if score is None else score, float(score is not None)], dtype=torch.float64)
        shared = shared.to(dist.device)
        torch.distributed.broadcast(shared, src=0)
        value, known = shared.tolist()
        score = value if known else None
    return ValidationResult(metrics, score, is_better(score, best, metric))
