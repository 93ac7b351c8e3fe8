"""Marian (Hugging Face ``MarianMTModel``, the OPUS-MT models) and mtkit's Transformer side by side: which config
keys map to which, which tensors to which, and what cannot be carried across. Import (``marian_import``) and export
(``marian_export``) both read these tables, so the two directions cannot drift apart.

The architectures are the same post-norm Transformer: embeddings scaled by sqrt(d_model) (``scale_embedding``)
plus a sinusoidal table with the sines of all frequencies in the first half of the channels and the cosines in
the second (``sinusoidal_layout: halves``), no position offset, no embedding LayerNorm, separate q/k/v
projections (mtkit fuses them: self-attention ``qkv``, cross-attention ``kv``), LayerNorm epsilon 1e-5, and a
fixed bias on the logits (``final_logits_bias``). Vocabularies are permuted into mtkit's special ids
(``tokenizer.marian_order``).
"""

from __future__ import annotations

import json
from typing import Any

import torch

from mtkit.errors import MtkitError

# Keys of older Marian config.json files (written for BART-like models) that current transformers ignores; a value
# other than Marian's own describes another architecture, which is refused rather than guessed at.
MARIAN_FIXED = {
    "normalize_before": False,
    "normalize_embedding": False,
    "layernorm_embedding": False,
    "add_final_layer_norm": False,
    "static_position_embeddings": True,
    "add_bias_logits": False,
    "encoder_layerdrop": 0.0,
    "decoder_layerdrop": 0.0,
}
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "swish": "swish", "silu": "swish"}  # Marian's name -> mtkit's
PAD_LOGIT = -100.0  # the logit bias of mtkit's own PAD row, where Marian has none: exp(-100) is 0 next to any logit


def _value(hf: dict, key: str, where: str) -> Any:
    if key not in hf:
        raise MtkitError(f"{where}: missing key '{key}'")
    return hf[key]


IMPORTED = {"marian": "MarianMTModel (OPUS-MT)", "m2m_100": "M2M100ForConditionalGeneration (M2M-100, NLLB-200)"}


def refusal(hf: dict, where: str) -> str:
    """The one line that refuses a config.json of an architecture ``mtkit import-hf`` does not read."""
    classes = hf.get("architectures")
    named = f" ({', '.join(map(str, classes))})" if isinstance(classes, list) and classes else ""
    return (
        f"{where}: model_type is {json.dumps(hf.get('model_type'))}{named}, which mtkit import-hf does not read; "
        f"it imports {' and '.join(IMPORTED.values())}"
    )


def model_section(hf: dict, where: str) -> dict:
    """The mtkit ``model`` section of a Marian config.json; what it cannot represent is refused by name.

    Args:
        hf: the parsed config.json.
        where: what messages name (the file).

    Returns:
        The ``model`` section as a dict: a post-norm Transformer with Marian's sinusoids (``halves``) and a fixed
        logits bias.

    Raises:
        MtkitError: a required key is missing, or a value has no mtkit equivalent: another model_type, an older
            key off Marian's value (``MARIAN_FIXED``), encoder and decoder heads that differ, an
            unknown activation, separate source and target embeddings with a tied output layer, a decoder
            vocabulary of its own, or d_model not divisible by the heads.
    """
    if hf.get("model_type") != "marian":
        raise MtkitError(refusal(hf, where))
    for key, marian in MARIAN_FIXED.items():
        if key in hf and hf[key] != marian:
            raise MtkitError(
                f"{where}: {key} = {json.dumps(hf[key])} cannot be represented (Marian's Transformer has "
                f"{json.dumps(marian)})"
            )
    enc, dec = "encoder_attention_heads", "decoder_attention_heads"
    if _value(hf, enc, where) != _value(hf, dec, where):
        raise MtkitError(
            f"{where}: {enc} = {hf[enc]} and {dec} = {hf[dec]} differ; mtkit's Transformer has one value for both"
        )
    encoder_ffn, decoder_ffn = _value(hf, "encoder_ffn_dim", where), _value(hf, "decoder_ffn_dim", where)
    activation = _value(hf, "activation_function", where)
    if activation not in ACTIVATIONS:
        raise MtkitError(
            f"{where}: activation_function = {json.dumps(activation)} cannot be represented; "
            f"mtkit has {', '.join(ACTIVATIONS)}"
        )
    share = hf.get("share_encoder_decoder_embeddings", True)
    tie = hf.get("tie_word_embeddings", True)
    if not share and tie:
        raise MtkitError(
            f"{where}: share_encoder_decoder_embeddings = false with tie_word_embeddings = true cannot be "
            "represented (mtkit ties all three embedding matrices or none)"
        )
    vocab, decoder_vocab = _value(hf, "vocab_size", where), hf.get("decoder_vocab_size") or hf["vocab_size"]
    if decoder_vocab != vocab:
        raise MtkitError(
            f"{where}: decoder_vocab_size = {decoder_vocab} differs from vocab_size = {vocab}; mtkit imports "
            "models with one vocabulary"
        )
    d_model, heads = _value(hf, "d_model", where), hf["encoder_attention_heads"]
    if d_model % heads:
        raise MtkitError(f"{where}: d_model = {d_model} is not divisible by encoder_attention_heads = {heads}")
    return {
        "arch": "transformer",
        "d_model": d_model,
        "heads": heads,
        "encoder_layers": _value(hf, "encoder_layers", where),
        "decoder_layers": _value(hf, "decoder_layers", where),
        "ffn_dim": encoder_ffn,
        "decoder_ffn_dim": decoder_ffn if decoder_ffn != encoder_ffn else None,  # a student's narrower decoder
        "activation": ACTIVATIONS[activation],
        "norm": "post",
        "positions": "sinusoidal",
        "max_positions": _value(hf, "max_position_embeddings", where),
        "dropout": float(hf.get("dropout", 0.1)),
        "attention_dropout": float(hf.get("attention_dropout", 0.0)),
        "activation_dropout": float(hf.get("activation_dropout", 0.0)),
        "tie_embeddings": bool(share and tie),
        "scale_embedding": bool(hf.get("scale_embedding", False)),
        "sinusoidal_layout": "halves",
        "final_logits_bias": True,
    }


def check_expressible(model_cfg, where: str) -> None:
    """Refuse, by key, an mtkit model config that Marian's architecture cannot express.

    Args:
        model_cfg: the config's ``model`` section.
        where: what messages name (the checkpoint file).

    Raises:
        MtkitError: an RNN, pre-norm, positions other than sinusoidal, or an SSRU decoder (``decoder_self``).
    """
    if model_cfg.arch != "transformer":
        raise MtkitError(f"{where}: model.arch is {model_cfg.arch!r}; Marian models are Transformers")
    marian = {"norm": "post", "positions": "sinusoidal", "decoder_self": "attention"}
    for key, value in marian.items():
        if getattr(model_cfg, key) != value:
            raise MtkitError(
                f"{where}: model.{key} = {getattr(model_cfg, key)!r} cannot be expressed in Marian (it has {value!r})"
            )
    if model_cfg.activation not in ACTIVATIONS.values():  # pragma: no cover - every mtkit activation is Marian's
        raise MtkitError(f"{where}: model.activation = {model_cfg.activation!r} cannot be expressed in Marian")


def transformer_fields(model_cfg) -> dict:
    """The fields of a `transformers` config.json that Marian's and M2M-100's (BART-like) share: the sizes, the
    activation, the dropouts and the embedding scale of the config's ``model`` section."""
    return {
        "d_model": model_cfg.d_model,
        "encoder_layers": model_cfg.encoder_layers,
        "decoder_layers": model_cfg.decoder_layers,
        "encoder_attention_heads": model_cfg.heads,
        "decoder_attention_heads": model_cfg.heads,
        "encoder_ffn_dim": model_cfg.ffn_dim,
        "decoder_ffn_dim": model_cfg.decoder_ffn_dim or model_cfg.ffn_dim,
        "activation_function": model_cfg.activation,
        "max_position_embeddings": model_cfg.max_positions,
        "dropout": model_cfg.dropout,
        "attention_dropout": model_cfg.attention_dropout,
        "activation_dropout": model_cfg.activation_dropout,
        "scale_embedding": model_cfg.scale_embedding,
    }


def config_json(model_cfg, *, vocab_size: int, pad: int, eos: int, start: int) -> dict:
    """A Marian config.json for ``model_cfg``.

    Args:
        model_cfg: the config's ``model`` section, accepted by ``check_expressible``.
        vocab_size: the size of the one (joint) vocabulary.
        pad: Marian's pad id.
        eos: Marian's eos id.
        start: the decoder's start id.

    Returns:
        The config as a dict, for ``json.dumps``.
    """
    return {
        "architectures": ["MarianMTModel"],
        "model_type": "marian",
        "vocab_size": vocab_size,
        "decoder_vocab_size": vocab_size,
        **transformer_fields(model_cfg),
        "share_encoder_decoder_embeddings": model_cfg.tie_embeddings,
        "tie_word_embeddings": model_cfg.tie_embeddings,
        "pad_token_id": pad,
        "eos_token_id": eos,
        "forced_eos_token_id": eos,
        "decoder_start_token_id": start,
        "is_encoder_decoder": True,
    }


# ------------------------------------------------------------------------------------------- tensors
# mtkit name -> the Marian names (without the leading "model.") it concatenates along dim 0
def layer_names(encoder_layers: int, decoder_layers: int) -> dict[str, list[str]]:
    """Which Marian tensors each tensor of mtkit's layers is made of.

    Args:
        encoder_layers: the number of encoder layers.
        decoder_layers: the number of decoder layers.

    Returns:
        mtkit name -> the Marian names (without the leading ``model.``) it concatenates along dim 0, for every
        tensor of the layers (embeddings, output layer and logits bias are not in it).
    """
    names: dict[str, list[str]] = {}

    def linear(ours: str, theirs: list[str]):
        for kind in ("weight", "bias"):
            names[f"{ours}.{kind}"] = [f"{t}.{kind}" for t in theirs]

    for i in range(encoder_layers):
        ours, theirs = f"encoder.{i}", f"encoder.layers.{i}"
        linear(f"{ours}.attn.qkv", [f"{theirs}.self_attn.{p}_proj" for p in "qkv"])
        linear(f"{ours}.attn.out", [f"{theirs}.self_attn.out_proj"])
        linear(f"{ours}.r1.norm", [f"{theirs}.self_attn_layer_norm"])
        linear(f"{ours}.ffn.fc1", [f"{theirs}.fc1"])
        linear(f"{ours}.ffn.fc2", [f"{theirs}.fc2"])
        linear(f"{ours}.r2.norm", [f"{theirs}.final_layer_norm"])
    for i in range(decoder_layers):
        ours, theirs = f"decoder.{i}", f"decoder.layers.{i}"
        linear(f"{ours}.self_attn.qkv", [f"{theirs}.self_attn.{p}_proj" for p in "qkv"])
        linear(f"{ours}.self_attn.out", [f"{theirs}.self_attn.out_proj"])
        linear(f"{ours}.r1.norm", [f"{theirs}.self_attn_layer_norm"])
        linear(f"{ours}.cross_attn.q", [f"{theirs}.encoder_attn.q_proj"])
        linear(f"{ours}.cross_attn.kv", [f"{theirs}.encoder_attn.{p}_proj" for p in "kv"])
        linear(f"{ours}.cross_attn.out", [f"{theirs}.encoder_attn.out_proj"])
        linear(f"{ours}.r2.norm", [f"{theirs}.encoder_attn_layer_norm"])
        linear(f"{ours}.ffn.fc1", [f"{theirs}.fc1"])
        linear(f"{ours}.ffn.fc2", [f"{theirs}.fc2"])
        linear(f"{ours}.r3.norm", [f"{theirs}.final_layer_norm"])
    return names


def permute_rows(table: torch.Tensor, order: list, fill: float = 0.0) -> torch.Tensor:
    """The rows of a vocabulary table in mtkit's order.

    Args:
        table: (marian_vocab, ...) rows by Marian id.
        order: the Marian id of each mtkit id (``tokenizer.marian_order``); None for a row Marian has not.
        fill: the value of such a row.

    Returns:
        (len(order), ...) rows by mtkit id.
    """
    out = table.new_full((len(order), *table.shape[1:]), fill)
    have = [j for j, i in enumerate(order) if i is not None]
    out[have] = table[[order[j] for j in have]]
    return out


def unpermute_rows(table: torch.Tensor, order: list, size: int) -> torch.Tensor:
    """The inverse of ``permute_rows``: mtkit rows back at their Marian ids.

    Args:
        table: (len(order), ...) rows by mtkit id.
        order: the Marian id of each mtkit id; None for a row of mtkit's own, which is dropped.
        size: the Marian vocabulary size.

    Returns:
        (size, ...) rows by Marian id; a Marian id that no mtkit row maps to gets zeros.
    """
    out = table.new_zeros((size, *table.shape[1:]))
    have = [j for j, i in enumerate(order) if i is not None]
    out[[order[j] for j in have]] = table[have]
    return out


def halves_channels(d_model: int) -> list[int]:
    """Channel k of the Marian model is channel ``[k]`` of a model with interleaved sinusoids: the even channels
    (the sines) first, then the odd ones (the cosines). LayerNorm and every linear layer are indifferent to the
    order of the channels of the residual stream, so permuting all of them at once gives the same function.

    Args:
        d_model: the number of channels.

    Returns:
        The permutation, for ``permute_channels``.
    """
    return list(range(0, d_model, 2)) + list(range(1, d_model, 2))


def permute_channels(weights: dict[str, torch.Tensor], perm: list[int]) -> dict[str, torch.Tensor]:
    """mtkit weights with the residual stream's channels reordered (see ``halves_channels``).

    Args:
        weights: a post-norm, sinusoidal mtkit Transformer's state dict.
        perm: new channel k is old channel ``perm[k]``.

    Returns:
        A new dict with the same names: the embeddings, the output layer, the LayerNorms and the linear layers
        that read or write the residual stream permuted along d_model; the other tensors as they were.
    """
    index = torch.tensor(perm)
    out = {}
    for name, tensor in weights.items():
        module, _, kind = name.rpartition(".")
        module = module.rpartition(".")[2]
        if name.endswith("embed.weight") or name == "output.weight":  # (vocab, d)
            tensor = tensor[:, index]
        elif module == "norm":  # (d,)
            tensor = tensor[index]
        elif module in ("qkv", "q", "kv", "fc1") and kind == "weight":  # reads the stream: (out, d)
            tensor = tensor[:, index]
        elif module in ("out", "fc2"):  # writes the stream: (d, in) and (d,)
            tensor = tensor[index]
        out[name] = tensor
    return out
