"""Prefixes, lexical constraints and avoided phrases (mtkit/decoding/constraints.py) on decoders of known probabilities.

The scripted decoder and the random TinyGRU are test_search.py's: winners and scores are worked out by hand on
the first, properties (every constraint met, no avoided phrase, batched == alone) are checked over many random
instructions on the second.
"""

from __future__ import annotations

import math
import random

import pytest
import torch

from mtkit.decoding.constraints import Guidance, Guide, transitions
from mtkit.models.base import EOS, PAD
from tests.test_search import (
    GARDEN,
    NEVER_ENDS,
    A,
    B,
    C,
    D,
    ScriptedModel,
    TinyGRU,
    decode,
    make_src,
    random_src,
)

L = math.log
pytestmark = pytest.mark.usefixtures("one_thread")

# Unconstrained, A EOS (.63) wins; C only follows B: with C required, B C EOS (.243) is the best.
FORK = {
    (): {A: 0.7, B: 0.3},
    (A,): {EOS: 0.9},
    (B,): {C: 0.9},
    (B, C): {EOS: 0.9, D: 0.05},
    (B, C, D): {EOS: 0.9},
}


def guided(model, src, items, method="beam", **kw):
    return decode(model, src, method, guide=Guide(items, src.device), **kw)


def contains(tokens: list[int], phrase) -> bool:
    n = len(phrase)
    return any(tuple(tokens[i : i + n]) == tuple(phrase) for i in range(len(tokens) - n + 1))


def test_kmp_transitions():
    # "A A B": after A A, another A keeps A A (not back to 0); B completes it; met stays met
    assert transitions((A, A, B), absorbing=True) == [[1, 1, 0], [2, 2, 0], [2, 2, 3], [3, 3, 3]]
    assert transitions((A, B, A), absorbing=False)[3] == [1, 2, 1]  # after A B A: A -> "A", B -> "A B"


def test_a_constraint_changes_the_winner_and_only_the_continuation_is_scored():
    model, src = ScriptedModel([FORK]), make_src([0], [3])
    [[plain]] = decode(model, src, beam_size=2)
    assert plain.tokens == [A]
    [[best]] = guided(model, src, [Guidance(constraints=((C,),))], beam_size=3)
    assert best.tokens == [B, C]
    assert best.log_prob == pytest.approx(L(0.3 * 0.9 * 0.9), abs=1e-5)
    # multi-token: B C D
    [hyps] = guided(model, src, [Guidance(constraints=((C, D),))], beam_size=3, nbest=2)
    assert hyps[0].tokens == [B, C, D]
    assert hyps[0].log_prob == pytest.approx(L(0.3 * 0.9 * 0.05 * 0.9), abs=1e-5)
    assert all(contains(h.tokens, (C, D)) for h in hyps)


def test_two_constraints_and_the_length_limit_is_raised_to_fit_them():
    # NEVER_ENDS would write A forever; D and B C are unlikely, and the limit (1 token) is too short for them
    model, src = ScriptedModel([NEVER_ENDS]), make_src([0], [2])
    items = [Guidance(constraints=((D,), (B, C)))]
    [hyps] = guided(model, src, items, beam_size=4, nbest=4, max_len_a=0.0, max_len_b=1)
    assert hyps
    for h in hyps:
        assert contains(h.tokens, (D,)) and contains(h.tokens, (B, C)) and len(h.tokens) == 3


def test_prefix_is_forced_and_costs_nothing():
    model, src = ScriptedModel([GARDEN]), make_src([0], [3])
    for method, kw in [
        ("beam", {"beam_size": 2}),
        ("greedy", {}),
        ("sample", {"top_k": 1, "generator": torch.Generator().manual_seed(0)}),
    ]:
        [[h]] = guided(model, src, [Guidance(prefix=(A,))], method, **kw)
        assert h.tokens == [A, C], method  # beam alone would pick B C
        assert h.token_log_probs == pytest.approx([0.0, L(0.4), L(0.9)], abs=1e-6)
        assert h.log_prob == pytest.approx(L(0.4 * 0.9), abs=1e-5)
    # the length penalty counts the continuation only: C EOS is 2 tokens
    [[h]] = guided(model, src, [Guidance(prefix=(A,))], beam_size=2, length_penalty=1.0)
    assert h.score == pytest.approx(L(0.4 * 0.9) / (7 / 6), abs=1e-5)
    # a prefix longer than the output limit raises it: the whole prefix, then EOS
    [[h]] = guided(model, src, [Guidance(prefix=(B, D, D, D))], beam_size=2, max_len_b=2)
    assert h.tokens == [B, D, D, D]


@pytest.mark.parametrize("method", ["beam", "greedy", "sample"])
def test_avoided_phrases_never_appear(method):
    model, src = ScriptedModel([GARDEN]), make_src([0], [3])
    kw = {"beam_size": 3, "nbest": 3} if method == "beam" else {}
    if method == "sample":
        kw = {"generator": torch.Generator().manual_seed(0), "nbest": 200}
    for avoid in [((A, C),), ((C,),), ((A,), (B, C))]:
        [hyps] = guided(model, src, [Guidance(avoid=avoid)], method, **kw)
        assert hyps
        assert not any(contains(h.tokens, phrase) for h in hyps for phrase in avoid), (avoid, method)
    [[g]] = guided(model, src, [Guidance(avoid=((A, C),))], "greedy")
    assert g.tokens == [A, D]  # C banned after A: D (.35) is next


def test_constraints_with_prefix_and_the_prefix_may_meet_a_constraint():
    model, src = ScriptedModel([FORK]), make_src([0], [3])
    [[h]] = guided(model, src, [Guidance(prefix=(B,), constraints=((D,),))], beam_size=2)
    assert h.tokens == [B, C, D]
    assert h.log_prob == pytest.approx(L(0.9 * 0.05 * 0.9), abs=1e-5)
    [[h]] = guided(model, src, [Guidance(prefix=(B, C), constraints=((C,),))], beam_size=2)
    assert h.tokens == [B, C]  # met inside the prefix: free to end


def test_greedy_and_sampling_refuse_constraints():
    model, src = ScriptedModel([FORK]), make_src([0], [3])
    for method in ("greedy", "sample"):
        with pytest.raises(ValueError, match="beam search"):
            guided(model, src, [Guidance(constraints=((C,),))], method)


def test_instructions_that_cannot_fit_the_model_are_refused():
    model, src = ScriptedModel([FORK], max_positions=4), make_src([0], [3])
    with pytest.raises(ValueError, match="sentence 1: .* 4 target tokens, more than the model's limit of 3"):
        guided(model, src, [Guidance(prefix=(A, B), constraints=((C, D),))], beam_size=2)


def random_guidance(rng: random.Random, vocab: int) -> Guidance:
    token = lambda: rng.randrange(4, vocab)  # noqa: E731
    constraints = tuple(tuple(token() for _ in range(rng.randint(1, 3))) for _ in range(rng.randint(0, 2)))
    avoid = tuple(tuple(token() for _ in range(rng.randint(1, 2))) for _ in range(rng.randint(0, 2)))
    avoid = tuple(a for a in avoid if not any(contains(list(c), a) for c in constraints))
    prefix = tuple(token() for _ in range(rng.choice([0, 0, 1, 3])))
    return Guidance(prefix=prefix, constraints=constraints, avoid=avoid)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_every_hypothesis_meets_its_constraints_and_avoids_its_phrases(seed):
    rng = random.Random(seed)
    model, src = TinyGRU(seed), random_src(seed, batch=6)
    changed = 0  # constraints the plain search misses: the instructions do change the outputs
    for beam_size, stopping, alpha in [(4, "exact", 0.0), (5, "beam_full", 1.0), (3, "first", 0.6), (1, "exact", 0)]:
        items = [random_guidance(rng, 12) if rng.random() < 0.7 else None for _ in range(src.size(0))]
        kw = dict(beam_size=beam_size, nbest=beam_size, stopping=stopping, length_penalty=alpha)
        results = guided(model, src, items, **kw)
        for g, [plain, *_] in zip(items, decode(model, src, **kw)):
            changed += sum(not contains(plain.tokens, c) for c in (g.constraints if g else ()))
        for g, hyps in zip(items, results):
            assert hyps
            g = g or Guidance()
            for h in hyps:
                assert tuple(h.tokens[: len(g.prefix)]) == g.prefix
                assert all(contains(h.tokens, c) for c in g.constraints), (g, h.tokens)
                rest = h.tokens[len(g.prefix) :]
                for phrase in g.avoid:  # not written after the prefix (a phrase may span its end)
                    starts = [i for i in range(len(h.tokens)) if tuple(h.tokens[i : i + len(phrase)]) == phrase]
                    assert all(i + len(phrase) <= len(g.prefix) for i in starts), (g, h.tokens)
                assert h.log_prob == pytest.approx(math.fsum(h.token_log_probs), abs=1e-5)
                assert h.token_log_probs[: len(g.prefix)] == [0.0] * len(g.prefix)
                assert len(rest) + 1 == len(h.token_log_probs) - len(g.prefix)
            assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
    assert changed >= 3


@pytest.mark.parametrize("seed", [1, 3])
@pytest.mark.compares
def test_batched_with_and_without_instructions_equals_alone(seed):
    rng = random.Random(seed)
    model, src = TinyGRU(seed), random_src(seed + 20, batch=6)
    items = [random_guidance(rng, 12) if i % 2 else None for i in range(src.size(0))]
    for method, kw in [("beam", {"beam_size": 4, "nbest": 2}), ("greedy", {})]:
        if method == "greedy":
            items = [Guidance(prefix=g.prefix, avoid=g.avoid) if g else None for g in items]
        batched = guided(model, src, items, method, **kw)
        for i, g in enumerate(items):
            row = src[i : i + 1, : int(src[i].ne(PAD).sum())]
            alone = guided(model, row, [g], method, **kw)[0] if g else decode(model, row, method, **kw)[0]
            assert [h.tokens for h in batched[i]] == [h.tokens for h in alone], (method, i)
            assert [h.score for h in batched[i]] == pytest.approx([h.score for h in alone], abs=1e-5)


@pytest.mark.parametrize("seed", [1, 3, 5])
@pytest.mark.compares
def test_no_instructions_is_the_plain_search_bit_for_bit(seed):
    model, src = TinyGRU(seed), random_src(seed, batch=6)
    for kw in [dict(beam_size=4, nbest=4, stopping="exact"), dict(beam_size=3, length_penalty=1.0, stopping="first")]:
        plain = decode(model, src, need_attention=True, **kw)
        empty = guided(model, src, [None] * src.size(0), need_attention=True, **kw)
        for p, e in zip(plain, empty):
            assert [h.tokens for h in p] == [h.tokens for h in e]
            assert [h.score for h in p] == [h.score for h in e]
            assert [h.token_log_probs for h in p] == [h.token_log_probs for h in e]
            assert all(torch.equal(a.attention, b.attention) for a, b in zip(p, e))
