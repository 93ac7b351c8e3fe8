"""The model files of `mtkit export --format web`: a run's Transformer as the two ONNX graphs transformers.js runs
(computed by mtkit's own modules: pre-norm or post-norm, sinusoidal or learned positions), and its SentencePiece model
as a ``tokenizer.json``.

- ``encoder_model.onnx``: ``input_ids``, ``attention_mask`` -> ``last_hidden_state``.
- ``decoder_model_merged.onnx``: ``input_ids``, ``encoder_attention_mask``, ``encoder_hidden_states`` and
  ``past_key_values.{i}.{decoder|encoder}.{key|value}`` -> ``logits`` and ``present.*``, the names and shapes
  transformers.js feeds and reads. One graph serves the first step and every later one without a branch: the first
  step gets empty caches (length 0), and the cross-attention projects only the encoder states past its cache, which
  is all of them at the first step and none later, so a step never projects them again.
- mtkit's greedy search lives in the decoder's logits, so that transformers.js' plain greedy search (num_beams 1)
  makes the same choices: PAD and the decoder's start token are never chosen, and a sentence at its length limit,
  ``min(ceil(max_len_a * source_length + max_len_b), max_positions - 1)`` output tokens (EOS excluded, the source
  counted with its EOS), can only end (``decoding.limits``); transformers.js knows no limit that grows with the
  source. A row that has ended gives EOS again (transformers.js steps every row of a batch until the last ends).
- ``tokenizer.json`` is written as JSON (no ``tokenizers`` package needed): SentencePiece's normalisation (its
  precompiled character map, whitespace stripped and runs of spaces folded), a Metaspace pre-tokenizer and decoder,
  the model (Unigram with the pieces' scores, or BPE with merges ranked as SentencePiece ranks its pieces) and
  ``</s>`` after every source; special tokens (and a multilingual run's language tokens) decode to no text.
"""

from __future__ import annotations

import base64
import json
import math
import struct
from pathlib import Path
from typing import Optional

import torch
from torch import Tensor, nn

from mtkit.decoding.limits import max_lengths
from mtkit.interop import protobuf_wire
from mtkit.tokenizer import BOS, EOS, PAD

NEG = -1.0e9  # the logit of a token the search may not choose (a finite value: softmax over it stays exact)
OPSET = 17

# SentencePiece's ModelProto: pieces (1), trainer_spec (2), normalizer_spec (3); a piece's piece (1), score (2),
# type (3); the trainer's model_type (3: 1 unigram, 2 bpe); the normalizer's precompiled_charsmap (2),
# add_dummy_prefix (3), remove_extra_whitespaces (4)
SPM_TRAINER, SPM_NORMALIZER, SPM_SCORE = 2, 3, 2
TRAINER_MODEL_TYPE, NORM_CHARSMAP, NORM_DUMMY_PREFIX, NORM_EXTRA_SPACES = 3, 2, 3, 4
UNIGRAM, BPE = 1, 2
NORMAL_PIECE, UNKNOWN_PIECE, USER_DEFINED_PIECE = 1, 2, 4


# ------------------------------------------------------------------------------------------ the graphs
def _attend(q: Tensor, k: Tensor, v: Tensor, bias: Tensor) -> Tensor:
    """q (batch, heads, tq, hd), k/v (batch, heads, tk, hd), bias broadcast to (batch, heads, tq, tk) -> (batch, tq,
    heads * hd): the plain matmul-softmax-matmul of mtkit's decoding steps."""
    scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(q.shape[-1]) + bias
    out = torch.matmul(torch.softmax(scores, dim=-1), v)
    return out.transpose(1, 2).reshape(out.shape[0], out.shape[2], out.shape[1] * out.shape[3])


class _Heads:
    """Splits (batch, len, d_model) into (batch, heads, len, head_dim) with the sizes as constants of the graph."""

    def __init__(self, heads: int, head_dim: int):
        self.heads, self.head_dim = heads, head_dim

    def __call__(self, x: Tensor) -> Tensor:
        return x.reshape(x.shape[0], x.shape[1], self.heads, self.head_dim).transpose(1, 2)


def _positions(model, side: str) -> Optional[Tensor]:
    """The table added to the embeddings of ``side`` (src, tgt): sinusoids (any layout and offset) or learned rows."""
    if model.cfg.positions == "sinusoidal":
        return model.pos_table
    return getattr(model, f"{side}_pos").weight


class Encoder(nn.Module):
    """mtkit's encoder (``Transformer.encode``): ``(input_ids, attention_mask) -> last_hidden_state``."""

    def __init__(self, model):
        super().__init__()
        self.model = model
        self.split = _Heads(model.cfg.heads, model.cfg.d_model // model.cfg.heads)

    def forward(self, input_ids: Tensor, attention_mask: Tensor) -> Tensor:
        model = self.model
        x = model.src_embed.weight[input_ids] * model.embed_scale + _positions(model, "src")[: input_ids.shape[1]]
        bias = (1.0 - attention_mask[:, None, None, :].float()) * NEG  # (batch, 1, 1, src_len)
        for layer in model.encoder:
            q, k, v = layer.attn.qkv(layer.r1.inp(x)).chunk(3, dim=-1)
            x = layer.r1.add(x, layer.attn.out(_attend(self.split(q), self.split(k), self.split(v), bias)))
            x = layer.r2.add(x, layer.ffn(layer.r2.inp(x)))
        return model.encoder_norm(x)


class Decoder(nn.Module):
    """mtkit's decoder with its caches, and mtkit's search rules in its logits (the module's docstring).

    Args:
        model: the mtkit Transformer.
        limits: (max_len_a, max_len_b, cap): the output length limit, ``decoding.limits.max_lengths``.
        forced_first: the token the first output must be (a multilingual run's language token), or None.
    """

    def __init__(self, model, limits: tuple, forced_first: Optional[int] = None):
        super().__init__()
        self.model = model
        self.split = _Heads(model.cfg.heads, model.cfg.d_model // model.cfg.heads)
        vocab = model.tgt_vocab_size
        allowed = torch.ones(vocab, dtype=torch.bool)
        allowed[[PAD, BOS]] = False  # never chosen, as mtkit's searches ban them
        self.register_buffer("allowed", allowed)
        only_eos = torch.zeros(vocab, dtype=torch.bool)
        only_eos[EOS] = True
        self.register_buffer("only_eos", only_eos)
        first = torch.ones(vocab, dtype=torch.bool)
        if forced_first is not None:  # a forced token counts as an output token, as mtkit's prefixes do
            first[:] = False
            first[forced_first] = True
        self.register_buffer("first", first)
        a, b, cap = limits
        lengths = torch.arange(model.max_positions + 1)
        mask = torch.arange(lengths.shape[0])[None, :] < lengths[:, None]  # a source of each length
        self.register_buffer("limits", max_lengths(mask, a, b, cap))  # (max_positions + 1,) int64

    def forward(self, input_ids: Tensor, encoder_attention_mask: Tensor, encoder_hidden_states: Tensor, *past):
        model, split = self.model, self.split
        past_len = past[0].shape[2]
        steps = input_ids.shape[1]
        table = _positions(model, "tgt")
        x = model.tgt_embed.weight[input_ids] * model.embed_scale + table[past_len : past_len + steps]
        # query i (position past_len + i) sees the keys at positions <= past_len + i
        keys = torch.arange(past_len + steps)[None, :]
        queries = torch.arange(steps)[:, None] + past_len
        self_bias = (keys > queries).float()[None, None] * NEG  # (1, 1, steps, total)
        cross_bias = (1.0 - encoder_attention_mask[:, None, None, :].float()) * NEG
        presents = []
        for i, layer in enumerate(model.decoder):
            self_k, self_v, cross_k, cross_v = past[4 * i : 4 * i + 4]
            q, k, v = layer.self_attn.qkv(layer.r1.inp(x)).chunk(3, dim=-1)
            k, v = torch.cat([self_k, split(k)], dim=2), torch.cat([self_v, split(v)], dim=2)
            x = layer.r1.add(x, layer.self_attn.out(_attend(split(q), k, v, self_bias)))
            new_states = encoder_hidden_states[:, cross_k.shape[2] :]  # all of them at the first step, none later
            mk, mv = layer.cross_attn.kv(new_states).chunk(2, dim=-1)
            ck, cv = torch.cat([cross_k, split(mk)], dim=2), torch.cat([cross_v, split(mv)], dim=2)
            cq = split(layer.cross_attn.q(layer.r2.inp(x)))
            x = layer.r2.add(x, layer.cross_attn.out(_attend(cq, ck, cv, cross_bias)))
            x = layer.r3.add(x, layer.ffn(layer.r3.inp(x)))
            presents += [k, v, ck, cv]
        logits = model._logits(model.decoder_norm(x))
        logits = torch.where(self.allowed, logits, torch.full_like(logits, NEG))
        # the output token at position past_len + i is the (past_len + i + 1)-th: only EOS once the limit is reached;
        # the limit of each source length is a table made by mtkit's own rule (no float64 in onnxruntime-web)
        source_len = encoder_attention_mask.sum(dim=1).clamp(max=self.limits.shape[0] - 1)  # (batch,)
        limit = self.limits[source_len][:, None]  # (batch, 1)
        at_limit = (queries.reshape(1, steps) >= limit)[:, :, None]  # (batch, steps, 1)
        # a row that has ended stays ended: transformers.js steps every row until the last one ends
        ended = (input_ids == EOS)[:, :, None]  # (batch, steps, 1)
        logits = torch.where((at_limit | ended) & ~self.only_eos, torch.full_like(logits, NEG), logits)
        at_first = (queries.reshape(1, steps) == 0)[:, :, None]  # (1, steps, 1)
        return (torch.where(at_first & ~self.first, torch.full_like(logits, NEG), logits), *presents)


def export_graphs(model, folder: Path, *, limits: tuple, forced_first: Optional[int] = None) -> None:
    """Write ``encoder_model.onnx`` and ``decoder_model_merged.onnx`` (float32) of the mtkit Transformer ``model``
    into ``folder``; the decoder's arguments are ``Decoder``'s."""
    import warnings

    model = model.float().eval()
    encoder, decoder = Encoder(model).eval(), Decoder(model, limits, forced_first).eval()
    d, layers, heads = model.cfg.d_model, model.cfg.decoder_layers, model.cfg.heads
    ids = torch.tensor([[5, 6, 7, EOS], [5, 6, EOS, PAD]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]])
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            encoder,
            (ids, mask),
            str(folder / "encoder_model.onnx"),
            input_names=["input_ids", "attention_mask"],
            output_names=["last_hidden_state"],
            dynamic_axes={
                "input_ids": {0: "batch_size", 1: "encoder_sequence_length"},
                "attention_mask": {0: "batch_size", 1: "encoder_sequence_length"},
                "last_hidden_state": {0: "batch_size", 1: "encoder_sequence_length"},
            },
            opset_version=OPSET,
            dynamo=False,
        )
        states = encoder(ids, mask)
        names, past, dynamic = [], [], {}
        for i in range(layers):
            for side, length in (("decoder", 3), ("encoder", 4)):
                for kind in ("key", "value"):
                    name = f"past_key_values.{i}.{side}.{kind}"
                    names.append(name)
                    past.append(torch.zeros(2, heads, length, d // heads))
                    dynamic[name] = {0: "batch_size", 2: f"past_{side}_sequence_length"}
        outputs = ["logits"] + [n.replace("past_key_values", "present") for n in names]
        for name in outputs[1:]:
            dynamic[name] = {0: "batch_size", 2: f"{name.split('.')[2]}_sequence_length_out"}
        dynamic.update(
            input_ids={0: "batch_size", 1: "decoder_sequence_length"},
            encoder_attention_mask={0: "batch_size", 1: "encoder_sequence_length"},
            encoder_hidden_states={0: "batch_size", 1: "encoder_sequence_length"},
            logits={0: "batch_size", 1: "decoder_sequence_length"},
        )
        torch.onnx.export(
            decoder,
            (torch.tensor([[9], [10]]), mask, states, *past),
            str(folder / "decoder_model_merged.onnx"),
            input_names=["input_ids", "encoder_attention_mask", "encoder_hidden_states", *names],
            output_names=outputs,
            dynamic_axes=dynamic,
            opset_version=OPSET,
            dynamo=False,
        )


def quantize(folder: Path) -> None:
    """Add the int8 graphs transformers.js loads as ``q8`` (``*_quantized.onnx``): onnxruntime's dynamic
    quantization, per channel, reduced range, QInt8 weights."""
    import logging

    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # its advice to pre-process the graph for static quantization, logged at WARNING
    try:
        for name in ("encoder_model", "decoder_model_merged"):
            quantize_dynamic(
                str(folder / f"{name}.onnx"),
                str(folder / f"{name}_quantized.onnx"),
                per_channel=True,
                reduce_range=True,
                weight_type=QuantType.QInt8,
            )
    finally:
        root.setLevel(level)


# ------------------------------------------------------------------------------------------ the tokenizer
def _spm_facts(model: bytes) -> tuple[dict[str, float], dict[str, int], int, dict]:
    """(score by piece, type by piece, model type, normaliser fields) of a SentencePiece model's bytes."""
    scores, types, model_type, norm = {}, {}, UNIGRAM, {}
    for number, _, value, _ in protobuf_wire.fields(model):
        if number == protobuf_wire.SPM_PIECES:
            piece, score, kind = "", 0.0, NORMAL_PIECE
            for n, wire, v, _ in protobuf_wire.fields(value):
                if n == protobuf_wire.SPM_PIECE:
                    piece = v.decode("utf-8")
                elif n == SPM_SCORE and wire == protobuf_wire.FIXED32:
                    score = struct.unpack("<f", v.to_bytes(4, "little") if isinstance(v, int) else v)[0]
                elif n == protobuf_wire.SPM_TYPE:
                    kind = v
            scores[piece], types[piece] = score, kind
        elif number == SPM_TRAINER:
            for n, _, v, _ in protobuf_wire.fields(value):
                if n == TRAINER_MODEL_TYPE:
                    model_type = v
        elif number == SPM_NORMALIZER:
            for n, _, v, _ in protobuf_wire.fields(value):
                norm[n] = v
    return scores, types, model_type, norm


def tokenizer_json(spm: bytes, vocab: dict[str, int], special: dict[str, int], tags: list[str]) -> dict:
    """The ``tokenizer.json`` of a SentencePiece model whose pieces ``vocab`` numbers.

    Args:
        spm: the bytes of the SentencePiece model that cuts the sources (for a trained run, its one joint model).
        vocab: piece -> id, as the model numbers them (mtkit's ids: PAD, UNK, BOS, EOS first).
        special: the ids of ``pad``, ``unk``, ``eos`` and ``start``.
        tags: a multilingual run's language tokens (special: they decode to no text), or [].

    Returns:
        The JSON object as a dict.
    """
    scores, types, model_type, norm = _spm_facts(spm)
    pieces = sorted(vocab, key=vocab.__getitem__)
    unk = pieces[special["unk"]] if special["unk"] < len(pieces) else "<unk>"
    # a piece of the vocabulary that this SentencePiece model lacks (an imported model's target pieces) is never
    # cut from a source: SentencePiece would not cut it either
    if model_type == BPE:
        ranked = sorted((p for p in pieces if types.get(p) == NORMAL_PIECE), key=lambda p: -scores[p])
        merges = []
        for piece in ranked:
            for cut in range(1, len(piece)):
                left, right = piece[:cut], piece[cut:]
                if left in vocab and right in vocab:
                    merges.append((vocab[piece], vocab[left], vocab[right], left, right))
        rank = {p: r for r, p in enumerate(ranked)}
        merges.sort(key=lambda m: (rank[pieces[m[0]]], m[1], m[2]))
        model = {
            "type": "BPE",
            "dropout": None,
            "unk_token": unk,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": {p: vocab[p] for p in pieces},
            "merges": [[m[3], m[4]] for m in merges],
        }
    else:
        model = {
            "type": "Unigram",
            "unk_id": special["unk"],
            "vocab": [[p, scores.get(p, NEG) if types.get(p) != UNKNOWN_PIECE else 0.0] for p in pieces],
            "byte_fallback": False,
        }
    normalizers = []
    charsmap = norm.get(NORM_CHARSMAP, b"")
    if charsmap:
        normalizers.append({"type": "Precompiled", "precompiled_charsmap": base64.b64encode(charsmap).decode()})
    if norm.get(NORM_EXTRA_SPACES, 1):
        normalizers += [
            {"type": "Strip", "strip_left": True, "strip_right": True},
            {"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "},
        ]
    prepend = "always" if norm.get(NORM_DUMMY_PREFIX, 1) else "never"
    eos = pieces[special["eos"]]
    # special tokens and language tags decode to no text; SentencePiece's user-defined pieces (a multilingual run's
    # tags) are cut out of the text whole before the rest is cut, as SentencePiece cuts them
    named = {special[k] for k in ("pad", "unk", "eos", "start")}
    added = [
        {"id": i, "content": p, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
         "special": i in named or p in tags}
        for i, p in enumerate(pieces)
        if i in named or p in tags or types.get(p) == USER_DEFINED_PIECE
    ]  # fmt: skip
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": normalizers},
        "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": prepend, "split": True},
        "post_processor": {
            "type": "TemplateProcessing",
            "single": [{"Sequence": {"id": "A", "type_id": 0}}, {"SpecialToken": {"id": eos, "type_id": 0}}],
            "pair": [
                {"Sequence": {"id": "A", "type_id": 0}},
                {"Sequence": {"id": "B", "type_id": 0}},
                {"SpecialToken": {"id": eos, "type_id": 0}},
            ],
            "special_tokens": {eos: {"id": eos, "ids": [special["eos"]], "tokens": [eos]}},
        },
        "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": prepend, "split": True},
        "model": model,
    }


def tokenizer_config(pieces: dict[str, int], special: dict[str, int], max_positions: int) -> dict:
    """``tokenizer_config.json``: the special tokens by name and the longest source (in subwords, EOS included;
    the page cuts a longer one itself, keeping its EOS, as mtkit does)."""
    by_id = {i: p for p, i in pieces.items()}
    return {
        "tokenizer_class": "PreTrainedTokenizer",
        "model_max_length": max_positions,
        "pad_token": by_id[special["pad"]],
        "unk_token": by_id[special["unk"]],
        "eos_token": by_id[special["eos"]],
        "clean_up_tokenization_spaces": False,
    }


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
