"""The sublayers around a Transformer's attention: the position-wise feed-forward network and the residual connection
with its LayerNorm (before or after the sublayer)."""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from mtkit.models.base import dropout


class FeedForward(nn.Module):
    """The position-wise feed-forward sublayer: fc2(dropout(activation(fc1(x))))."""

    def __init__(self, d_model: int, ffn_dim: int, activation: str, activation_dropout: float):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d_model, ffn_dim), nn.Linear(ffn_dim, d_model)
        self.activation = {"relu": F.relu, "gelu": F.gelu, "swish": F.silu}[activation]
        self.activation_dropout = activation_dropout

    def forward(self, x: Tensor) -> Tensor:
        """x (..., d_model) -> (..., d_model)."""
        hidden = dropout(self.activation(self.fc1(x)), self.activation_dropout, self.training)
        return self.fc2(hidden)


class Residual(nn.Module):
    """x + dropout(sublayer(.)) with LayerNorm before (pre) or after (post) it: ``add(x, sublayer(inp(x)))``."""

    def __init__(self, d_model: int, dropout: float, pre_norm: bool):
        super().__init__()
        self.norm, self.dropout, self.pre_norm = nn.LayerNorm(d_model), dropout, pre_norm

    def inp(self, x: Tensor) -> Tensor:
        return self.norm(x) if self.pre_norm else x

    def add(self, x: Tensor, y: Tensor) -> Tensor:
        x = x + dropout(y, self.dropout, self.training)
        return x if self.pre_norm else self.norm(x)
