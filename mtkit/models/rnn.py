"""The RNN encoder-decoders: Bahdanau et al. (2015) and Luong et al. (2015).

Both follow the Seq2Seq interface of ``base.py``. Their decoder states are dataclasses holding
batch-first tensors only (recurrent state as ``(batch, layers, hidden)``, transposed when nn.LSTM is
called), together with the encoder memory, its precomputed key projection and the source mask, so
``State.reorder`` works without model-specific code.

``forward`` (teacher forcing) runs the same per-position computation as repeated ``step`` calls; only
the parts that do not feed back into the recurrence (deep output, output projection, and, for Luong
without input feeding, the whole decoder LSTM and attention) are batched over time.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Optional

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from mtkit.models.attention import AttentionScore, gaussian_window
from mtkit.models.base import PAD, Dropout, Seq2Seq, State, at_positions, src_mask_of, weight_rows


def _make_embeddings(cfg, src_vocab_size: int, tgt_vocab_size: int, joint_vocab: bool):
    """Source and target embeddings; one shared module when tying over a joint vocabulary."""
    tgt_embed = nn.Embedding(tgt_vocab_size, cfg.embed_dim, padding_idx=PAD)
    if cfg.tie_embeddings and joint_vocab:
        if src_vocab_size != tgt_vocab_size:
            raise ValueError(
                f"joint_vocab with tie_embeddings needs equal vocabulary sizes "
                f"(source {src_vocab_size}, target {tgt_vocab_size})"
            )
        return tgt_embed, tgt_embed
    return nn.Embedding(src_vocab_size, cfg.embed_dim, padding_idx=PAD), tgt_embed


def _init_parameters(model: nn.Module, init_range: float) -> None:
    """Every parameter uniform in [-init_range, init_range] (Luong et al. 2015: 0.1); 0 keeps PyTorch's
    own initialisation (embeddings N(0, 1), LSTM / GRU / Linear uniform in +-1/sqrt(fan_in))."""
    if init_range > 0:
        for param in model.parameters():
            nn.init.uniform_(param, -init_range, init_range)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, nn.Embedding) and module.padding_idx is not None:
                module.weight[module.padding_idx].zero_()


def _run_packed(rnn: nn.RNNBase, embedded: Tensor, src_mask: Tensor):
    """Run ``rnn`` over the real tokens only (right-padded input), so padding cannot change results.

    embedded (batch, src_len, embed_dim) -> outputs (batch, src_len, directions * hidden), zero on padding,
    and the final state(s) as nn.GRU / nn.LSTM return them.
    """
    lengths = src_mask.sum(dim=1).clamp(min=1).cpu()  # (batch,)
    packed = pack_padded_sequence(embedded, lengths, batch_first=True, enforce_sorted=False)
    outputs, final = rnn(packed)
    outputs, _ = pad_packed_sequence(outputs, batch_first=True, total_length=embedded.size(1))
    return outputs, final


# -------------------------------------------------------------------------------------------- Bahdanau
@dataclasses.dataclass
class BahdanauState(State):
    """Bahdanau's decoder state, every field batch-first."""

    hidden: Tensor  # (batch, hidden_size): s_{t-1}
    annotations: Tensor  # (batch, src_len, 2 * hidden_size): h_j = [forward; backward]
    keys: Tensor  # (batch, src_len, hidden_size): W_k h_j + b, computed once per sentence
    src_mask: Tensor  # (batch, src_len) bool


class Bahdanau(Seq2Seq):
    """RNNsearch (Bahdanau, Cho & Bengio, 2015).

    Encoder: bidirectional GRU (``encoder_layers`` layers) over packed sequences; annotation
    h_j = [forward_j; backward_j] of the top layer. Decoder: one GRU whose additive attention scores the
    previous state s_{t-1} against every h_j; the context c_t and the embedded previous token y_{t-1}
    are the GRU input; a maxout deep-output layer sees s_t, c_t and E y_{t-1}. s_0 = tanh(W_s backward_1).

    Args:
        cfg: the config's ``model`` section.
        src_vocab_size: the source vocabulary size.
        tgt_vocab_size: the target vocabulary size.
        joint_vocab: source and target share one vocabulary; with ``tie_embeddings`` the source embedding is then
            the target's (the output layer's weight is the target embedding whenever ``tie_embeddings`` is set).

    Raises:
        ValueError: ``tie_embeddings`` over a joint vocabulary whose two sizes differ.
    """

    def __init__(self, cfg, src_vocab_size: int, tgt_vocab_size: int, joint_vocab: bool):
        super().__init__()
        self.src_vocab_size = src_vocab_size
        self.tgt_vocab_size = tgt_vocab_size
        self.max_positions = cfg.max_positions
        embed_dim, hidden = cfg.embed_dim, cfg.hidden_size
        self.hidden_size = hidden

        self.src_embed, self.tgt_embed = _make_embeddings(cfg, src_vocab_size, tgt_vocab_size, joint_vocab)
        self.dropout = Dropout(cfg.dropout)
        self.encoder = nn.GRU(
            embed_dim,
            hidden,
            num_layers=cfg.encoder_layers,
            batch_first=True,
            bidirectional=True,
            dropout=cfg.dropout if cfg.encoder_layers > 1 else 0.0,
        )
        self.init_proj = nn.Linear(hidden, hidden)  # W_s
        self.attention = AttentionScore("additive", hidden, 2 * hidden, hidden=hidden)
        self.decoder = nn.GRUCell(embed_dim + 2 * hidden, hidden)
        # maxout deep output: [s_t; c_t; E y_{t-1}] -> 2 * embed_dim, max over pairs -> embed_dim
        self.readout = nn.Linear(hidden + 2 * hidden + embed_dim, 2 * embed_dim)
        self.out_proj = nn.Linear(embed_dim, tgt_vocab_size)
        _init_parameters(self, cfg.param_init)
        if cfg.tie_embeddings:
            self.out_proj.weight = self.tgt_embed.weight

    # ------------------------------------------------------------------------------------ interface
    def encode(self, src: Tensor, src_mask: Tensor) -> Tensor:
        """Run the bidirectional encoder over the real tokens.

        Args:
            src: (batch, src_len) source ids.
            src_mask: (batch, src_len) bool, True on real tokens.

        Returns:
            The annotations (batch, src_len, 2 * hidden_size), zero on padding.
        """
        embedded = self.dropout(self.src_embed(src))  # (batch, src_len, embed_dim)
        annotations, _ = _run_packed(self.encoder, embedded, src_mask)
        return annotations

    def init_state(self, memory: Tensor, src_mask: Tensor) -> BahdanauState:
        """s_0 = tanh(W_s backward_1) and the attention's key projection, computed once.

        Args:
            memory: the annotations ``encode`` returned.
            src_mask: (batch, src_len) bool, True on real tokens.

        Returns:
            The state before the first target position.
        """
        first_backward = memory[:, 0, self.hidden_size :]  # (batch, hidden): backward RNN at position 1
        hidden = torch.tanh(self.init_proj(first_backward))  # (batch, hidden)
        keys = self.attention.precompute(memory)  # (batch, src_len, hidden)
        return BahdanauState(hidden=hidden, annotations=memory, keys=keys, src_mask=src_mask)

    def step_features(self, prev_tokens: Tensor, state: BahdanauState, need_attention: bool = False):
        """``Seq2Seq.step_features``; hidden is the maxout output (batch, embed_dim)."""
        embedded = self.dropout(self.tgt_embed(prev_tokens))  # (batch, embed_dim)
        hidden, context, weights = self._recur(embedded, state)
        features = self._maxout(hidden, context, embedded)  # (batch, embed_dim)
        new_state = dataclasses.replace(state, hidden=hidden)
        return features, new_state, (weights if need_attention else None)

    def features(self, src: Tensor, tgt_in: Tensor, keep: Optional[Tensor] = None) -> Tensor:
        """``Seq2Seq.features``: the GRU one position at a time, then the maxout over all: (..., embed_dim)."""
        src_mask = src_mask_of(src)
        state = self.init_state(self.encode(src, src_mask), src_mask)
        embedded = self.dropout(self.tgt_embed(tgt_in))  # (batch, tgt_len, embed_dim)
        hiddens, contexts = [], []
        for t in range(tgt_in.size(1)):
            hidden, context, _ = self._recur(embedded[:, t], state)
            state = dataclasses.replace(state, hidden=hidden)
            hiddens.append(hidden)
            contexts.append(context)
        hiddens = torch.stack(hiddens, dim=1)  # (batch, tgt_len, hidden)
        contexts = torch.stack(contexts, dim=1)  # (batch, tgt_len, 2 * hidden)
        if keep is not None:  # only the positions the loss needs: (tokens, ...)
            hiddens, contexts, embedded = (at_positions(x, keep) for x in (hiddens, contexts, embedded))
        return self._maxout(hiddens, contexts, embedded)  # (batch, tgt_len, embed_dim) or (tokens, embed_dim)

    def project(self, hidden: Tensor, ids: Optional[Tensor] = None) -> Tensor:
        """``Seq2Seq.project``: ``out_proj``, or only its rows ``ids``."""
        return self.out_proj(hidden) if ids is None else F.linear(hidden, *self.output_rows(ids))

    def output_rows(self, ids: Tensor) -> tuple[Tensor, Optional[Tensor]]:
        """``Seq2Seq.output_rows``: the rows ``ids`` of ``out_proj``."""
        return weight_rows(self.out_proj, ids)

    def output_projection(self) -> tuple[Tensor, Optional[Tensor]]:
        """``Seq2Seq.output_projection``: ``out_proj``'s weight and bias."""
        return self.out_proj.weight, self.out_proj.bias

    # ------------------------------------------------------------------------------------- helpers
    def _recur(self, embedded: Tensor, state: BahdanauState):
        """One recurrent step: attention on s_{t-1}, then the GRU. embedded (batch, embed_dim)."""
        weights = self.attention(state.hidden, state.annotations, state.src_mask, state.keys)  # (batch, src_len)
        context = torch.bmm(weights.unsqueeze(1), state.annotations).squeeze(1)  # (batch, 2 * hidden)
        hidden = self.decoder(torch.cat([embedded, context], dim=-1), state.hidden)  # (batch, hidden)
        return hidden, context, weights

    def _maxout(self, hidden: Tensor, context: Tensor, embedded: Tensor) -> Tensor:
        """Maxout deep output over any leading shape (...,) -> the input of the output layer (..., embed_dim)."""
        pre = self.readout(torch.cat([hidden, context, embedded], dim=-1))  # (..., 2 * embed_dim)
        return self.dropout(pre.unflatten(-1, (-1, 2)).amax(dim=-1))  # (..., embed_dim)


# ----------------------------------------------------------------------------------------------- Luong
class LuongMemory(NamedTuple):
    """What Luong's encoder returns, batch-first."""

    outputs: Tensor  # (batch, src_len, hidden_size): top-layer encoder states h_s, zero on padding
    hidden: Tensor  # (batch, layers, hidden_size): final h of each layer at the real last token
    cell: Tensor  # (batch, layers, hidden_size): final c of each layer


@dataclasses.dataclass
class LuongState(State):
    """Luong's decoder state, every field batch-first."""

    hidden: Tensor  # (batch, layers, hidden_size)
    cell: Tensor  # (batch, layers, hidden_size)
    input_feed: Optional[Tensor]  # (batch, hidden_size): h~_{t-1}; None without input feeding
    memory: Tensor  # (batch, src_len, hidden_size)
    keys: Optional[Tensor]  # (batch, src_len, ...): precomputed key projection (general, concat) or None
    src_mask: Tensor  # (batch, src_len) bool
    src_lengths: Tensor  # (batch,) float: S, the real source length (local-p)


_LUONG_SCORES = {"dot": "dot", "general": "general", "concat": "additive", "location": "location"}


class Luong(Seq2Seq):
    """Global / local-p attention NMT (Luong, Pham & Manning, 2015).

    Stacked LSTM encoder and decoder (``layers`` each; the decoder starts from the encoder's final
    states). The paper's encoder reads left to right; ``encoder: bidirectional`` runs hidden_size / 2
    units each way and concatenates them (outputs and, per layer, the final h and c), so memory and
    decoder keep hidden_size, as OpenNMT-py's brnn encoder does. Attention scores the current top
    decoder state h_t (dot, general, concat, location); h~_t = tanh(W_c [c_t; h_t]) predicts the next
    token and, with ``input_feeding``, is concatenated to the next input embedding. Local-p:
    p_t = S sigmoid(v_p^T tanh(W_p h_t)); the alignment is a softmax over the real tokens within
    [p_t - D, p_t + D], multiplied by exp(-(s - p_t)^2 / (2 (D/2)^2)) as in the paper (so those
    weights sum to at most 1).

    Args:
        cfg: the config's ``model`` section.
        src_vocab_size: the source vocabulary size.
        tgt_vocab_size: the target vocabulary size.
        joint_vocab: source and target share one vocabulary; with ``tie_embeddings`` the source embedding is then
            the target's (the output layer's weight is the target embedding whenever ``tie_embeddings`` is set).

    Raises:
        ValueError: ``tie_embeddings`` over a joint vocabulary whose two sizes differ.
    """

    def __init__(self, cfg, src_vocab_size: int, tgt_vocab_size: int, joint_vocab: bool):
        super().__init__()
        self.src_vocab_size = src_vocab_size
        self.tgt_vocab_size = tgt_vocab_size
        self.max_positions = cfg.max_positions
        embed_dim, hidden = cfg.embed_dim, cfg.hidden_size
        self.hidden_size = hidden
        self.layers = cfg.layers
        self.input_feeding = cfg.input_feeding
        self.local = cfg.attention == "local_p"
        self.window = cfg.window
        lstm_dropout = cfg.dropout if cfg.layers > 1 else 0.0

        self.src_embed, self.tgt_embed = _make_embeddings(cfg, src_vocab_size, tgt_vocab_size, joint_vocab)
        self.dropout = Dropout(cfg.dropout)
        self.bidirectional = cfg.encoder == "bidirectional"
        self.encoder = nn.LSTM(
            embed_dim,
            hidden // 2 if self.bidirectional else hidden,
            num_layers=cfg.layers,
            batch_first=True,
            dropout=lstm_dropout,
            bidirectional=self.bidirectional,
        )
        decoder_input = embed_dim + (hidden if cfg.input_feeding else 0)
        self.decoder = nn.LSTM(decoder_input, hidden, num_layers=cfg.layers, batch_first=True, dropout=lstm_dropout)
        self.attention = AttentionScore(
            _LUONG_SCORES[cfg.score], hidden, hidden, hidden=hidden, max_positions=cfg.max_positions
        )
        if self.local:
            self.position_hidden = nn.Linear(hidden, hidden, bias=False)  # W_p
            self.position_score = nn.Linear(hidden, 1, bias=False)  # v_p
        self.combine = nn.Linear(2 * hidden, hidden, bias=False)  # W_c
        tied = cfg.tie_embeddings
        # with tied embeddings the output matrix is (vocab, embed_dim): bring h~ to embed_dim first
        self.pre_output = nn.Linear(hidden, embed_dim, bias=False) if tied and hidden != embed_dim else nn.Identity()
        self.out_proj = nn.Linear(embed_dim if tied else hidden, tgt_vocab_size)
        _init_parameters(self, cfg.param_init)
        if tied:
            self.out_proj.weight = self.tgt_embed.weight

    # ------------------------------------------------------------------------------------ interface
    def encode(self, src: Tensor, src_mask: Tensor) -> LuongMemory:
        """Run the LSTM encoder over the real tokens.

        Args:
            src: (batch, src_len) source ids.
            src_mask: (batch, src_len) bool, True on real tokens.

        Returns:
            The top layer's outputs (batch, src_len, hidden_size), zero on padding, and each layer's final h and c
            (batch, layers, hidden_size); a bidirectional encoder's are its two directions concatenated.
        """
        embedded = self.dropout(self.src_embed(src))  # (batch, src_len, embed_dim)
        outputs, (h_n, c_n) = _run_packed(self.encoder, embedded, src_mask)  # outputs: (batch, src_len, hidden)
        return LuongMemory(outputs, self._per_layer(h_n), self._per_layer(c_n))

    def init_state(self, memory: LuongMemory, src_mask: Tensor) -> LuongState:
        """The decoder starts from the encoder's final states, with h~_0 = 0 when input feeding.

        Args:
            memory: what ``encode`` returned.
            src_mask: (batch, src_len) bool, True on real tokens.

        Returns:
            The state before the first target position (with the attention's key projection, computed once).
        """
        batch = src_mask.size(0)
        input_feed = memory.outputs.new_zeros(batch, self.hidden_size) if self.input_feeding else None
        return LuongState(
            hidden=memory.hidden,
            cell=memory.cell,
            input_feed=input_feed,
            memory=memory.outputs,
            keys=self.attention.precompute(memory.outputs),
            src_mask=src_mask,
            src_lengths=src_mask.sum(dim=1).to(memory.outputs.dtype),
        )

    def step_features(self, prev_tokens: Tensor, state: LuongState, need_attention: bool = False):
        """``Seq2Seq.step_features``; hidden is h~_t (batch, hidden_size), or (batch, embed_dim) when tied."""
        embedded = self.dropout(self.tgt_embed(prev_tokens))  # (batch, embed_dim)
        attentional, weights, state = self._recur(embedded, state)
        return self.pre_output(attentional), state, (weights if need_attention else None)  # (batch, out_dim)

    def features(self, src: Tensor, tgt_in: Tensor, keep: Optional[Tensor] = None) -> Tensor:
        """``Seq2Seq.features``; without input feeding the decoder runs over all positions in one call."""
        src_mask = src_mask_of(src)
        state = self.init_state(self.encode(src, src_mask), src_mask)
        embedded = self.dropout(self.tgt_embed(tgt_in))  # (batch, tgt_len, embed_dim)
        if self.input_feeding:
            # h~_{t-1} enters the next input: the decoder must run one position at a time
            outputs = []
            for t in range(tgt_in.size(1)):
                attentional, _, state = self._recur(embedded[:, t], state)
                outputs.append(attentional)
            attentional = torch.stack(outputs, dim=1)  # (batch, tgt_len, hidden)
        else:
            # nothing feeds back: the LSTM and the attention run over all positions at once
            top, _ = self.decoder(embedded, self._lstm_state(state))  # (batch, tgt_len, hidden)
            attentional, _ = self._attend(top, state)  # (batch, tgt_len, hidden)
        if keep is not None:  # only the positions the loss needs
            attentional = at_positions(attentional, keep)  # (tokens, hidden)
        return self.pre_output(attentional)  # (batch, tgt_len, out_dim) or (tokens, out_dim)

    def project(self, hidden: Tensor, ids: Optional[Tensor] = None) -> Tensor:
        """``Seq2Seq.project``: ``out_proj``, or only its rows ``ids``."""
        return self.out_proj(hidden) if ids is None else F.linear(hidden, *self.output_rows(ids))

    def output_rows(self, ids: Tensor) -> tuple[Tensor, Optional[Tensor]]:
        """``Seq2Seq.output_rows``: the rows ``ids`` of ``out_proj``."""
        return weight_rows(self.out_proj, ids)

    def output_projection(self) -> tuple[Tensor, Optional[Tensor]]:
        """``Seq2Seq.output_projection``: ``out_proj``'s weight and bias."""
        return self.out_proj.weight, self.out_proj.bias

    # ------------------------------------------------------------------------------------- helpers
    def _per_layer(self, final: Tensor) -> Tensor:
        """nn.LSTM's final h or c, (layers * directions, batch, units) -> (batch, layers, hidden)."""
        if self.bidirectional:  # layer-major, forward then backward: join the two halves of each layer
            final = final.unflatten(0, (self.layers, 2))  # (layers, 2, batch, hidden / 2)
            final = torch.cat([final[:, 0], final[:, 1]], dim=-1)  # (layers, batch, hidden)
        return final.transpose(0, 1)

    @staticmethod
    def _lstm_state(state: LuongState) -> tuple[Tensor, Tensor]:
        """Batch-first (batch, layers, hidden) -> nn.LSTM's (layers, batch, hidden)."""
        return state.hidden.transpose(0, 1).contiguous(), state.cell.transpose(0, 1).contiguous()

    def _recur(self, embedded: Tensor, state: LuongState):
        """One decoder position. embedded (batch, embed_dim) -> h~_t (batch, hidden), weights, new state."""
        if self.input_feeding:
            embedded = torch.cat([embedded, state.input_feed], dim=-1)  # (batch, embed_dim + hidden)
        top, (h_n, c_n) = self.decoder(embedded.unsqueeze(1), self._lstm_state(state))  # top: (batch, 1, hidden)
        attentional, weights = self._attend(top.squeeze(1), state)
        new_state = dataclasses.replace(
            state,
            hidden=h_n.transpose(0, 1),
            cell=c_n.transpose(0, 1),
            input_feed=attentional if self.input_feeding else None,
        )
        return attentional, weights, new_state

    def _attend(self, query: Tensor, state: LuongState) -> tuple[Tensor, Tensor]:
        """query h_t (batch, hidden) or (batch, tgt_len, hidden) -> (h~_t, attention weights over src)."""
        if self.local:
            weights = self._local_weights(query, state)
        else:
            weights = self.attention(query, state.memory, state.src_mask, state.keys)  # (batch, [tgt_len,] src_len)
        if query.dim() == 2:
            context = torch.bmm(weights.unsqueeze(1), state.memory).squeeze(1)  # (batch, hidden)
        else:
            context = torch.bmm(weights, state.memory)  # (batch, tgt_len, hidden)
        attentional = torch.tanh(self.combine(torch.cat([context, query], dim=-1)))  # h~_t, like query
        # one dropout mask serves both uses of h~_t: the output layer and the next input (input feeding)
        return self.dropout(attentional), weights

    def _local_weights(self, query: Tensor, state: LuongState) -> Tensor:
        """Local-p alignment: softmax within the window around p_t and the real tokens, times a Gaussian."""
        gate = torch.sigmoid(self.position_score(torch.tanh(self.position_hidden(query)))).squeeze(-1)
        extra = (1,) * (gate.dim() - 1)  # broadcast per-sentence values over tgt_len, if present
        centre = gate * state.src_lengths.view(-1, *extra)  # p_t: (batch,) or (batch, tgt_len)
        src_len = state.memory.size(1)
        in_window, gaussian = gaussian_window(centre, src_len, self.window)  # (..., src_len)
        mask = in_window & state.src_mask.view(state.src_mask.size(0), *extra, src_len)
        return self.attention(query, state.memory, mask, state.keys) * gaussian
