"""The CTranslate2 runners of the registry's entries (``mtkit.decoding.algorithms``): each turns the options into
what ``Ct2Engine.search`` asks of CTranslate2 (MBR then ranks the beam's candidates as on torch)."""

from __future__ import annotations

from mtkit.decoding import mbr
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


def run_mbr(engine: Ct2Engine, ids, guidance, options: Options) -> list[list[Decoded]]:
    """MBR: candidates from a beam of ``mbr_candidates`` (its entry refuses epsilon sampling here), pseudo-references
    from CTranslate2's samples of ``mbr_seed``'s stream where ``mbr_pseudo_references`` asks, then ``mbr.rank``."""
    n, pseudo = options.param("mbr_candidates"), options.param("mbr_pseudo_references")
    candidates = engine.search(ids, guidance, options, Ct2Search(n, n, n))
    texts = mbr.texts_of(candidates, engine.tokenizer.decode_tgt)
    references = None
    if pseudo:
        draws = dict(sampling_topk=0, sampling_topp=1.0, sampling_temperature=1.0)
        plan = Ct2Search(1, pseudo, pseudo, draws, options.param("mbr_seed"))
        references = mbr.texts_of(engine.search(ids, guidance, options, plan), engine.tokenizer.decode_tgt)
    extra = mbr.comet_inputs(options, ids, engine.tokenizer.decode_src)
    return mbr.rank(candidates, texts, references, options.param("mbr_utility"), options.nbest, **extra)
