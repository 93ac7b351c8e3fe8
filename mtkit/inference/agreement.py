"""The samples a calibrated run's confidence measures each translation's agreement with (``mtkit calibrate
--samples``): which calibration an engine can follow, and drawing the samples the way the calibration drew them."""

from __future__ import annotations

from typing import Optional

from mtkit.decoding import algorithms
from mtkit.errors import MtkitError
from mtkit.inference.confidence import Calibration, agreement_draws
from mtkit.inference.engine import Engine
from mtkit.inference.languages import with_first, without_first
from mtkit.inference.options import Options


def calibration_for(calibration: Optional[Calibration], engine: str) -> Optional[Calibration]:
    """The run's calibration as ``engine`` can follow it: one whose samples the engine cannot draw (the registry's
    verdict) gives way to its fit without them, where the file has one (else ``draw_samples`` refuses)."""
    if calibration is None or not calibration.samples or calibration.without_samples is None:
        return calibration
    if algorithms.refusal(agreement_draws(calibration.samples), engine):
        return calibration.without_samples
    return calibration


def draw_samples(engine: Engine, options: Options, count: int, ids: list, forced: list) -> list[list[str]]:
    """The texts of ``count`` epsilon samples of each source of ``ids`` (``forced``: each one's forced first target
    token, or []), from seed 0 afresh, so a sentence translated again in the same company gets the same confidence.

    Raises:
        MtkitError: the engine cannot draw them (a calibration file written before it kept a fit without samples).
    """
    spec = agreement_draws(count)
    refused = algorithms.refusal(spec, options.engine)
    if refused:
        raise MtkitError(
            f"the run's calibration scores translations by {count} epsilon samples, which the {options.engine} "
            f"engine cannot draw ({refused}); rerun mtkit calibrate RUN --samples {count}, which also fits a "
            "confidence without them, or use --engine torch"
        )
    drawing = options.for_call(**spec)
    engine.restart_draws(drawing)
    guidance = [with_first(None, tag) for tag in forced] if forced else None
    drawn = engine.translate_ids(ids, guidance, drawing)
    if forced:
        drawn = [[without_first(h) for h in hyps] for hyps in drawn]
    texts = iter(engine.tokenizer.decode_tgt([h.tokens for hyps in drawn for h in hyps]))
    return [[next(texts) for _ in hyps] for hyps in drawn]
