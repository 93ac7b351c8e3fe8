"""How much to trust a translation, from the model's own token probabilities: a sentence confidence in [0, 1] and a
confidence per word.

A sentence's figures (``features``): its mean token log-prob (EOS included), the logs of its length and of its
source's in subwords, and, where the calibration asks for samples, its agreement with the model's own epsilon
samples of the same source (their mean sentence chrF against it, 0-1: a translation the model would write in many
ways scores low). ``Calibration`` maps them to the expected sentence chrF / 100 of such a translation: a linear
score fitted by least squares on a validation set, then an isotonic (never decreasing) map of that score, written by
``mtkit calibrate RUN [--samples K]`` to RUN/calibration.json (docs/benchmarks.md, section 25, for what each figure
adds). Without a calibration, the confidence is the geometric mean of the token probabilities, exp(mean log-prob). A
word's confidence is the probability the model gave its subwords together, exp(the sum of their log-probs). No
torch here.
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Sequence

from mtkit.errors import MtkitError

FILE = "calibration.json"
WORD_START = "\u2581"
BASIC = ("mean_log_prob", "log_length", "log_source_length")  # what every translation with scores gives
FEATURES = (*BASIC, "agreement")  # agreement: only with samples drawn for it


def mean_log_prob(token_log_probs: Sequence[float]) -> float:
    return sum(token_log_probs) / max(len(token_log_probs), 1)


def features(
    token_log_probs: Sequence[float], source_length: int, agreement: Optional[float] = None
) -> dict[str, float]:
    """A translation's figures by name (``FEATURES``; ``agreement`` only where given)."""
    out = {
        "mean_log_prob": mean_log_prob(token_log_probs),
        "log_length": math.log(max(len(token_log_probs), 1)),
        "log_source_length": math.log(max(source_length, 1)),
    }
    if agreement is not None:
        out["agreement"] = agreement
    return out


def agreement(hypotheses: Sequence[str], samples: Sequence[str]) -> list[float]:
    """Each hypothesis's mean sentence chrF (sacreBLEU's default, by fastchrf) against ``samples``, 0-1; 0.0 for
    each where there are no samples."""
    if not samples:
        return [0.0] * len(hypotheses)
    from mtkit.decoding.mbr import chrf_matrix

    [matrix] = chrf_matrix([hypotheses], [samples])
    return [sum(row) / len(row) / 100 for row in matrix]


def agreement_draws(samples: int) -> dict:
    """The decoding options of the samples a translation's agreement is measured against: ``samples`` epsilon
    samples (epsilon as MBR's pseudo-references draw them) from seed 0, as the registry draws them."""
    from mtkit.decoding import algorithms

    return algorithms.draws(samples, seed=0)


def words(tokens: Sequence[str], token_log_probs: Sequence[float]) -> tuple[tuple[str, float], ...]:
    """(word, confidence) for each word of the subwords ``tokens`` (a word starts at a subword with ``▁``; EOS's
    log-prob, the last of ``token_log_probs``, belongs to none): the probability of its subwords together."""
    out: list[tuple[str, float]] = []
    text, log_prob = "", 0.0
    for piece, lp in zip(tokens, token_log_probs):
        if piece.startswith(WORD_START) and text:
            out.append((text, math.exp(log_prob)))
            text, log_prob = "", 0.0
        text += piece.lstrip(WORD_START) if not text else piece
        log_prob += lp
    if text:
        out.append((text, math.exp(log_prob)))
    return tuple(out)


@dataclass(frozen=True)
class Calibration:
    """A never-decreasing piecewise-linear map from a translation's score to expected quality (chrF / 100); the
    score is ``weights[0]`` plus the weighted sum of its ``features`` (by default the mean token log-prob alone).

    ``x`` are increasing knots, ``y`` their never-decreasing values in [0, 1]; below the first knot the first value
    holds, above the last the last (``__call__``). ``samples``: the epsilon samples a sentence draws for its
    ``agreement`` (0 where the features leave it out). ``without_samples``: with samples, the calibration of the
    same sentences without their agreement, for an engine that cannot draw them (CTranslate2 has no epsilon
    sampling); None in a file written before it was kept.
    """

    x: tuple[float, ...]
    y: tuple[float, ...]
    fitted_on: int = 0  # sentences
    features: tuple[str, ...] = ("mean_log_prob",)
    weights: tuple[float, ...] = (0.0, 1.0)  # the intercept, then one per feature
    samples: int = 0
    without_samples: Optional["Calibration"] = None

    def score(self, values: Mapping[str, float]) -> float:
        """The linear score of a translation's ``features`` (``MtkitError`` if one the calibration uses is absent)."""
        missing = [name for name in self.features if name not in values]
        if missing:
            raise MtkitError(f"this calibration needs the translation's {', '.join(missing)}")
        return self.weights[0] + sum(w * values[name] for w, name in zip(self.weights[1:], self.features))

    def confidence(self, values: Mapping[str, float]) -> float:
        return self(self.score(values))

    @classmethod
    def fit_features(
        cls, rows: Sequence[Mapping[str, float]], quality: Sequence[float], names: Sequence[str], samples: int = 0
    ) -> "Calibration":
        """Least squares of ``quality`` on the features ``names`` of ``rows`` (with an intercept), then the
        isotonic map (``fit``) of the fitted scores to ``quality``."""
        import numpy as np

        if len(rows) != len(quality) or not rows:
            raise ValueError("calibration needs as many quality figures as translations, and at least one")
        design = np.array([[1.0, *(row[name] for name in names)] for row in rows])
        weights = np.linalg.lstsq(design, np.asarray(quality, dtype=float), rcond=None)[0]
        fitted = cls.fit(list(design @ weights), quality)
        return cls(fitted.x, fitted.y, fitted.fitted_on, tuple(names), tuple(map(float, weights)), samples)

    @classmethod
    def fit(cls, scores: Sequence[float], quality: Sequence[float]) -> "Calibration":
        """The isotonic regression of ``quality`` (each in [0, 1]) on ``scores`` (pool adjacent violators), its
        blocks' mean scores and values as knots."""
        if len(scores) != len(quality) or not scores:
            raise ValueError("calibration needs as many quality figures as scores, and at least one")
        pairs = sorted(zip(scores, quality))
        blocks: list[list[float]] = []  # [sum of scores, sum of quality, count]
        for s, q in pairs:
            blocks.append([s, q, 1])
            while len(blocks) > 1 and blocks[-2][1] / blocks[-2][2] >= blocks[-1][1] / blocks[-1][2]:
                s2, q2, n2 = blocks.pop()
                blocks[-1][0] += s2
                blocks[-1][1] += q2
                blocks[-1][2] += n2
        x = tuple(b[0] / b[2] for b in blocks)
        y = tuple(min(max(b[1] / b[2], 0.0), 1.0) for b in blocks)
        return cls(x, y, len(pairs))

    def __call__(self, score: float) -> float:
        if score <= self.x[0]:
            return self.y[0]
        if score >= self.x[-1]:
            return self.y[-1]
        i = bisect.bisect_right(self.x, score)
        x0, x1, y0, y1 = self.x[i - 1], self.x[i], self.y[i - 1], self.y[i]
        return y0 + (y1 - y0) * (score - x0) / (x1 - x0)

    def save(self, run_dir: Path) -> Path:
        from mtkit.files import atomic_write_text

        path = Path(run_dir) / FILE
        atomic_write_text(path, json.dumps(self._record()) + "\n")
        return path

    def _record(self) -> dict:
        record = {"x": list(self.x), "y": list(self.y), "fitted_on": self.fitted_on, "features": list(self.features)}
        record |= {"weights": list(self.weights), "samples": self.samples}
        if self.without_samples is not None:
            record["without_samples"] = self.without_samples._record()
        return record

    @classmethod
    def load(cls, run_dir: Path) -> Optional["Calibration"]:
        """The run's calibration, None where it has none; ``MtkitError`` for a damaged file."""
        path = Path(run_dir) / FILE
        if not path.is_file():
            return None
        try:
            return cls._from_record(json.loads(path.read_text(encoding="utf-8")))
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise MtkitError(f"{path}: not a calibration ({err}); rerun mtkit calibrate {run_dir}") from None

    @classmethod
    def _from_record(cls, record: dict) -> "Calibration":
        """The calibration a file's record holds (``ValueError`` and kin for a damaged one)."""
        x, y = tuple(map(float, record["x"])), tuple(map(float, record["y"]))
        if not x or len(x) != len(y) or list(x) != sorted(x) or list(y) != sorted(y):
            raise ValueError("knots out of order")
        names = tuple(record.get("features", ("mean_log_prob",)))
        weights = tuple(map(float, record.get("weights", (0.0, 1.0))))
        samples = int(record.get("samples", 0))
        if set(names) - set(FEATURES) or len(weights) != len(names) + 1:
            raise ValueError(f"features {list(names)} with {len(weights)} weights")
        if ("agreement" in names) != (samples > 0):
            raise ValueError(f"agreement without samples, or samples ({samples}) without agreement")
        plain = record.get("without_samples")
        if plain is not None and (not samples or plain.get("samples", 0)):
            raise ValueError("a calibration without samples where no samples are drawn, or with samples")
        fallback = cls._from_record(plain) if plain is not None else None
        return cls(x, y, int(record.get("fitted_on", 0)), names, weights, samples, fallback)


def sentence_confidence(
    token_log_probs: Sequence[float],
    calibration: Optional[Calibration],
    source_length: int = 0,
    agreement: Optional[float] = None,
) -> float:
    """The confidence of a translation with these token log-probs (of a source of ``source_length`` subwords, with
    this ``agreement`` where the calibration draws samples): calibrated, or exp(mean log-prob)."""
    if calibration is None:
        return math.exp(mean_log_prob(token_log_probs))
    return calibration.confidence(features(token_log_probs, source_length, agreement))


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (ties get their mean rank)."""

    def ranks(values: Sequence[float]) -> list[float]:
        order = sorted(range(len(values)), key=lambda i: values[i])
        out = [0.0] * len(values)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
                j += 1
            for k in range(i, j + 1):
                out[order[k]] = (i + j) / 2
            i = j + 1
        return out

    ra, rb = ranks(a), ranks(b)
    ma, mb = sum(ra) / len(ra), sum(rb) / len(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    var = math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))
    return cov / var if var else 0.0


def calibration_error(confidence: Sequence[float], quality: Sequence[float], bins: int = 10) -> float:
    """Expected calibration error: over ``bins`` equal-width bins of confidence, the sentence-weighted mean of
    |mean confidence - mean quality|."""
    total, error = len(confidence), 0.0
    for b in range(bins):
        inside = [i for i, c in enumerate(confidence) if min(int(c * bins), bins - 1) == b]
        if inside:
            gap = sum(confidence[i] for i in inside) / len(inside) - sum(quality[i] for i in inside) / len(inside)
            error += len(inside) / total * abs(gap)
    return error
