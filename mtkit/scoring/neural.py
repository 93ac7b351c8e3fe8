"""``mtkit score -m comet`` and ``-m cometkiwi``: the neural metrics beside sacreBLEU's. Imports torch only to score.

Each neural metric is the mean of its sentence scores (``mtkit.scoring.comet``). The systems given with ``-i`` are
scored together, so that COMET-22 encodes each source and reference once whatever the number of systems. The paired
tests see a neural metric as sacreBLEU sees BLEU: through ``SentenceMean``, a sacreBLEU metric whose sufficient
statistics are each line's score and a count, so a resample's score is the mean of its lines' scores.
"""

from __future__ import annotations

from typing import Optional, Sequence

from sacrebleu.metrics.base import Metric, Score, Signature

NEURAL = ("comet", "cometkiwi")
LABELS = {"comet": "COMET", "cometkiwi": "CometKiwi"}
WIDTH = 4  # the fewest decimals a neural score is printed with (its scores lie near 0-1)


def sentence_scores(
    name: str, model: str, systems: Sequence[Sequence[str]], source: Sequence[str], reference: Optional[Sequence[str]]
) -> list[list[float]]:
    """Each system's sentence scores by metric ``name`` ("comet" or "cometkiwi") with ``model``: [system][line]."""
    from mtkit.scoring import comet

    other = "cometkiwi" if name == "comet" else "comet"
    scorer = comet.load(model, what=name, reference_free=name == "cometkiwi", otherwise=f"give it as --{other}-model")
    return scorer.score_systems(systems, source, None if scorer.reference_free else reference)


def result(name: str, model: str, scores: Sequence[float], sentences: bool) -> dict:
    """One system's entry in ``mtkit score``'s JSON: the mean, the model, a signature and text as sacreBLEU's."""
    mean = sum(scores) / len(scores)
    signature = f"model:{model}"
    out = {
        "score": mean,
        "model": model,
        "signature": signature,
        "text": f"{LABELS[name]}|{signature} = {mean:.{WIDTH}f}",
    }
    if sentences:
        out["sentences"] = list(scores)
    return out


class _Signature(Signature):
    def __init__(self, args: dict):
        super().__init__(args)
        self._abbr["model"] = "model"
        self.info = {"model": args["model"], **{k: v for k, v in self.info.items() if k != "nrefs"}}


class SentenceMean(Metric):
    """A neural metric as sacreBLEU's paired tests read a metric: each line's statistics are (score, 1)."""

    _SIGNATURE_TYPE = _Signature

    def __init__(self, name: str, model: str, systems: Sequence[Sequence[str]], scores: Sequence[Sequence[float]]):
        super().__init__()
        self.label, self.model, self.num_refs = LABELS[name], model, 1
        self._scores = {tuple(hyps): list(s) for hyps, s in zip(systems, scores)}

    def _extract_corpus_statistics(self, hypotheses, references) -> list[list[float]]:
        return [[s, 1.0] for s in self._scores[tuple(hypotheses)]]

    def _aggregate_and_compute(self, stats) -> Score:
        import numpy as np

        return self._compute_score_from_stats(np.sum(np.asarray(stats, dtype="float64"), axis=0))

    def _compute_score_from_stats(self, stats) -> Score:
        return Score(self.label, float(stats[0]) / float(stats[1]))

    def _preprocess_segment(self, sent: str) -> str:  # the scores are computed beforehand
        return sent

    def _extract_reference_info(self, refs):
        return {}

    def _compute_segment_statistics(self, hypothesis, ref_kwargs):
        raise NotImplementedError("SentenceMean reads scores computed beforehand")

    def sentence_score(self, hypothesis, references):
        raise NotImplementedError("SentenceMean reads scores computed beforehand")
