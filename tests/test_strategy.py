"""Beam search's candidate selection strategies (mtkit/decoding/strategy.py, constraints.py) one step at a time."""

from __future__ import annotations

import pytest
import torch

from mtkit.decoding.constraints import ConstrainedStrategy, Guidance, Guide, beam_strategy
from mtkit.decoding.hypothesis import length_penalty_of
from mtkit.decoding.strategy import NEG_INF, PlainStrategy, row_argmax, row_topk
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
@pytest.mark.compares
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


@pytest.mark.parametrize("width", [8000, 8003, 640, 100])  # 8003: a partial last block; 640 and 100: plain topk
@pytest.mark.compares
def test_row_topk_finds_the_values_topk_finds(width):
    generator = torch.Generator().manual_seed(width)
    x = torch.randn(50, width, generator=generator)
    x[:, [PAD, BOS]] = NEG_INF
    x[3, 7] = x[3].max() + 1  # one row with its best in the first block, one with its best in the last column
    x[4, -1] = x[4].max() + 1
    for k in (1, 10):
        values, columns = row_topk(x, k)
        expected_values, expected_columns = x.topk(k, dim=1)
        assert torch.equal(values, expected_values)
        assert torch.equal(columns, expected_columns)  # no ties in random floats: the same columns too
        assert torch.equal(x.gather(1, columns), values)


@pytest.mark.parametrize("width", [8000, 8003, 100])  # 8003: a partial last block
@pytest.mark.compares
def test_row_argmax_is_argmax_ties_included(width):
    generator = torch.Generator().manual_seed(width)
    x = torch.randn(60, width, generator=generator)
    x[:, [PAD, BOS]] = NEG_INF
    x[3, 7] = x[3].max() + 1  # the best in the first block, in the last column, and in a ragged last column
    x[4, -1] = x[4].max() + 1
    x[5, -70] = x[5].max() + 1
    top = x.max(dim=1, keepdim=True).values
    x[10:20, width // 3] = top[10:20, 0]  # ties with each row's best, before or after it
    x[20:30, width - 10] = top[20:30, 0]
    x[30:40] = torch.randint(0, 3, (10, width), generator=generator).float()  # hundreds of ties a row
    x[40] = NEG_INF  # nothing finite: column 0, as argmax
    assert torch.equal(row_argmax(x), x.argmax(dim=1))


def test_row_topk_with_ties_returns_topk_values_at_distinct_columns():
    generator = torch.Generator().manual_seed(1)
    x = torch.randint(0, 4, (30, 8000), generator=generator).float()  # thousands of ties per row
    x[0] = 0.0
    x[0, [5, 4000, 7999]] = 2.0  # three winners in three blocks, then 7,997 ties for the rest
    values, columns = row_topk(x, 10)
    assert torch.equal(values, x.topk(10, dim=1).values)
    assert torch.equal(x.gather(1, columns), values)
    assert all(len(set(row)) == 10 for row in columns.tolist())
    assert set(columns[0, :3].tolist()) == {5, 4000, 7999}
