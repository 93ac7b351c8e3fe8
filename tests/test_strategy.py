"""Beam search's candidate selection strategies (mtkit/decoding/strategy.py, constraints.py) one step at a time."""

from __future__ import annotations

import pytest
import torch

from mtkit.decoding.constraints import ConstrainedStrategy, Guidance, Guide, beam_strategy
from mtkit.decoding.hypothesis import length_penalty_of
from mtkit.decoding.strategy import NEG_INF, PlainStrategy
from mtkit.models.base import BOS, EOS, PAD

VOCAB, K = 10, 3


def step_inputs(live: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    log_probs = torch.randn(live * K, VOCAB, generator=generator).log_softmax(dim=1)
    log_probs[:, [PAD, BOS]] = NEG_INF
    beam_scores = -torch.rand(live, K, generator=generator)
    return log_probs, beam_scores


def test_the_factory_picks_the_strategy():
    assert isinstance(beam_strategy(None, 1.0), PlainStrategy)
    assert isinstance(beam_strategy(Guide([None], torch.device("cpu")), 1.0), ConstrainedStrategy)


@pytest.mark.parametrize("t", [0, 4])  # 4: the first sentence is at its limit
def test_an_empty_guide_proposes_what_the_plain_strategy_does(t):
    max_len = torch.tensor([4, 9])
    plain, guided = PlainStrategy(0.6), ConstrainedStrategy(Guide([None, None], torch.device("cpu")), 0.6)
    assert torch.equal(plain.start(max_len, 63, K), guided.start(max_len, 63, K))
    log_probs, beam_scores = step_inputs(2)
    a, b = plain.step(t, log_probs.clone(), beam_scores), guided.step(t, log_probs.clone(), beam_scores)
    for name in ("scores", "beams", "tokens", "token_log_probs", "next_scores", "chosen"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    if t == 4:  # only EOS may follow in the first sentence's rows
        assert a.tokens[0, :K].eq(EOS).all()
        assert not a.next_scores[0].gt(NEG_INF).any()
    assert plain.penalty(t + 1) == length_penalty_of(t + 1, 0.6)
    assert guided.penalty(t + 1).squeeze(1).tolist() == pytest.approx([length_penalty_of(t + 1, 0.6)] * 2)


def test_the_constrained_strategy_does_not_count_the_prefix():
    guide = Guide([Guidance(prefix=(4, 5)), None], torch.device("cpu"))
    strategy = ConstrainedStrategy(guide, 1.0)
    strategy.start(torch.tensor([5, 5]), 63, K)
    assert strategy.penalty(4).squeeze(1).tolist() == pytest.approx(
        [length_penalty_of(2, 1.0), length_penalty_of(4, 1.0)]
    )
    lengths = torch.tensor([[6.0], [6.0]])
    assert strategy.penalty(lengths).squeeze(1).tolist() == pytest.approx(
        [length_penalty_of(4, 1.0), length_penalty_of(6, 1.0)]
    )


def test_the_length_penalty_takes_numbers_and_tensors():
    lengths = torch.arange(1, 40, dtype=torch.float32)
    for alpha in (0.0, 0.6, 1.0):
        from_tensor = length_penalty_of(lengths, alpha)
        assert from_tensor.dtype == torch.float32
        assert from_tensor.tolist() == pytest.approx([length_penalty_of(int(n), alpha) for n in lengths], rel=1e-6)
    assert length_penalty_of(7, 0.0) == 1.0
