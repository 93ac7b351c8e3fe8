"""`mtkit export RUN --format hf` of an imported M2M-100 or NLLB-200 run: an ``M2M100ForConditionalGeneration``
directory that transformers loads (``from_pretrained``) and runs as mtkit runs the import.

The weights go back to transformers' names and ids (the inverse of ``m2m100_import``: the vocabulary rows
unpermuted, mtkit's BOS row, a copy of ``</s>``, and its fixed logits bias dropped); the tokenizer files are the
SentencePiece model and M2M-100's ``vocab.json`` with the import's ``tokenizer_config.json``, or for NLLB-200 the
SentencePiece model and ``tokenizer_config.json``, from which transformers builds its tokenizer (it names the
language codes, numbered after the pieces). Only a run imported from such a directory exports this way; its model
section is checked to be the architecture the import wrote.
"""

from __future__ import annotations

import json

import torch

from mtkit.errors import MtkitError
from mtkit.interop import marian
from mtkit.interop.m2m100_import import ARCHITECTURE, SPM

# what the import writes, which the architecture needs
FIXED = {"arch": "transformer", "norm": "pre", "positions": "sinusoidal", "sinusoidal_layout": "fairseq"}


def hf_facts(tokenizer) -> dict:
    """The import's record of its tokenizer files (``{"family": ...}``), or {} for any other vocabulary."""
    if tokenizer.vocab is None:
        return {}
    facts = json.loads(tokenizer.vocab.blob.decode("utf-8")).get("hf")
    return facts if isinstance(facts, dict) and facts.get("family") in ("m2m100", "nllb") else {}


def convert(loaded, where: str) -> tuple[dict, dict[str, torch.Tensor], dict[str, bytes]]:
    """The M2M100 files of an imported run's checkpoint (``loaded``: ``checkpoint.load_checkpoint``).

    Returns:
        (config.json as a dict, the tensors of model.safetensors by name, the other files' bytes by name).

    Raises:
        MtkitError: a model section off the imported architecture, or a vocabulary extended since the import.
    """
    model_cfg, tokenizer = loaded.config.model, loaded.tokenizer
    for key, value in FIXED.items():
        if getattr(model_cfg, key) != value:
            raise MtkitError(f"{where}: model.{key} = {getattr(model_cfg, key)!r}; {ARCHITECTURE} has {value!r}")
    facts = hf_facts(tokenizer)
    data = json.loads(tokenizer.vocab.blob.decode("utf-8"))
    if data.get("added"):
        raise MtkitError(
            f"{where}: its vocabulary was extended (mtkit extend-vocab), which {ARCHITECTURE}'s tokenizer files "
            "cannot hold (they number the language codes right after the SentencePiece pieces); export it for "
            "CTranslate2 instead: mtkit export RUN --output DIR"
        )
    vocab = data["vocab"]
    order, special = tokenizer.vocab.marian_ids, tokenizer.vocab.special
    size = len(vocab)
    weights = {k: v.detach().float() for k, v in loaded.model.state_dict().items()}

    def rows(name: str) -> torch.Tensor:
        return marian.unpermute_rows(weights[name], order, size).contiguous()

    tensors = {"model.shared.weight": rows("tgt_embed.weight")}
    if not model_cfg.tie_embeddings:
        tensors["lm_head.weight"] = rows("output.weight")
    for ours, theirs in marian.layer_names(model_cfg.encoder_layers, model_cfg.decoder_layers).items():
        for name, part in zip(theirs, weights[ours].chunk(len(theirs), dim=0)):
            tensors[f"model.{name}"] = part.contiguous()
    for ours, theirs in (("encoder_norm", "encoder.layer_norm"), ("decoder_norm", "decoder.layer_norm")):
        for kind in ("weight", "bias"):
            tensors[f"model.{theirs}.{kind}"] = weights[f"{ours}.{kind}"].contiguous()
    pad, eos, start = special["pad"], special["eos"], special["start"]
    config = {
        "architectures": [ARCHITECTURE],
        "model_type": "m2m_100",
        "vocab_size": size,
        **marian.transformer_fields(model_cfg),
        "tie_word_embeddings": model_cfg.tie_embeddings,
        "pad_token_id": pad,
        "eos_token_id": eos,
        "bos_token_id": vocab.get("<s>", 0),
        "decoder_start_token_id": start,
        "is_encoder_decoder": True,
    }
    generation = {
        **facts.get("generation", {}),
        "decoder_start_token_id": start,
        "eos_token_id": eos,
        "pad_token_id": pad,
        "bos_token_id": config["bos_token_id"],
    }
    files = {
        SPM: tokenizer.model_bytes()["src"],
        "tokenizer_config.json": json.dumps(facts.get("tokenizer_config", {}), indent=2).encode("utf-8"),
        "generation_config.json": json.dumps(generation, indent=2).encode("utf-8"),
    }
    if facts["family"] == "m2m100":  # the pieces alone: M2M100Tokenizer numbers the language tokens after them
        pieces = {piece: i for piece, i in vocab.items() if i < facts["vocab_json"]}
        files["vocab.json"] = json.dumps(pieces, ensure_ascii=False, indent=0).encode("utf-8")
    return config, tensors, files
