"""`mtkit export RUN --format hf --output DIR`: an mtkit Transformer as a MarianMT directory that transformers loads
with ``MarianMTModel.from_pretrained`` and ``MarianTokenizer.from_pretrained``, computing the same function (an
imported M2M-100 or NLLB-200 run goes back to its own architecture instead: ``m2m100_export``).

- A trained model keeps its vocabulary as it is: ``vocab.json`` numbers the SentencePiece pieces by their ids, so
  Marian's pad, unk and eos are mtkit's PAD, UNK and EOS, and its decoder starts with ``<s>`` (BOS,
  ``decoder_start_token_id``); PAD and BOS are banned from generation (``bad_words_ids``), as mtkit's search bans
  them. An imported model gets its original ``vocab.json`` and ids back.
- Interleaved sinusoids (mtkit's default) are Marian's table with the channels in another order: every tensor of
  the residual stream is permuted (``marian.halves_channels``), which leaves the function unchanged.
- What Marian cannot express is refused by key (``marian.check_expressible``): pre-norm, positions other than
  sinusoidal, RNN models; and a source and target vocabulary of their own (``data.joint_vocab: false``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch

from mtkit import checkpoint as ckpt
from mtkit.errors import MtkitError
from mtkit.files import fsync_tree, replace_dir
from mtkit.interop import marian
from mtkit.tokenizer import BOS, EOS, PAD, UNK

MARIAN_NAMES = {PAD: "<pad>", UNK: "<unk>", EOS: "</s>"}  # the pieces MarianTokenizer looks up by name


def _vocabulary(tokenizer, where: str) -> tuple[dict[str, int], list, dict[str, int]]:
    """(vocab.json, the Marian id of each mtkit id, {pad, unk, eos, start}) of ``tokenizer``."""
    if tokenizer.vocab is not None:  # imported: the original vocabulary and ids
        special = tokenizer.vocab.special
        vocab = json.loads(tokenizer.vocab.blob.decode("utf-8"))["vocab"]
        return vocab, tokenizer.vocab.marian_ids, special
    if not tokenizer.joint:
        raise MtkitError(
            f"{where}: data.joint_vocab = false cannot be expressed: Marian's vocab.json numbers the source and "
            "target pieces alike; export a model trained with data.joint_vocab: true"
        )
    pieces = tokenizer.tgt_pieces(range(tokenizer.tgt_vocab_size))
    for i, name in MARIAN_NAMES.items():
        if pieces[i] != name:
            raise MtkitError(f"{where}: piece {i} is {pieces[i]!r}, MarianTokenizer needs {name!r} there")
    vocab = {piece: i for i, piece in enumerate(pieces)}
    if len(vocab) != len(pieces):
        raise MtkitError(f"{where}: the SentencePiece model repeats a piece; vocab.json needs each once")
    return vocab, list(range(len(pieces))), {"pad": PAD, "unk": UNK, "eos": EOS, "start": BOS}


def convert(run: Path) -> tuple[dict, dict[str, torch.Tensor], dict[str, bytes]]:
    """The MarianMT files of the checkpoint translate would use.

    Args:
        run: a run dir or checkpoint file.

    Returns:
        (config.json as a dict, the tensors of model.safetensors by name, the other files' bytes by name:
        vocab.json, source.spm, target.spm, generation_config.json and tokenizer_config.json).

    Raises:
        MtkitError: no readable checkpoint, a model Marian cannot express (``marian.check_expressible``), or a
            vocabulary that cannot be one vocab.json (separate source and target vocabularies, a special piece
            not where MarianTokenizer looks for it, a repeated piece).
    """
    file = ckpt.resolve(Path(run))
    loaded = ckpt.load_checkpoint(file)
    model_cfg, tokenizer = loaded.config.model, loaded.tokenizer
    from mtkit.interop import m2m100_export

    if m2m100_export.hf_facts(tokenizer):  # an imported M2M-100 / NLLB-200 model goes back to its architecture
        return m2m100_export.convert(loaded, str(file))
    marian.check_expressible(model_cfg, str(file))
    vocab, order, special = _vocabulary(tokenizer, str(file))
    size = len(vocab)
    weights = {k: v.detach().float() for k, v in loaded.model.state_dict().items()}
    if model_cfg.sinusoidal_layout == "interleaved":
        weights = marian.permute_channels(weights, marian.halves_channels(model_cfg.d_model))

    def rows(name: str) -> torch.Tensor:
        return marian.unpermute_rows(weights[name], order, size).contiguous()

    tensors: dict[str, torch.Tensor] = {}
    if model_cfg.tie_embeddings:
        tensors["model.shared.weight"] = rows("tgt_embed.weight")
    else:
        tensors["model.encoder.embed_tokens.weight"] = rows("src_embed.weight")
        tensors["model.decoder.embed_tokens.weight"] = rows("tgt_embed.weight")
        tensors["lm_head.weight"] = rows("output.weight")
    bias = weights.get("final_logits_bias", torch.zeros(len(order)))
    tensors["final_logits_bias"] = marian.unpermute_rows(bias, order, size)[None, :].contiguous()
    for ours, theirs in marian.layer_names(model_cfg.encoder_layers, model_cfg.decoder_layers).items():
        for name, part in zip(theirs, weights[ours].chunk(len(theirs), dim=0)):
            tensors[f"model.{name}"] = part.contiguous()
    pad, eos, start = special["pad"], special["eos"], special["start"]
    config = marian.config_json(model_cfg, vocab_size=size, pad=pad, eos=eos, start=start)
    generation = {
        "bad_words_ids": [[pad]] if start == pad else [[pad], [start]],
        "decoder_start_token_id": start,
        "eos_token_id": eos,
        "forced_eos_token_id": eos,
        "pad_token_id": pad,
        "num_beams": loaded.config.decoding.beam_size,
        "max_length": model_cfg.max_positions,
    }
    data = loaded.config.data
    tokenizer_config = {
        "tokenizer_class": "MarianTokenizer",
        "source_lang": data.src_lang,
        "target_lang": data.tgt_lang,
        "model_max_length": model_cfg.max_positions,
        "separate_vocabs": False,
    }
    blobs = tokenizer.model_bytes()
    files = {
        "vocab.json": json.dumps(vocab, ensure_ascii=False, indent=0).encode("utf-8"),
        "source.spm": blobs["src"],
        "target.spm": blobs.get("tgt", blobs["src"]),
        "generation_config.json": json.dumps(generation, indent=2).encode("utf-8"),
        "tokenizer_config.json": json.dumps(tokenizer_config, indent=2).encode("utf-8"),
    }
    return config, tensors, files


def export_main(*, run: Path, out: Path, force: bool) -> Path:
    """``mtkit export --format hf``: write ``out`` from the run's checkpoint, whole or not at all.

    The files go to a temporary sibling that is swapped into place; a summary line is printed.

    Args:
        run: the run dir or checkpoint file.
        out: the directory to write.
        force: replace an earlier export at ``out`` (a folder with a config.json).

    Returns:
        ``out``.

    Raises:
        MtkitError: ``out`` exists (without ``force``, or it is not an export), or as ``convert``.
    """
    from safetensors.torch import save_file

    out = Path(out)
    if out.exists():
        if not force:
            raise MtkitError(f"{out}: already exists; pass --force to replace it")
        if not out.is_dir() or (any(out.iterdir()) and not (out / "config.json").is_file()):
            raise MtkitError(
                f"{out}: exists and is not a MarianMT export; --force only replaces an earlier export "
                "(choose another --output)"
            )
    config, tensors, files = convert(Path(run))
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.hf-{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        (tmp / "config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
        save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        for name, blob in files.items():
            (tmp / name).write_bytes(blob)
        fsync_tree(tmp)
        replace_dir(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    kind = config["architectures"][0]
    tokenizer = "MarianTokenizer" if kind == "MarianMTModel" else "AutoTokenizer"
    print(
        f"exported {run} to {out} as a {kind}; load it with "
        f"{kind}.from_pretrained({str(out)!r}) and {tokenizer}.from_pretrained({str(out)!r})"
    )
    return out
