"""The simpler simple recurrent unit (SSRU) of Kim et al. (2019), "From Research to Production and Back: Ludicrously
Fast Neural Machine Translation", which takes the place of a Transformer decoder layer's self-attention
(``model.decoder_self: ssru``):

    f_t = sigmoid(W_f x_t + b_f)
    c_t = f_t * c_{t-1} + (1 - f_t) * W x_t          (c_0 = 0)
    o_t = relu(c_t)

Training runs the recurrence over the whole target prefix, one position after the other; decoding keeps c_t as the
layer's state, so a step costs two products with the layer's input whatever the position, where self-attention
reads every earlier position. The recurrence is computed in float32 whatever the input's dtype.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor, nn


class SSRU(nn.Module):
    """One SSRU: the forget gate ``forget`` (W_f, b_f) and the input projection ``input`` (W, no bias).

    Args:
        d_model: the width of the inputs, the state and the outputs.
    """

    def __init__(self, d_model: int):
        super().__init__()
        self.forget = nn.Linear(d_model, d_model)
        self.input = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: Tensor, state: Optional[Tensor] = None) -> tuple[Tensor, Tensor]:
        """Run the recurrence over the positions of ``x``.

        Args:
            x: (rows, t, d_model) the layer's inputs.
            state: (rows, d_model) c before the first position of ``x``; None: zeros (the first position).

        Returns:
            (outputs, state): relu(c) at every position (rows, t, d_model), in the dtype of ``x``; c at the last
            position (rows, d_model), float32.
        """
        gate = torch.sigmoid(self.forget(x).float())  # (rows, t, d_model)
        update = (1.0 - gate) * self.input(x).float()
        c = state if state is not None else gate.new_zeros(x.size(0), x.size(2))
        cells = []
        for t in range(x.size(1)):
            c = gate[:, t] * c + update[:, t]
            cells.append(c)
        outputs = torch.stack(cells, dim=1) if cells else update
        return torch.relu(outputs).to(x.dtype), c

    def run(self, x: Tensor, cache: Optional[Tensor]) -> tuple[Tensor, Tensor]:
        """The decoder layer's call: ``forward`` with the state kept where a self-attention keeps its keys.

        Args:
            x: (rows, t, d_model) the layer's inputs.
            cache: (rows, 1, d_model) c before the first position of ``x``; None or an empty tensor (no position
                decoded yet): zeros.

        Returns:
            (outputs (rows, t, d_model), the new cache (rows, 1, d_model)).
        """
        state = None if cache is None or cache.numel() == 0 else cache[:, 0]
        outputs, c = self.forward(x, state)
        return outputs, c[:, None]
