"""The Transformer encoder-decoder (Vaswani et al. 2017) with a key/value cache for decoding.

Positions (positions.py): sinusoidal, learned, relative (Shaw et al. 2018), rotary (RoPE) or ALiBi. Attention runs
through ``F.scaled_dot_product_attention`` (ALiBi's biases and the masks as one additive float mask) except where
relative position representations or returned attention weights need the explicit softmax."""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import torch
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import Tensor, nn

from mtkit.models import decoder_state
from mtkit.models.base import PAD, Seq2Seq, at_positions, dropout
from mtkit.models.decoder_state import TransformerState
from mtkit.models.positions import ALiBi, Rotary, sinusoidal_table
from mtkit.models.ssru import SSRU
from mtkit.models.sublayers import FeedForward, Residual


class MultiHeadAttention(nn.Module):
    """Self-attention (fused ``qkv``) or cross-attention (``q``, fused ``kv``), then ``out``; optional positions."""

    def __init__(
        self,
        d_model: int,
        heads: int,
        dropout: float,
        *,
        self_attention: bool,
        max_relative: int = 0,
        rotary: Optional[Rotary] = None,
        alibi: Optional[ALiBi] = None,
    ):
        super().__init__()
        self.heads, self.head_dim, self.dropout = heads, d_model // heads, dropout
        self.self_attention = self_attention
        if self_attention:
            self.qkv = nn.Linear(d_model, 3 * d_model)
        else:
            self.q = nn.Linear(d_model, d_model)
            self.kv = nn.Linear(d_model, 2 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.max_relative = max_relative
        if max_relative:
            # Shaw et al.: one learned key and value vector per clipped distance in [-k, k]
            self.rel_k = nn.Embedding(2 * max_relative + 1, self.head_dim)
            self.rel_v = nn.Embedding(2 * max_relative + 1, self.head_dim)
        self.rotary = rotary
        self.alibi = alibi

    def _split(self, x: Tensor) -> Tensor:  # (batch, len, d_model) -> (batch, heads, len, head_dim)
        b, t, _ = x.shape
        return x.view(b, t, self.heads, self.head_dim).transpose(1, 2)

    def project_self(self, x: Tensor, start: int = 0) -> tuple[Tensor, Tensor, Tensor]:
        """x (batch, len, d_model) -> q, k, v (batch, heads, len, head_dim), rotated to positions start.. (RoPE)."""
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = self._split(q), self._split(k), self._split(v)
        if self.rotary is not None:
            q, k = self.rotary(q, start), self.rotary(k, start)
        return q, k, v

    def project_memory(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """memory (batch, src_len, d_model) -> the cross-attention's k, v (batch, heads, src_len, head_dim)."""
        k, v = self.kv(memory).chunk(2, dim=-1)
        return self._split(k), self._split(v)

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        key_mask: Optional[Tensor],
        causal: bool,
        q_start: int = 0,
        need_weights: bool = False,
    ) -> tuple[Tensor, Optional[Tensor]]:
        """q (batch, heads, tq, hd) at positions q_start.., k/v (batch, heads, tk, hd), key_mask (batch, tk) True on
        real keys or None; ``causal`` hides the keys after each query. Returns the heads joined (batch, tq, d_model),
        before ``out``, and with ``need_weights`` the weights averaged over heads (batch, tq, tk), else None."""
        b, h, tq, hd = q.shape
        tk = k.size(-2)
        p = self.dropout if self.training else 0.0
        if not self.max_relative and not need_weights and (self.training or tq > 8):
            # SDPA's fused kernel wins on long queries; for the few queries of a decoding step (one position,
            # or the beams of one sentence) its set-up costs more than the plain matmul-softmax-matmul below.
            if self.alibi is not None:  # biases, padding and the causal mask in one additive float mask
                mask, is_causal = self.alibi_mask(q_start, tq, tk, key_mask, causal, q.dtype), False
            else:
                mask, is_causal = (key_mask[:, None, None, :] if key_mask is not None else None), causal and tq > 1
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=p, is_causal=is_causal)
            return out.transpose(1, 2).reshape(b, tq, h * hd), None
        scores = q @ k.transpose(-1, -2)  # (batch, heads, tq, tk)
        if self.max_relative:
            rel = self.relative_index(q_start, tq, tk, q.device)  # (tq, tk) in [0, 2k]
            rel_scores = q @ self.rel_k.weight.t()  # (batch, heads, tq, 2k+1)
            scores = scores + rel_scores.gather(-1, rel.expand(b, h, tq, tk))
        scores = scores / math.sqrt(hd)
        if self.alibi is not None:
            scores = scores + self.alibi(q_start, tq, tk).to(scores.dtype)  # after the scaling, as SDPA's mask
        if key_mask is not None:
            scores = scores.masked_fill(~key_mask[:, None, None, :], float("-inf"))
        if causal and tq > 1:
            future = torch.ones(tq, tk, dtype=torch.bool, device=q.device).triu(tk - tq + 1)
            scores = scores.masked_fill(future, float("-inf"))
        weights = scores.softmax(dim=-1)
        dropped = dropout(weights, p, self.training)
        out = dropped @ v
        if self.max_relative:
            buckets = torch.zeros(b, h, tq, 2 * self.max_relative + 1, dtype=dropped.dtype, device=q.device)
            buckets.scatter_add_(-1, rel.expand(b, h, tq, tk), dropped)
            out = out + buckets @ self.rel_v.weight.to(dropped.dtype)
        out = out.transpose(1, 2).reshape(b, tq, h * hd)
        return out, (weights.mean(dim=1) if need_weights else None)

    def alibi_mask(
        self, q_start: int, tq: int, tk: int, key_mask: Optional[Tensor], causal: bool, dtype: torch.dtype
    ) -> Tensor:
        """ALiBi's biases with -inf on padding keys and (causal) future keys: (batch or 1, heads, tq, tk)."""
        mask = self.alibi(q_start, tq, tk).to(dtype)[None]  # (1, heads, tq, tk)
        if causal and tq > 1:
            future = torch.ones(tq, tk, dtype=torch.bool, device=mask.device).triu(tk - tq + 1)
            mask = mask.masked_fill(future, float("-inf"))
        if key_mask is not None:
            mask = mask.masked_fill(~key_mask[:, None, None, :], float("-inf"))
        return mask

    def relative_index(self, q_start: int, tq: int, tk: int, device) -> Tensor:
        """(tq, tk) int64: key - query position, clipped to [-k, k] and shifted by k (rows of rel_k, rel_v)."""
        q_pos = torch.arange(q_start, q_start + tq, device=device)
        k_pos = torch.arange(tk, device=device)
        distance = (k_pos[None, :] - q_pos[:, None]).clamp(-self.max_relative, self.max_relative)
        return distance + self.max_relative


def self_attention(cfg, rotary: Optional[Rotary], alibi: Optional[ALiBi]) -> MultiHeadAttention:
    """A self-attention with the position scheme of ``cfg`` (the rotation or biases shared by all layers)."""
    rel = cfg.max_relative_distance if cfg.positions == "relative" else 0
    return MultiHeadAttention(
        cfg.d_model, cfg.heads, cfg.attention_dropout, self_attention=True, max_relative=rel, rotary=rotary, alibi=alibi
    )


class EncoderLayer(nn.Module):
    """Self-attention, then the feed-forward sublayer, each in a ``Residual``."""

    def __init__(self, cfg, rotary, alibi):
        super().__init__()
        pre = cfg.norm == "pre"
        self.attn = self_attention(cfg, rotary, alibi)
        self.ffn = FeedForward(cfg.d_model, cfg.ffn_dim, cfg.activation, cfg.activation_dropout)
        self.r1, self.r2 = Residual(cfg.d_model, cfg.dropout, pre), Residual(cfg.d_model, cfg.dropout, pre)

    def forward(self, x: Tensor, src_mask: Tensor) -> Tensor:
        """x (batch, src_len, d_model), src_mask (batch, src_len) True on real tokens -> (batch, src_len, d_model)."""
        q, k, v = self.attn.project_self(self.r1.inp(x))
        x = self.r1.add(x, self.attn.out(self.attn.attend(q, k, v, src_mask, causal=False)[0]))
        return self.r2.add(x, self.ffn(self.r2.inp(x)))


class DecoderLayer(nn.Module):
    """Causal self-attention (or an SSRU: ``model.decoder_self``), cross-attention over the encoder output,
    feed-forward (``model.decoder_ffn_dim`` wide, default ``ffn_dim``), each in a ``Residual``."""

    def __init__(self, cfg, rotary, alibi):
        super().__init__()
        pre = cfg.norm == "pre"
        self.self_attn = SSRU(cfg.d_model) if cfg.decoder_self == "ssru" else self_attention(cfg, rotary, alibi)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.heads, cfg.attention_dropout, self_attention=False)
        self.ffn = FeedForward(cfg.d_model, cfg.decoder_ffn_dim or cfg.ffn_dim, cfg.activation, cfg.activation_dropout)
        self.r1, self.r2, self.r3 = (Residual(cfg.d_model, cfg.dropout, pre) for _ in range(3))

    def forward(
        self,
        x: Tensor,
        cache_k: Optional[Tensor],
        cache_v: Optional[Tensor],
        mem_k: Tensor,
        mem_v: Tensor,
        src_mask: Tensor,
        start: int,
        need_weights: bool = False,
        group: int = 1,
    ):
        """x (rows, t, d_model) at positions start..; cache_k/v (decoding, t = 1): the time-major caches of
        decoder_state.py holding positions < start, with room for ``start`` (None in training). With
        ``group`` > 1 (decoding, t = 1) rows come in runs of ``group`` hypotheses of one sentence and mem_k, mem_v,
        src_mask hold one row per sentence (the cross-attention folds each run into its query axis: no copy per beam).
        Returns x (rows, t, d_model), the self-attention k, v up to here (with caches: views of them, written), the
        cross-attention weights or None. An SSRU keeps its state c_t (rows, 1, d_model) in the place of k and leaves
        v as it was (empty)."""
        if isinstance(self.self_attn, SSRU):
            h, k, v = *self.self_attn.run(self.r1.inp(x), cache_k), cache_v
        else:
            q, k, v = self.self_attn.project_self(self.r1.inp(x), start)
            if cache_k is not None:
                k, v = decoder_state.write(cache_k, start, k), decoder_state.write(cache_v, start, v)
            h = self.self_attn.out(self.self_attn.attend(q, k, v, None, causal=True, q_start=start)[0])
        x = self.r1.add(x, h)
        cq = self.cross_attn.q(self.r2.inp(x))  # (rows, t, d_model)
        rows, t, d = cq.shape
        if group > 1:
            cq = cq.view(rows // group, group, d)  # (sentences, group, d_model): beams become query positions
        h, weights = self.cross_attn.attend(
            self.cross_attn._split(cq), mem_k, mem_v, src_mask, causal=False, need_weights=need_weights
        )
        if group > 1:
            h = h.reshape(rows, t, d)
            weights = weights.reshape(rows, t, -1) if weights is not None else None
        x = self.r2.add(x, self.cross_attn.out(h))
        x = self.r3.add(x, self.ffn(self.r3.inp(x)))
        return x, k, v, weights


def _decoder_layer(x: Tensor, memory: Tensor, src_mask: Tensor, layer: DecoderLayer) -> Tensor:
    """One decoder layer in training, its cross-attention's keys and values included: what a checkpoint recomputes."""
    mem_k, mem_v = layer.cross_attn.project_memory(memory)
    return layer(x, None, None, mem_k, mem_v, src_mask, 0)[0]


class Transformer(Seq2Seq):
    """The Transformer of the ``model`` section ``cfg``; memory (batch, src_len, d_model); methods as in ``Seq2Seq``.

    ``checkpoint_layers`` (training.gradient_checkpointing): in training, each layer keeps only its input for the
    backward pass, which runs the layer again (``torch.utils.checkpoint``, the RNG state restored: the same dropout).
    """

    checkpoint_layers = False

    def __init__(self, cfg, src_vocab_size: int, tgt_vocab_size: int, joint_vocab: bool):
        super().__init__()
        self.cfg = cfg
        self.src_vocab_size, self.tgt_vocab_size, self.max_positions = src_vocab_size, tgt_vocab_size, cfg.max_positions
        d = cfg.d_model
        self.embed_scale = math.sqrt(d) if cfg.scale_embedding else 1.0
        self.tgt_embed = nn.Embedding(tgt_vocab_size, d, padding_idx=PAD)
        share_src = cfg.tie_embeddings and joint_vocab and src_vocab_size == tgt_vocab_size
        self.src_embed = self.tgt_embed if share_src else nn.Embedding(src_vocab_size, d, padding_idx=PAD)
        self.output = None if cfg.tie_embeddings else nn.Linear(d, tgt_vocab_size, bias=False)
        if cfg.final_logits_bias:  # fixed, as Marian's: a buffer the checkpoint carries, not a parameter
            self.register_buffer("final_logits_bias", torch.zeros(tgt_vocab_size))
        if cfg.positions == "sinusoidal":
            table = sinusoidal_table(cfg.max_positions, d, cfg.sinusoidal_layout, cfg.position_offset)
            self.register_buffer("pos_table", table, persistent=False)
        elif cfg.positions == "learned":
            self.src_pos = nn.Embedding(cfg.max_positions, d)
            self.tgt_pos = nn.Embedding(cfg.max_positions, d)
        rotary = Rotary(d // cfg.heads, cfg.max_positions) if cfg.positions == "rope" else None
        alibi = ALiBi(cfg.heads) if cfg.positions == "alibi" else None  # no embedding: biases in self-attention
        self.encoder = nn.ModuleList(EncoderLayer(cfg, rotary, alibi) for _ in range(cfg.encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(cfg, rotary, alibi) for _ in range(cfg.decoder_layers))
        pre = cfg.norm == "pre"
        self.encoder_norm = nn.LayerNorm(d) if pre else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d) if pre else nn.Identity()
        self.reset_parameters()

    def reset_parameters(self):
        """Xavier matrices, zero biases; token embeddings std d_model^-0.5 (PAD row 0); position tables N(0, 1)."""
        for name, p in self.named_parameters():
            if p.dim() > 1 and "embed" not in name and "pos" not in name and "rel_" not in name:
                nn.init.xavier_uniform_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
        for emb in {self.src_embed, self.tgt_embed}:
            nn.init.normal_(emb.weight, 0.0, self.cfg.d_model**-0.5)
            with torch.no_grad():
                emb.weight[PAD].zero_()

    @property
    def logits_bias(self) -> Optional[Tensor]:
        """The fixed bias added to the logits (tgt_vocab,), or None without ``final_logits_bias``."""
        return self._buffers.get("final_logits_bias")

    # -- pieces ---------------------------------------------------------------------------------
    def _embed(self, tokens: Tensor, table: nn.Embedding, start: int, learned: Optional[nn.Embedding]) -> Tensor:
        x = table(tokens) * self.embed_scale  # (batch, len, d_model)
        length = tokens.size(1)
        if length + start > self.max_positions:
            raise ValueError(f"sequence of {length + start} positions exceeds model.max_positions={self.max_positions}")
        if self.cfg.positions == "sinusoidal":
            x = x + self.pos_table[start : start + length].to(x.dtype)
        elif learned is not None:
            x = x + learned.weight[start : start + length].to(x.dtype)
        return dropout(x, self.cfg.dropout, self.training)

    def _logits(self, x: Tensor) -> Tensor:
        weight = self.tgt_embed.weight if self.output is None else None
        logits = self.output(x) if weight is None else F.linear(x, weight)  # (batch, len, tgt_vocab)
        return logits if self.logits_bias is None else logits + self.logits_bias.to(logits.dtype)

    # -- the interface ----------------------------------------------------------------------------
    def encode(self, src: Tensor, src_mask: Tensor) -> Tensor:
        x = self._embed(src, self.src_embed, 0, getattr(self, "src_pos", None))
        for layer in self.encoder:
            x = self._checkpointed(layer, x, src_mask) if self._recomputing() else layer(x, src_mask)
        return self.encoder_norm(x)  # (batch, src_len, d_model)

    def encode_parts(self, src: Tensor, src_mask: Tensor, sizes: Sequence[int]) -> Tensor:
        if len(sizes) <= 1 or sum(sizes) != src.size(0):
            return super().encode_parts(src, src_mask, sizes)  # one part, or the interface's error
        memory, start = None, 0
        for n in sizes:
            rows, start = slice(start, start + n), start + n
            width = int(src_mask[rows].sum(1).max())  # sources are right-padded: the part's longest
            part = self.encode(src[rows, :width], src_mask[rows, :width])  # (n, width, d_model)
            if memory is None:  # padding stays zero: the cross-attention gives it no weight
                memory = part.new_zeros(src.size(0), src.size(1), part.size(-1))
            memory[rows, :width] = part
        return memory

    def init_state(self, memory: Tensor, src_mask: Tensor) -> TransformerState:
        mem = [layer.cross_attn.project_memory(memory) for layer in self.decoder]
        b, h, hd = memory.size(0), self.cfg.heads, self.cfg.d_model // self.cfg.heads
        empty = memory.new_zeros(b, h, 0, hd)  # an SSRU's state before the first position
        cached = tuple(not isinstance(layer.self_attn, SSRU) for layer in self.decoder)
        return TransformerState(
            self_k=[decoder_state.new_cache(memory, b, self.cfg.d_model) if c else empty for c in cached],
            self_v=[decoder_state.new_cache(memory, b, self.cfg.d_model) if c else empty for c in cached],
            # laid out once here as the attention products read them (keys transposed): strided views of the fused
            # projection would be copied by every step's products, in every layer
            mem_k=[k.transpose(-1, -2).contiguous() for k, _ in mem],
            mem_v=[v.contiguous() for _, v in mem],
            src_mask=src_mask,
            row_source=torch.arange(b, device=memory.device),
            step=0,
            cached=cached,
        )

    def _output_weight(self) -> Tensor:
        """(tgt_vocab, d_model) float weights of the output projection (an int8 copy is dequantized)."""
        if self.output is None:
            return self.tgt_embed.weight
        weight = self.output.weight
        return weight().dequantize() if callable(weight) else weight

    def step_features(self, prev_tokens: Tensor, state: TransformerState, need_attention: bool = False):
        start = state.step
        state, group = state.encoder_side()
        copy = state.stepped[0]  # stepped before: its caches hold that step's position, the new one goes to copies
        state.stepped[0] = True
        state = dataclasses.replace(
            state,
            **state.map_caches(lambda c: decoder_state.with_room(c, start, copy), lambda x: x),
        )
        x = self._embed(prev_tokens[:, None], self.tgt_embed, start, getattr(self, "tgt_pos", None))
        new_k, new_v, weights = [], [], None
        last = len(self.decoder) - 1
        for i, layer in enumerate(self.decoder):
            x, k, v, w = layer(
                x,
                state.self_k[i],
                state.self_v[i],
                state.mem_k[i].transpose(-1, -2),
                state.mem_v[i],
                state.src_mask,
                start,
                need_weights=need_attention and i == last,
                group=group,
            )
            new_k.append(state.self_k[i] if state.cached[i] else k)
            new_v.append(state.self_v[i] if state.cached[i] else v)
            weights = w if w is not None else weights
        hidden = self.decoder_norm(x)[:, 0]  # (rows, d_model)
        new_state = dataclasses.replace(state, self_k=new_k, self_v=new_v, step=start + 1, stepped=[False], group=group)
        return hidden, new_state, (weights[:, 0] if weights is not None else None)

    def _decode(
        self,
        memory: Tensor,
        src_mask: Tensor,
        tgt_in: Tensor,
        need_attention: bool = False,
        keep: Optional[Tensor] = None,
    ) -> tuple[Tensor, Optional[Tensor]]:
        """Teacher-forced decoder over the whole target prefix: (inputs of the output layer, last-layer
        cross-attention). With ``keep`` (batch, tgt_len) bool, the features only there: (tokens, d_model)."""
        x = self._embed(tgt_in, self.tgt_embed, 0, getattr(self, "tgt_pos", None))
        last, weights = len(self.decoder) - 1, None
        if self._recomputing() and not need_attention:
            for layer in self.decoder:
                x = self._checkpointed(_decoder_layer, x, memory, src_mask, layer)
            return self.decoder_norm(x if keep is None else at_positions(x, keep)), None
        for i, layer in enumerate(self.decoder):
            mem_k, mem_v = layer.cross_attn.project_memory(memory)
            x, _, _, w = layer(x, None, None, mem_k, mem_v, src_mask, 0, need_weights=need_attention and i == last)
            weights = w if w is not None else weights
        return self.decoder_norm(x if keep is None else at_positions(x, keep)), weights

    def _recomputing(self) -> bool:
        return self.checkpoint_layers and self.training and torch.is_grad_enabled()

    @staticmethod
    def _checkpointed(function, *args):
        return torch.utils.checkpoint.checkpoint(function, *args, use_reentrant=False, preserve_rng_state=True)

    def decode_full(
        self, memory: Tensor, src_mask: Tensor, tgt_in: Tensor, need_attention: bool = False
    ) -> tuple[Tensor, Optional[Tensor]]:
        """Teacher-forced decoding without a cache: (logits (batch, tgt_len, vocab), last-layer cross-attention)."""
        hidden, weights = self._decode(memory, src_mask, tgt_in, need_attention)
        return self.project(hidden), weights

    def features(self, src: Tensor, tgt_in: Tensor, keep: Optional[Tensor] = None) -> Tensor:
        src_mask = src.ne(PAD)
        return self._decode(self.encode(src, src_mask), src_mask, tgt_in, keep=keep)[0]

    def project(self, hidden: Tensor, ids: Optional[Tensor] = None) -> Tensor:
        if ids is None:
            return self._logits(hidden)  # (..., tgt_vocab)
        weight, bias = self.output_rows(ids)  # (columns, d_model), (columns,) or None
        return F.linear(hidden.to(weight.dtype), weight, None if bias is None else bias.to(weight.dtype))

    def output_rows(self, ids: Tensor) -> tuple[Tensor, Optional[Tensor]]:
        bias = None if self.logits_bias is None else self.logits_bias.index_select(0, ids)
        return self._output_weight().index_select(0, ids), bias

    def output_projection(self) -> tuple[Tensor, Optional[Tensor]]:
        return (self.tgt_embed.weight if self.output is None else self.output.weight), self.logits_bias
