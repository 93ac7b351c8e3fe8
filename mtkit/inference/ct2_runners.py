"""The CTranslate2 runners of the registry's searching and sampling entries (``mtkit.decoding.algorithms``): each
turns the options into what ``Ct2Engine.search`` asks of CTranslate2."""

from __future__ import annotations

from mtkit.decoding.hypothesis import Decoded
from mtkit.inference.ct2_engine import Ct2Engine, Ct2Search
from mtkit.inference.options import Options


def run_search(engine: Ct2Engine, ids, guidance, o: Options) -> list[list[Decoded]]:
    """Beam search (and greedy search, a beam of 1): CTranslate2's beam of ``beam_size``, the n-best kept."""
    return engine.search(ids, guidance, o, Ct2Search(o.beam_size, o.beam_size, o.nbest))


def run_sampling(engine: Ct2Engine, ids, guidance, o: Options) -> list[list[Decoded]]:
    """Sampling: ``nbest`` samples a sentence by CTranslate2's top-k, top-p and temperature, from the stream of
    ``seed`` (its entry refuses epsilon here)."""
    draws = dict(sampling_topk=o.top_k, sampling_topp=_float32(o.top_p), sampling_temperature=_float32(o.temperature))
    return engine.search(ids, guidance, o, Ct2Search(1, o.nbest, o.nbest, draws, o.seed))


def _float32(value: float) -> float:
    """A positive value as CTranslate2 takes it (a C float): at least float32's least normal number, which a top-p or
    a temperature below it would become 0 (refused) or infinite logits; there it keeps the most likely subword, as
    the torch engine does."""
    return max(value, FLOAT32_TINY)


FLOAT32_TINY = 1.1754943508222875e-38
