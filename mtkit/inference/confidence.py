"""How much to trust a translation, from the model's own token probabilities: a sentence confidence in [0, 1] and a
confidence per word.

A sentence's raw figure is its mean token log-prob (EOS included), which ranks a model's translations by quality
about as well as anything the model itself gives (docs/benchmarks.md, section 25). ``Calibration`` maps it to the
expected sentence chrF / 100 of such a translation: an isotonic (never decreasing) fit on a validation set,
written by ``mtkit calibrate RUN`` to RUN/calibration.json. Without one, the confidence is the geometric mean of the
token probabilities, exp(mean log-prob). A word's confidence is the probability the model gave its subwords
together, exp(the sum of their log-probs). No torch here.
"""

from __future__ import annotations

import bisect
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence

from mtkit.errors import MtkitError

FILE = "calibration.json"
WORD_START = "\u2581"


def mean_log_prob(token_log_probs: Sequence[float]) -> float:
    return sum(token_log_probs) / max(len(token_log_probs), 1)


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
    """A never-decreasing piecewise-linear map from mean token log-prob to expected quality (chrF / 100).

    ``x`` are increasing knots, ``y`` their never-decreasing values in [0, 1]; below the first knot the first value
    holds, above the last the last (``__call__``).
    """

    x: tuple[float, ...]
    y: tuple[float, ...]
    fitted_on: int = 0  # sentences

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
        record = {"x": list(self.x), "y": list(self.y), "fitted_on": self.fitted_on}
        atomic_write_text(path, json.dumps(record) + "\n")
        return path

    @classmethod
    def load(cls, run_dir: Path) -> Optional["Calibration"]:
        """The run's calibration, None where it has none; ``MtkitError`` for a damaged file."""
        path = Path(run_dir) / FILE
        if not path.is_file():
            return None
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
            x, y = tuple(map(float, record["x"])), tuple(map(float, record["y"]))
            if not x or len(x) != len(y) or list(x) != sorted(x) or list(y) != sorted(y):
                raise ValueError("knots out of order")
            return cls(x, y, int(record.get("fitted_on", 0)))
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise MtkitError(f"{path}: not a calibration ({err}); rerun mtkit calibrate {run_dir}") from None


def sentence_confidence(token_log_probs: Sequence[float], calibration: Optional[Calibration]) -> float:
    """The confidence of a translation with these token log-probs: calibrated, or exp(mean log-prob)."""
    score = mean_log_prob(token_log_probs)
    return calibration(score) if calibration is not None else math.exp(score)


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
