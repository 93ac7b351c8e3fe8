"""A decoding algorithm registered from outside mtkit, as a plugin would be: the shortest of a beam's n-best.

Importing this module registers it (tests/test_algorithms.py imports it in-process and in a subprocess)."""

from __future__ import annotations

from mtkit.decoding import algorithms


def run_shortest(model, src, options, common, generator=None, **_):
    from mtkit.decoding.search import beam_search

    width = options.param("shortest_width")
    found = beam_search(
        model, src, beam_size=width, length_penalty=options.length_penalty, nbest=width, stopping="beam_full", **common
    )
    return [[min(hyps, key=lambda h: (len(h.tokens), -h.score))] for hyps in found]


SHORTEST = algorithms.register(
    algorithms.Algorithm(
        "shortest",
        "the shortest hypothesis of a beam's n-best",
        torch=f"{__name__}:run_shortest",
        params=(algorithms.Param("shortest_width", "int", 3, "the beam's width", ge=2),),
        nbest=False,
        rows="shortest_width",
    )
)
