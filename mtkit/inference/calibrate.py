"""`mtkit calibrate RUN`: fit the run's confidence (``inference.confidence.Calibration``) on a split it was not
trained on, by translating it and scoring each sentence against its reference with sacreBLEU's chrF."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

from mtkit.errors import MtkitError
from mtkit.inference.confidence import Calibration, calibration_error, mean_log_prob, spearman


def calibrate_main(*, run: Path, split: str = "valid", max_sentences: Optional[int] = None, **options) -> Calibration:
    """Translate ``split`` of the run's data dir (its first ``max_sentences``), fit the calibration of mean token
    log-prob to sentence chrF / 100, write RUN/calibration.json and print what it measured.

    Raises:
        MtkitError: ``run`` is not a run directory, its data dir lacks ``split`` (or its text), or nothing
            translated.
    """
    from sacrebleu.metrics.chrf import CHRF

    from mtkit import config as cfgmod
    from mtkit.data.batches import ParallelData
    from mtkit.inference import api

    run = Path(run)
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
    chrf = CHRF()
    scores, quality = [], []
    for translation, reference in zip(model.translate_batch(sources, scores=True), references):
        best = translation.best
        if best is None or best.token_log_probs is None:
            continue
        scores.append(mean_log_prob(best.token_log_probs))
        quality.append(chrf.sentence_score(best.text, [reference]).score / 100)
    if len(scores) < 2:
        raise MtkitError(f"{cfg.data.dir}: split {split!r} gave {len(scores)} translation(s); calibrating needs more")
    calibration = Calibration.fit(scores, quality)
    path = calibration.save(run)
    raw = [math.exp(s) for s in scores]
    print(
        f"calibrated on {len(scores)} sentences of {split}: Spearman {spearman(scores, quality):.3f} (mean log-prob "
        f"against sentence chrF); calibration error {calibration_error(raw, quality):.3f} uncalibrated, "
        f"{calibration_error([calibration(s) for s in scores], quality):.3f} on these sentences; wrote {path}"
    )
    return calibration
