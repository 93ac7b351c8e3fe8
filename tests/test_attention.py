"""AttentionScore: masking, normalisation, each score against a hand computation, precomputed keys."""

import math

import pytest
import torch

from mtkit.models.attention import SCORE_KINDS, AttentionScore, gaussian_window, masked_softmax

pytestmark = pytest.mark.usefixtures("one_thread")


def _inputs(batch=3, src_len=6, dim=8, seed=0):
    torch.manual_seed(seed)
    query = torch.randn(batch, dim)  # (batch, dim)
    keys = torch.randn(batch, src_len, dim)  # (batch, src_len, dim)
    lengths = torch.tensor([src_len, 4, 1])[:batch]
    mask = torch.arange(src_len)[None, :] < lengths[:, None]  # (batch, src_len)
    return query, keys, mask


@pytest.mark.parametrize("kind", SCORE_KINDS)
def test_weights_are_zero_on_padding_and_sum_to_one(kind):
    query, keys, mask = _inputs()
    attention = AttentionScore(kind, 8, 8, hidden=5, max_positions=16)
    keys = keys.masked_fill(~mask[..., None], 1e4)  # huge padding keys must not matter
    weights = attention(query, keys, mask)  # (batch, src_len)
    assert weights.shape == (3, 6)
    assert torch.all(weights[~mask] == 0)
    assert torch.all(weights[mask] > 0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3))
    assert weights[2, 0] == 1  # a single real token takes all the mass


@pytest.mark.parametrize("kind", SCORE_KINDS)
@pytest.mark.compares
def test_padding_does_not_change_weights_of_real_tokens(kind):
    query, keys, mask = _inputs()
    attention = AttentionScore(kind, 8, 8, max_positions=16)
    padded = attention(query[1:2], keys[1:2], mask[1:2])  # row 1 has 4 real tokens of 6
    alone = attention(query[1:2], keys[1:2, :4], mask[1:2, :4])
    torch.testing.assert_close(padded[:, :4], alone)


@pytest.mark.parametrize("kind", SCORE_KINDS)
@pytest.mark.compares
def test_precomputed_keys_and_time_axis_give_the_same_weights(kind):
    query, keys, mask = _inputs()
    attention = AttentionScore(kind, 8, 8, max_positions=16)
    projected = attention.precompute(keys)
    assert (projected is None) == (kind not in ("additive", "general"))
    reference = attention(query, keys, mask)
    torch.testing.assert_close(attention(query, keys, mask, projected), reference)
    # a (batch, tgt_len, dim) query scores every position in one call
    queries = torch.stack([query, 2 * query], dim=1)  # (batch, 2, dim)
    both = attention(queries, keys, mask, projected)  # (batch, 2, src_len)
    torch.testing.assert_close(both[:, 0], reference)
    torch.testing.assert_close(both[:, 1], attention(2 * query, keys, mask))


def test_additive_matches_hand_computation():
    attention = AttentionScore("additive", query_dim=2, key_dim=3, hidden=2)
    with torch.no_grad():
        attention.query_proj.weight.copy_(torch.tensor([[1.0, 0.0], [0.5, -1.0]]))  # W_q (hidden, q_dim)
        attention.key_proj.weight.copy_(torch.tensor([[0.2, 0.0, 1.0], [0.0, -0.3, 0.4]]))  # W_k (hidden, k_dim)
        attention.key_proj.bias.copy_(torch.tensor([0.1, -0.2]))
        attention.v.weight.copy_(torch.tensor([[1.5, -2.0]]))
    query = [0.3, -0.7]
    keys = [[1.0, 2.0, 0.5], [-1.0, 0.0, 2.0], [0.5, 0.5, 0.5]]
    wq = [[1.0, 0.0], [0.5, -1.0]]
    wk = [[0.2, 0.0, 1.0], [0.0, -0.3, 0.4]]
    b, v = [0.1, -0.2], [1.5, -2.0]
    expected_scores = []
    for key in keys[:2]:  # the third key is padding
        energy = [
            math.tanh(sum(wq[i][j] * query[j] for j in range(2)) + sum(wk[i][j] * key[j] for j in range(3)) + b[i])
            for i in range(2)
        ]
        expected_scores.append(sum(v[i] * energy[i] for i in range(2)))
    total = sum(math.exp(s) for s in expected_scores)
    expected = [math.exp(s) / total for s in expected_scores] + [0.0]

    weights = attention(torch.tensor([query]), torch.tensor([keys]), torch.tensor([[True, True, False]]))
    torch.testing.assert_close(weights, torch.tensor([expected]))


def test_dot_general_location_match_their_formulas():
    query, keys, mask = _inputs(batch=1, src_len=4)
    full = torch.ones(1, 4, dtype=torch.bool)
    dot = AttentionScore("dot", 8, 8)
    torch.testing.assert_close(dot(query, keys, full), torch.softmax(keys[0] @ query[0], -1)[None])
    general = AttentionScore("general", 8, 6)
    keys6 = keys[..., :6]
    w = general.key_proj.weight  # (q_dim, k_dim)
    expected = torch.softmax(torch.stack([query[0] @ w @ k for k in keys6[0]]), -1)[None]
    torch.testing.assert_close(general(query, keys6, full), expected)
    location = AttentionScore("location", 8, 8, max_positions=10)
    expected = torch.softmax(location.position_proj(query)[0, :4], -1)[None]
    torch.testing.assert_close(location(query, keys, full), expected)
    # location scores ignore the keys entirely
    torch.testing.assert_close(location(query, torch.randn_like(keys), full), expected)


def test_location_rejects_sources_longer_than_max_positions():
    attention = AttentionScore("location", 4, 4, max_positions=8)
    with pytest.raises(ValueError, match="max_positions"):
        attention(torch.randn(1, 4), torch.randn(1, 9, 4), torch.ones(1, 9, dtype=torch.bool))


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError, match="unknown attention score"):
        AttentionScore("cosine", 4, 4)
    with pytest.raises(ValueError, match="query_dim == key_dim"):
        AttentionScore("dot", 4, 6)


def test_masked_softmax_row_without_tokens_is_zero_not_nan():
    weights = masked_softmax(torch.randn(2, 3), torch.tensor([[True, False, True], [False, False, False]]))
    assert torch.all(weights[1] == 0)
    torch.testing.assert_close(weights[0].sum(), torch.tensor(1.0))


def test_masked_softmax_gradient_is_finite_and_zero_on_padding():
    scores = torch.randn(2, 4, requires_grad=True)
    mask = torch.tensor([[True, True, False, False], [True, True, True, True]])
    (masked_softmax(scores, mask) * torch.randn(2, 4)).sum().backward()
    assert torch.isfinite(scores.grad).all()
    assert torch.all(scores.grad[~mask] == 0)


def test_gaussian_window():
    centre = torch.tensor([2.5, 0.0])  # (2,)
    in_window, gaussian = gaussian_window(centre, src_len=8, half_width=2)  # (2, 8)
    assert in_window[0].tolist() == [False, True, True, True, True, False, False, False]
    assert in_window[1].tolist() == [True, True, True, False, False, False, False, False]
    # sigma = D / 2 = 1: one sigma away gives exp(-1/2), the centre gives 1
    torch.testing.assert_close(gaussian[1, :2], torch.tensor([1.0, math.exp(-0.5)]))
    torch.testing.assert_close(gaussian[0, 4], torch.tensor(math.exp(-(1.5**2) / 2)))
