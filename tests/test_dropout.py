"""models.base.dropout: PyTorch's dropout with a cheaper CPU mask (four 16-bit lanes per 64-bit random word)."""

import pytest
import torch

from mtkit.models.base import Dropout, dropout


@pytest.mark.parametrize("p", [0.1, 0.3, 0.5])
def test_drops_at_rate_p_and_keeps_the_expectation(p):
    torch.manual_seed(0)
    x = torch.full((1001, 999), 2.0)  # odd sizes: the last 64-bit word is partly used
    out = dropout(x, p, True)
    dropped = out.eq(0)
    assert abs(dropped.float().mean().item() - p) < 0.003  # 1M draws: the standard error is < 0.0005
    scale = 65536 / (65536 - round(p * 65536))
    assert torch.equal(out[~dropped], torch.full_like(out[~dropped], 2.0 * scale))
    assert abs(out.mean().item() - 2.0) < 0.01


def test_identity_when_not_training_or_p_is_zero():
    x = torch.randn(7, 5)
    assert dropout(x, 0.3, False) is x and dropout(x, 0.0, True) is x
    assert dropout(x, 1.0, True).eq(0).all()


def test_masks_follow_the_seed_and_differ_between_calls():
    x = torch.ones(64, 64)
    torch.manual_seed(3)
    a, b = dropout(x, 0.2, True), dropout(x, 0.2, True)
    torch.manual_seed(3)
    assert torch.equal(dropout(x, 0.2, True), a) and not torch.equal(a, b)


def test_gradient_is_the_mask_times_the_scale():
    torch.manual_seed(1)
    x = torch.randn(50, 40, requires_grad=True)
    out = dropout(x, 0.25, True)
    out.sum().backward()
    kept = out.detach().ne(0)
    assert torch.equal(x.grad, kept.float() * (65536 / (65536 - 16384)))


def test_module_follows_train_and_eval():
    layer, x = Dropout(0.5), torch.ones(100, 100)
    assert layer(x).eq(0).any()
    layer.eval()
    assert layer(x) is x
