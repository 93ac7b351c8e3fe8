"""Quality estimates of translations: CometKiwi's score of each hypothesis given its source, beside ``confidence``.

``mtkit.load(..., qe_model=DIR)`` (``mtkit translate --qe-model``, ``mtkit serve --qe-model``) gives every
hypothesis of a scored call its ``qe``: the CometKiwi score (``mtkit.scoring.comet``) of its text against the line
it translates. ``rerank="qe"`` (``--rerank qe``) orders each line's hypotheses by it, best first, whether or not the
call asks for scores, so ``--nbest 8 --rerank qe`` picks the one of the 8-best CometKiwi prefers.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from mtkit.errors import MtkitError
from mtkit.inference.results import Translation

RERANKERS = ("qe",)


class QualityEstimator:
    """A CometKiwi model that annotates translations with ``qe`` (and reorders their hypotheses by it)."""

    def __init__(self, name: str, rerank: bool = False, device: str = "cpu"):
        from mtkit.scoring import comet

        self.name, self.rerank = name, rerank
        self.model = comet.load(name, what="qe", device=device, reference_free=True, otherwise="give a CometKiwi model")

    def annotate(self, translations: list[Translation], scores: bool = True) -> list[Translation]:
        """``translations`` with each hypothesis's ``qe`` where ``scores`` (reordered by it with ``rerank``)."""
        pairs = [(t.source, h.text) for t in translations for h in t.hypotheses]
        if not pairs or not (scores or self.rerank):
            return translations
        values = iter(self.model.score([h for _, h in pairs], [s for s, _ in pairs]))
        out = []
        for t in translations:
            hyps = [dataclasses.replace(h, qe=next(values)) for h in t.hypotheses]
            if self.rerank:
                hyps.sort(key=lambda h: -h.qe)  # stable: ties keep the model's order
            if not scores:
                hyps = [dataclasses.replace(h, qe=None) for h in hyps]
            out.append(dataclasses.replace(t, hypotheses=tuple(hyps)))
        return out


def estimator_for(qe_model: Optional[str], rerank: Optional[str], device: str = "cpu") -> Optional[QualityEstimator]:
    """The ``QualityEstimator`` that ``mtkit.load``'s ``qe_model`` and ``rerank`` ask for, or None.

    Raises:
        MtkitError: an unknown ``rerank``, ``rerank`` without ``qe_model``, or a model that cannot be used.
    """
    if rerank is not None and rerank not in RERANKERS:
        raise MtkitError(f"--rerank {rerank!r}: use {' or '.join(RERANKERS)}")
    if qe_model is None:
        if rerank is not None:
            raise MtkitError(f"--rerank {rerank} orders hypotheses by CometKiwi: give its model with --qe-model")
        return None
    return QualityEstimator(str(qe_model), rerank == "qe", "cpu" if str(device).startswith("cpu") else device)
