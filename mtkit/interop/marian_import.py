"""`mtkit import-hf HF_DIR --output RUN_DIR`: a local MarianMT directory (what ``MarianMTModel.save_pretrained`` and
``MarianTokenizer.save_pretrained`` write) as an mtkit run directory that translate, the Python API and serve use
as they use a trained run, and that ``model.init_from`` fine-tunes.

Read: ``config.json``, ``source.spm``, ``target.spm``, ``vocab.json`` and the weights, ``model.safetensors`` (or
its shards) or else ``pytorch_model.bin`` loaded with ``torch.load(weights_only=True)``, which unpickles no code.
transformers itself is not needed. Written, through a temporary sibling swapped into place: ``config.yaml``, the
SentencePiece models and the vocabulary (``spm.src.model``, ``spm.tgt.model``, ``vocab.marian.json``) and
``checkpoints/ckpt_0000000.safetensors`` (update 0: the imported weights, with everything needed to translate).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional

import torch

from mtkit import checkpoint as ckpt
from mtkit import config as cfgmod
from mtkit.errors import MtkitError
from mtkit.files import check_new_run_dir
from mtkit.interop import marian
from mtkit.interop.hf_files import imported_bundle, read_weights
from mtkit.interop.hf_files import read_json as _read_json
from mtkit.interop.hf_files import spm_bytes as _spm_bytes
from mtkit.models import build_model
from mtkit.models.transformer import sinusoidal_table
from mtkit.tokenizer import Tokenizer, Vocab, marian_order

REQUIRED = ("config.json", "source.spm", "target.spm", "vocab.json")
CHECKPOINT = "ckpt_0000000.safetensors"


def read_vocab(path: Path, size: int) -> dict[str, int]:
    """Read and check a Marian vocab.json.

    Args:
        path: the vocab.json.
        size: config.json's vocab_size.

    Returns:
        piece -> id.

    Raises:
        MtkitError: unreadable JSON, ids that are not 0 .. n - 1 each once, or n != ``size``.
    """
    vocab = _read_json(path)
    ids = sorted(v for v in vocab.values() if isinstance(v, int))
    if len(ids) != len(vocab) or ids != list(range(len(vocab))):
        raise MtkitError(f"{path}: the ids are not 0..{len(vocab) - 1}, each once")
    if len(vocab) != size:
        raise MtkitError(f"{path}: holds {len(vocab)} pieces, config.json's vocab_size is {size}")
    return vocab


_MARIAN_TAG = re.compile(r">>([A-Za-z][A-Za-z0-9_-]{0,15})<<")  # a multilingual OPUS-MT model's language token


def _languages(hf_dir: Path, src_lang: Optional[str], tgt_lang: Optional[str]) -> tuple[str, str]:
    """The flags, else the languages of an OPUS-MT directory name (opus-mt-en-de), else "src" and "tgt"."""
    found = re.search(r"opus-mt-([^-]+)-([^-]+)$", hf_dir.resolve().name)
    guess = found.groups() if found else ("src", "tgt")
    return src_lang or guess[0], tgt_lang or guess[1]


def convert(hf_dir: Path, src_lang: Optional[str] = None, tgt_lang: Optional[str] = None) -> ckpt.Bundle:
    """The mtkit checkpoint of the Marian model in ``hf_dir``.

    Args:
        hf_dir: a local MarianMT directory (``save_pretrained`` of MarianMTModel and MarianTokenizer).
        src_lang: the source language; default: from an ``opus-mt-SRC-TGT`` directory name, else "src".
        tgt_lang: the target language; default likewise, else "tgt".

    Returns:
        The checkpoint bundle: the metadata (the run's config, update 0), the weights and the tokenizer files.

    Raises:
        MtkitError: a missing file, or a config, vocabulary, SentencePiece model or tensor that cannot be read or
            represented.
    """
    if not hf_dir.is_dir():
        raise MtkitError(f"{hf_dir}: no such directory")
    for name in REQUIRED:
        if not (hf_dir / name).is_file():
            raise MtkitError(
                f"{hf_dir / name}: not found; a MarianMT directory holds {', '.join(REQUIRED)} and the weights "
                "(save_pretrained of MarianMTModel and MarianTokenizer)"
            )
    where = str(hf_dir / "config.json")
    hf = _read_json(hf_dir / "config.json")
    model_section = marian.model_section(hf, where)
    tok_cfg = _read_json(hf_dir / "tokenizer_config.json") if (hf_dir / "tokenizer_config.json").is_file() else {}
    if tok_cfg.get("separate_vocabs"):
        raise MtkitError(f"{hf_dir / 'tokenizer_config.json'}: separate_vocabs = true cannot be represented")
    size = hf["vocab_size"]
    vocab = read_vocab(hf_dir / "vocab.json", size)
    special = {key: hf.get(f"{key}_token_id") for key in ("pad", "eos", "decoder_start")}
    special["decoder_start"] = special["decoder_start"] if special["decoder_start"] is not None else special["pad"]
    for key, value in special.items():
        if not isinstance(value, int) or not 0 <= value < size:
            raise MtkitError(f"{where}: {key}_token_id = {json.dumps(value)} is not one id of the vocabulary")
    if "<unk>" not in vocab:
        raise MtkitError(f"{hf_dir / 'vocab.json'}: no '<unk>' piece")
    pad, eos, start, unk = special["pad"], special["eos"], special["decoder_start"], vocab["<unk>"]
    if len({pad, eos, unk}) < 3 or start in (eos, unk):
        raise MtkitError(f"{where}: pad, eos, decoder start and <unk> ({pad}, {eos}, {start}, {unk}) must differ")
    blob = Vocab.encode_blob(vocab, pad=pad, unk=unk, eos=eos, start=start)
    tokenizer = Tokenizer.from_model_bytes(
        {"src": _spm_bytes(hf_dir / "source.spm"), "tgt": _spm_bytes(hf_dir / "target.spm"), "vocab": blob}
    )
    src_lang, tgt_lang = _languages(hf_dir, src_lang, tgt_lang)
    n = tokenizer.tgt_vocab_size
    beams = hf.get("num_beams") if isinstance(hf.get("num_beams"), int) and hf["num_beams"] >= 1 else None
    data = {"src_lang": src_lang, "tgt_lang": tgt_lang, "dir": "data", "vocab_size": n, "joint_vocab": True}
    tags = sorted(m.group(1) for m in map(_MARIAN_TAG.fullmatch, vocab) if m)
    if len(tags) > 1:  # a multilingual model: each >>xxx<< token is a target it writes
        directions = [{"src_lang": src_lang, "tgt_lang": t} for t in tags if t != src_lang]
        data = {**data, "directions": directions, "tag_template": ">>{lang}<<", "target_tag": "source"}
        del data["src_lang"], data["tgt_lang"]
    cfg = cfgmod.from_dict(
        {
            "data": data,
            "model": model_section,
            "decoding": {"beam_size": beams} if beams else {},
        },
        where,
    )
    weights, source = read_weights(hf_dir)
    state = _state_dict(weights, cfg.model, marian_order(size, pad, unk, eos, start), source, hf)
    model = build_model(cfg.model, n, n, True)
    ckpt.load_weights(model, state, source)
    return imported_bundle(cfg, model, tokenizer, hf_dir, n)


def _state_dict(weights: dict, model_cfg, order: list, source: Path, hf: dict) -> dict[str, torch.Tensor]:
    """mtkit's tensors from Marian's (``weights``), rows of the vocabulary permuted into mtkit's order."""

    def get(*names: str) -> torch.Tensor:
        for name in names:
            if name in weights:
                return weights[name].float()
        raise MtkitError(f"{source}: tensor '{names[0]}' missing")

    size = hf["vocab_size"]
    shared = ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
    if hf.get("share_encoder_decoder_embeddings", True):
        src_embed = tgt_embed = get(*shared)
    else:
        src_embed, tgt_embed = get("encoder.embed_tokens.weight"), get("decoder.embed_tokens.weight")
    for name, table in (("embeddings", src_embed), ("decoder embeddings", tgt_embed)):
        if tuple(table.shape) != (size, model_cfg.d_model):
            raise MtkitError(
                f"{source}: the {name} are {tuple(table.shape)}, config.json implies ({size}, {model_cfg.d_model})"
            )
    for side in ("encoder", "decoder"):
        positions = weights.get(f"{side}.embed_positions.weight")
        if positions is not None and not torch.allclose(
            positions.float(), sinusoidal_table(len(positions), model_cfg.d_model, "halves"), atol=1e-4
        ):
            raise MtkitError(f"{source}: {side}.embed_positions.weight is not Marian's sinusoidal table")
    state = {"src_embed.weight": marian.permute_rows(src_embed, order)}
    state["tgt_embed.weight"] = marian.permute_rows(tgt_embed, order)
    if not model_cfg.tie_embeddings:
        state["output.weight"] = marian.permute_rows(get("lm_head.weight"), order)
    bias = weights.get("final_logits_bias", torch.zeros(1, size)).float().reshape(-1)
    state["final_logits_bias"] = marian.permute_rows(bias, order, marian.PAD_LOGIT)
    for ours, theirs in marian.layer_names(model_cfg.encoder_layers, model_cfg.decoder_layers).items():
        state[ours] = torch.cat([get(name) for name in theirs], dim=0)
    return state


def import_main(hf_dir: Path, out: Path, *, src_lang: Optional[str], tgt_lang: Optional[str], force: bool) -> Path:
    """``mtkit import-hf``: convert ``hf_dir`` and write the run directory ``out``, whole or not at all.

    The run goes to a temporary sibling that is swapped into place; a summary line is printed.

    Args:
        hf_dir: the MarianMT directory.
        out: the run directory to write.
        src_lang: the source language (None: see ``convert``).
        tgt_lang: the target language (None: see ``convert``).
        force: replace a run directory (a folder with a config.yaml) at ``out``.

    Returns:
        ``out``.

    Raises:
        MtkitError: ``out`` exists and is not an empty folder (without ``force``, or it is not a run directory),
            or as ``convert``.
    """
    hf_dir, out = Path(hf_dir), Path(out)
    check_new_run_dir(out, force)
    bundle = convert_any(hf_dir, src_lang, tgt_lang)
    cfg = cfgmod.from_dict(bundle.metadata["config"])
    ckpt.save_run(out, cfg, Tokenizer.from_model_bytes(bundle.tokenizer), bundle, CHECKPOINT, "import")
    flags = ""
    if cfg.data.languages:  # a many-to-many model: say which languages to name
        first, second = cfg.data.languages[:2]
        flags = f" --source {first} --target {second} ({len(cfg.data.languages)} languages)"
    print(
        f"imported {hf_dir} ({cfg.model.encoder_layers}+{cfg.model.decoder_layers} layers x {cfg.model.d_model}, "
        f"{bundle.metadata['tgt_vocab_size']} subwords) to {out}; translate with: mtkit translate {out}{flags}"
    )
    return out


def convert_any(hf_dir: Path, src_lang: Optional[str] = None, tgt_lang: Optional[str] = None) -> ckpt.Bundle:
    """The mtkit checkpoint of the model in ``hf_dir``, by its config.json's model_type: Marian (``convert``) or
    M2M-100 / NLLB-200 (``m2m100_import.convert``).

    Raises:
        MtkitError: an architecture mtkit does not import (one line naming it and those it imports), language
            flags for a model that has its own languages, or as the converters.
    """
    hf_dir = Path(hf_dir)
    if (hf_dir / "config.json").is_file():
        hf = _read_json(hf_dir / "config.json")
        if hf.get("model_type") not in marian.IMPORTED:
            raise MtkitError(marian.refusal(hf, str(hf_dir / "config.json")))
        if hf.get("model_type") == "m2m_100":
            from mtkit.interop import m2m100_import

            if src_lang is not None or tgt_lang is not None:
                raise MtkitError(
                    "--source and --target are for MarianMT models; an M2M-100 or NLLB-200 model translates "
                    "between its own languages (mtkit translate RUN --source CODE --target CODE)"
                )
            return m2m100_import.convert(hf_dir)
    return convert(hf_dir, src_lang, tgt_lang)
