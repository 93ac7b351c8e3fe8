"""A decoding algorithm registered from outside mtkit, as a plugin would be: the shortest of a beam's n-best, on
both engines (a torch runner and a CTranslate2 runner).

Importing this module registers it (tests/test_algorithms.py imports it in-process and in a subprocess)."""

from __future__ import annotations

from mtkit.decoding import algorithms


def shortest(found):
    return [[min(hyps, key=lambda h: (len(h.tokens), -h.score))] for hyps in found]


def run_shortest(model, src, options, common, generator=None, **_):
    from mtkit.decoding.search import beam_search

    width = options.param("shortest_width")
    found = beam_search(
        model, src, beam_size=width, length_penalty=options.length_penalty, nbest=width, stopping="beam_full", **common
    )
    return shortest(found)


def run_shortest_ct2(engine, ids, guidance, options):
    from mtkit.inference.ct2_engine import Ct2Search

    width = options.param("shortest_width")
    return shortest(engine.search(ids, guidance, options, Ct2Search(width, width, width)))


SHORTEST = algorithms.register(
    algorithms.Algorithm(
        "shortest",
        "the shortest hypothesis of a beam's n-best",
        torch=f"{__name__}:run_shortest",
        ctranslate2=f"{__name__}:run_shortest_ct2",
        params=(algorithms.Param("shortest_width", "int", 3, "the beam's width", ge=2),),
        nbest=False,
        rows="shortest_width",
    )
)
