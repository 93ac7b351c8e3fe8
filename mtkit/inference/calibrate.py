"""`mtkit calibrate RUN`: fit the run's confidence (``inference.confidence.Calibration``) on a split it was not
trained on, by translating it and scoring each sentence against its reference with sacreBLEU's chrF; with
``--samples K``, each sentence's agreement with K epsilon samples joins its figures (and every later translation
with scores draws its K samples)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Optional

from mtkit.decoding import algorithms
from mtkit.errors import MtkitError
from mtkit.inference.confidence import (
    BASIC,
    Calibration,
    agreement,
    agreement_draws,
    calibration_error,
    features,
    spearman,
)

MAX_SAMPLES = 64


def calibrate_main(
    *, run: Path, split: str = "valid", max_sentences: Optional[int] = None, samples: int = 0, **options
) -> Calibration:
    """Translate ``split`` of the run's data dir (its first ``max_sentences``), fit the calibration of each
    translation's figures (``confidence.features``; with ``samples``, its agreement with that many epsilon samples
    too) to sentence chrF / 100, write RUN/calibration.json and print what it measured.

    Raises:
        MtkitError: ``run`` is not a run directory, its data dir lacks ``split`` (or its text), or nothing
            translated.
    """
    from sacrebleu.metrics.chrf import CHRF

    from mtkit import config as cfgmod
    from mtkit.data.batches import ParallelData
    from mtkit.inference import api

    run = Path(run)
    if not 0 <= samples <= MAX_SAMPLES:
        raise MtkitError(f"--samples {samples}: use 0 (none) to {MAX_SAMPLES} epsilon samples a sentence")
    if not (run / "config.yaml").is_file():
        raise MtkitError(f"{run}: not a run directory (no config.yaml); calibrate the run dir that training wrote")
    cfg = cfgmod.load(str(run / "config.yaml"))
    data = ParallelData(cfg.data.dir, split)
    source = data.text_path("src")
    if source is None or not source.is_file():
        raise MtkitError(f"{cfg.data.dir}: split {split!r} keeps no text to translate; rerun `mtkit prepare CONFIG`")
    with open(source, encoding="utf-8", newline="\n") as f:
        sources = [line.rstrip("\n") for line in f]
    references = data.reference_lines()
    if max_sentences:
        sources, references = sources[:max_sentences], references[:max_sentences]
    model = api.load(run, **options)
    model.calibration = None  # a calibration already there draws no samples and is not used here
    refused = samples and algorithms.refusal(agreement_draws(samples), model.options.engine)
    if refused:
        raise MtkitError(f"--samples {samples} draws epsilon samples, which this engine cannot ({refused})")
    chrf = CHRF()
    translations = model.translate_batch(sources, scores=True)
    drawn = [None] * len(sources)
    if samples:
        sampled = model.translate_batch(sources, scores=False, **agreement_draws(samples))
        drawn = [[h.text for h in t.hypotheses] for t in sampled]
    rows, quality = [], []
    for translation, reference, texts in zip(translations, references, drawn):
        best = translation.best
        if best is None or best.token_log_probs is None:
            continue
        agrees = agreement([best.text], texts)[0] if texts is not None else None
        rows.append(features(best.token_log_probs, len(translation.source_tokens), agrees))
        quality.append(chrf.sentence_score(best.text, [reference]).score / 100)
    if len(rows) < 2:
        raise MtkitError(f"{cfg.data.dir}: split {split!r} gave {len(rows)} translation(s); calibrating needs more")
    names = BASIC + (("agreement",) if samples else ())
    calibration = Calibration.fit_features(rows, quality, names, samples)
    if samples:  # for an engine that cannot draw the samples (CTranslate2): the same fit without them
        plain = Calibration.fit_features(rows, quality, BASIC)
        calibration = dataclasses.replace(calibration, without_samples=plain)
    path = calibration.save(run)
    mean_lp = [row["mean_log_prob"] for row in rows]
    confidence = [calibration.confidence(row) for row in rows]
    print(
        f"calibrated on {len(rows)} sentences of {split}: Spearman {spearman(mean_lp, quality):.3f} (mean log-prob "
        f"against sentence chrF), {spearman(confidence, quality):.3f} (the confidence: {', '.join(names)}); "
        f"calibration error {calibration_error([math.exp(s) for s in mean_lp], quality):.3f} uncalibrated, "
        f"{calibration_error(confidence, quality):.3f} on these sentences; wrote {path}"
    )
    return calibration
