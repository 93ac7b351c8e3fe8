"""The ``dcce`` filter: dual conditional cross-entropy (Junczys-Dowmunt 2018, "Dual Conditional Cross-Entropy
Filtering of Noisy Parallel Corpora"), with two of mtkit's own models.

A forward model (source -> target) and a backward one (target -> source), both trained on data one trusts, score
each pair by teacher forcing: H_f, the forward model's cross-entropy of the target given the source, and H_b, the
backward model's of the source given the target, each in nats per subword (the end of sentence included). The
pair's score is

    |H_f - H_b| + (H_f + H_b) / 2

low where both models find the pair likely and agree on how likely: a fluent sentence paired with the wrong one,
or a translation missing its second half, is unlikely in at least one direction. Pairs whose score is over
``max_score`` go. The models may be small and quickly trained; their languages must be the pair's, one each way.

The filter is batched: it scores the pairs the cheaper filters kept, a chunk at a time (``filter_base.judged``),
sorted by length within a chunk and grouped into batches of about ``batch_tokens`` subwords.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import ClassVar, Optional

import numpy as np

from mtkit.data.filter_base import Filter, option

HISTOGRAM_STEP, HISTOGRAM_BINS = 0.05, 400  # the scores the report's quantiles come from: 0 to 20, then above
QUANTILES = {"q10": 0.1, "q50": 0.5, "q90": 0.9, "q99": 0.99}


@dataclasses.dataclass
class DualCrossEntropy(Filter):
    """The dual conditional cross-entropy of a forward and a backward model (Junczys-Dowmunt 2018): pairs over
    max_score (nats per subword) go. Not among the defaults: it needs the two models' run dirs."""

    name: ClassVar[str] = "dcce"
    batched: ClassVar[bool] = True
    default: ClassVar[bool] = False
    forward: str = option("", "run dir (or checkpoint) of a source -> target model")
    backward: str = option("", "run dir (or checkpoint) of a target -> source model")
    max_score: float = option(3.0, "a pair scoring more (|H_f - H_b| + (H_f + H_b) / 2, nats per subword) goes")
    batch_tokens: int = option(6000, "subwords per scoring batch")

    def __post_init__(self):
        self.positive("max_score", "batch_tokens")
        self.histogram = [0] * (HISTOGRAM_BINS + 1)  # scores in bins of HISTOGRAM_STEP; the last: all above
        self.models = (
            self._load("forward", (self.src_lang, self.tgt_lang)),
            self._load("backward", (self.tgt_lang, self.src_lang)),
        )

    def _load(self, key: str, langs: tuple[str, str]):
        from mtkit import checkpoint as ckpt
        from mtkit.devices import pick_device
        from mtkit.errors import MtkitError

        path = getattr(self, key)
        if not path:
            raise self.bad(key, f"give the run dir of a model translating {langs[0]} -> {langs[1]}")
        try:
            loaded = ckpt.load_checkpoint(Path(path), pick_device("auto"))
        except MtkitError as err:
            raise self.bad(key, str(err)) from None
        data = loaded.config.data
        if data.multilingual or data.source_tag:
            raise self.bad(key, f"{path} is a multilingual model; give one translating {langs[0]} -> {langs[1]} only")
        if (data.src_lang, data.tgt_lang) != langs:
            raise self.bad(key, f"{path} translates {data.src_lang} -> {data.tgt_lang}, not {langs[0]} -> {langs[1]}")
        return loaded

    def check(self, src, tgt):
        return self.check_batch([(src, tgt)])[0]

    def cross_entropies(self, pairs: list[tuple[str, str]]) -> list[tuple[float, float]]:
        """(H_f, H_b) of each pair: the forward model's cross-entropy of the target, the backward one's of the
        source."""
        sources, targets = [p[0] for p in pairs], [p[1] for p in pairs]
        forward = cross_entropies(self.models[0], sources, targets, self.batch_tokens)
        return list(zip(forward, cross_entropies(self.models[1], targets, sources, self.batch_tokens)))

    def check_batch(self, pairs):
        out: list[Optional[str]] = []
        for h_f, h_b in self.cross_entropies(pairs):
            score = dual_score(h_f, h_b)
            self.histogram[min(int(score / HISTOGRAM_STEP), HISTOGRAM_BINS)] += 1
            out.append(f"score {score:.2f} (forward {h_f:.2f}, backward {h_b:.2f})" if score > self.max_score else None)
        return out

    def summary(self):
        """The pairs scored and their scores' quantiles (to HISTOGRAM_STEP), from which to choose ``max_score``:
        its q90 drops about the worst tenth of what the cheaper filters kept."""
        total = sum(self.histogram)
        if not total:
            return None
        out, seen, bins = {"pairs_scored": total}, 0, iter(enumerate(self.histogram))
        for name, share in QUANTILES.items():
            while seen < share * total:
                index, count = next(bins)
                seen += count
            out[name] = round((index + 1) * HISTOGRAM_STEP, 2)
        return out


def dual_score(h_forward: float, h_backward: float) -> float:
    """|H_f - H_b| + (H_f + H_b) / 2: the disagreement of the two directions plus their mean cross-entropy."""
    return abs(h_forward - h_backward) + 0.5 * (h_forward + h_backward)


class _Encoded:
    """Encoded pairs as ``data.batches.collate`` reads a split: each side's ids concatenated, with offsets."""

    def __init__(self, src_ids: list[list[int]], tgt_ids: list[list[int]]):
        self.src_lengths = np.array([len(ids) for ids in src_ids], dtype=np.int64)
        self.tgt_lengths = np.array([len(ids) for ids in tgt_ids], dtype=np.int64)
        self._sides = {
            side: (np.array([t for ids in seqs for t in ids], dtype=np.int64), np.cumsum([0, *lengths]))
            for side, seqs, lengths in (("src", src_ids, self.src_lengths), ("tgt", tgt_ids, self.tgt_lengths))
        }

    def arrays(self, side: str) -> tuple[np.ndarray, np.ndarray]:
        return self._sides[side]


def cross_entropies(loaded, sources: list[str], targets: list[str], batch_tokens: int = 6000) -> list[float]:
    """Each target's cross-entropy given its source under a model, in nats per subword (its end of sentence
    counted), by teacher forcing: the batches training makes (``make_batches``, ``collate``), in length order.

    Args:
        loaded: ``checkpoint.load_checkpoint``'s result (model in eval mode, tokenizer).
        sources, targets: whitespace-normalised sentences, line-aligned.
        batch_tokens: about this many padded subwords per batch.
    """
    import torch

    from mtkit.data.batches import collate, make_batches
    from mtkit.tokenizer import PAD

    model, tok = loaded.model, loaded.tokenizer
    limit = model.max_positions - 1  # room for EOS / BOS
    pairs = _Encoded([ids[:limit] for ids in tok.encode_src(sources)], [ids[:limit] for ids in tok.encode_tgt(targets)])
    device = next(model.parameters()).device
    out = np.zeros(len(sources))
    for rows in make_batches(pairs.src_lengths, pairs.tgt_lengths, batch_tokens, seed=0, epoch=0, shuffle=False):
        batch = collate(pairs, rows, device)
        with torch.inference_mode():
            logp = model(batch.src, batch.tgt_in).float().log_softmax(-1)  # (B, T, V)
            nll = -logp.gather(-1, batch.tgt_out.unsqueeze(-1)).squeeze(-1)  # (B, T)
            real = batch.tgt_out != PAD
            out[rows] = ((nll * real).sum(1) / real.sum(1)).cpu().numpy()
    return out.tolist()
