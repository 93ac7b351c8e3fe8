"""`mtkit import-hf HF_DIR`: a local ``M2M100ForConditionalGeneration`` directory (M2M-100, and NLLB-200, which has
the same architecture) as an mtkit run directory translating between the model's languages.

Read: ``config.json``, the weights (``hf_files.read_weights``, as for Marian), ``sentencepiece.bpe.model``,
``tokenizer_config.json`` when there is one, and the vocabulary: M2M-100's ``vocab.json`` (pieces by id, the
language tokens ``__fr__`` after them in the order of the tokenizer's language list), or NLLB-200's
``tokenizer.json`` (pieces and added tokens by id; the language tokens are the codes themselves, ``fra_Latn``).
transformers itself is not needed.

The architecture in mtkit's terms: pre-norm layers with a final LayerNorm per stack (``norm: pre``), embeddings
scaled by sqrt(d_model), fairseq's sinusoids (``sinusoidal_layout: fairseq``) from row padding id + 1
(``position_offset``), one embedding matrix for the encoder, the decoder and the output layer. The vocabulary is
permuted into mtkit's special ids (``tokenizer.marian_order``): the decoder starts with ``</s>``, so mtkit's BOS is
a copy of that row, which the output layer never predicts (a fixed ``final_logits_bias`` of ``marian.PAD_LOGIT``
there, zero elsewhere). The run is many-to-many (``data.languages``): the source language's token opens the source
(``data.source_tag``, ``__en__ text </s>`` / ``eng_Latn text </s>``) and the target language's token is forced as
the decoder's first (``data.target_tag: decoder``), as transformers' ``forced_bos_token_id``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from mtkit import checkpoint as ckpt
from mtkit import config as cfgmod
from mtkit.errors import MtkitError
from mtkit.interop import marian
from mtkit.interop.hf_files import imported_bundle, read_weights
from mtkit.interop.hf_files import read_json as _read_json
from mtkit.interop.hf_files import spm_bytes as _spm_bytes
from mtkit.models import build_model
from mtkit.tokenizer import BOS, Tokenizer, Vocab, marian_order

SPM = "sentencepiece.bpe.model"
ARCHITECTURE = "M2M100ForConditionalGeneration"
# M2M100Tokenizer's language lists (its ``language_codes`` option): language i is token len(vocab.json) + i
M2M100_CODES = {
    "m2m100": (
        "af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy ga gd gl gu ha he hi hr ht "
        "hu hy id ig ilo is it ja jv ka kk km kn ko lb lg ln lo lt lv mg mk ml mn mr ms my ne nl no ns oc or pa pl "
        "ps pt ro ru sd si sk sl so sq sr ss su sv sw ta th tl tn tr uk ur uz vi wo xh yi yo zh zu"
    ).split(),
    "wmt21": "en ha is ja cs ru zh de".split(),
}
M2M100_TAG = re.compile(r"__([A-Za-z][A-Za-z0-9_-]{0,15}?)__")
NLLB_CODE = re.compile(r"[a-z]{2,3}_[A-Z][a-z]{3}")  # eng_Latn, zho_Hant


def _m2m100_vocab(hf_dir: Path, tok_cfg: dict) -> tuple[dict[str, int], list[str], dict]:
    """(piece -> id, the language codes, what an export needs) of an M2M100Tokenizer directory."""
    path = hf_dir / "vocab.json"
    if not path.is_file():
        raise MtkitError(f"{path}: not found; an M2M-100 directory holds vocab.json and {SPM}")
    vocab = _read_json(path)
    ids = sorted(v for v in vocab.values() if isinstance(v, int))
    if len(ids) != len(vocab) or ids != list(range(len(vocab))):
        raise MtkitError(f"{path}: the ids are not 0..{len(vocab) - 1}, each once")
    listed = [
        m.group(1)
        for key in ("additional_special_tokens", "extra_special_tokens")
        for m in map(M2M100_TAG.fullmatch, tok_cfg.get(key) or [])
        if m
    ]
    name = tok_cfg.get("language_codes", "m2m100")
    if not listed and name not in M2M100_CODES:
        raise MtkitError(
            f"{hf_dir / 'tokenizer_config.json'}: language_codes = {json.dumps(name)} is not one of "
            f"{', '.join(M2M100_CODES)}, and no __xx__ language tokens are listed"
        )
    codes = listed or M2M100_CODES[name]
    n = len(vocab)
    full = dict(vocab)
    for i, code in enumerate(codes):
        full.setdefault(f"__{code}__", n + i)
    return full, codes, {"family": "m2m100", "vocab_json": n}


def _nllb_vocab(hf_dir: Path, tok_cfg: dict) -> tuple[dict[str, int], list[str], dict]:
    """(piece -> id, the language codes, what an export needs) of an NLLB tokenizer directory (tokenizer.json)."""
    path = hf_dir / "tokenizer.json"
    if not path.is_file():
        raise MtkitError(
            f"{path}: not found; an NLLB-200 directory holds tokenizer.json (its ids) and {SPM} (save_pretrained "
            "of NllbTokenizer writes both)"
        )
    if tok_cfg.get("legacy_behaviour"):
        raise MtkitError(
            f"{hf_dir / 'tokenizer_config.json'}: legacy_behaviour = true (the language token after </s>) cannot be "
            "represented; mtkit puts the source language's token first, as NllbTokenizer does by default"
        )
    data = _read_json(path)
    model = data.get("model") if isinstance(data.get("model"), dict) else {}
    vocab = model.get("vocab")
    if not isinstance(vocab, dict):
        raise MtkitError(f"{path}: no model.vocab object (piece -> id)")
    full = {piece: i for piece, i in vocab.items() if isinstance(i, int)}
    codes = []
    for token in data.get("added_tokens") or []:
        if isinstance(token, dict) and isinstance(token.get("id"), int) and isinstance(token.get("content"), str):
            full[token["content"]] = token["id"]
            if NLLB_CODE.fullmatch(token["content"]):
                codes.append((token["id"], token["content"]))
    if len(set(full.values())) != len(full):
        raise MtkitError(f"{path}: two pieces share an id")
    return full, [code for _, code in sorted(codes)], {"family": "nllb"}


def _family(hf_dir: Path, tok_cfg: dict) -> str:
    name = str(tok_cfg.get("tokenizer_class") or "")
    if name.startswith("Nllb"):
        return "nllb"
    if name.startswith("M2M100"):
        return "m2m100"
    return "m2m100" if (hf_dir / "vocab.json").is_file() else "nllb"


def _filled(vocab: dict[str, int], size: int, where: str) -> dict[str, int]:
    """``vocab`` with a placeholder piece for each id below ``size`` that the tokenizer does not name (the rows
    fairseq pads the vocabulary with), refusing ids beyond it."""
    beyond = [piece for piece, i in vocab.items() if not 0 <= i < size]
    if beyond:
        raise MtkitError(f"{where}: the tokenizer has ids beyond config.json's vocab_size = {size} ({beyond[0]!r})")
    named = set(vocab.values())
    return {**vocab, **{f"<unnamed {i}>": i for i in range(size) if i not in named}}


def model_section(hf: dict, where: str) -> dict:
    """The mtkit ``model`` section of an M2M100 config.json; what it cannot represent is refused by name."""
    enc, dec = "encoder_attention_heads", "decoder_attention_heads"
    for key in ("d_model", "encoder_layers", "decoder_layers", enc, dec, "encoder_ffn_dim", "vocab_size"):
        if not isinstance(hf.get(key), int) or hf[key] < 1:
            raise MtkitError(f"{where}: {key} is missing or not a positive integer")
    if hf[enc] != hf[dec]:
        raise MtkitError(
            f"{where}: {enc} = {hf[enc]} and {dec} = {hf[dec]} differ; mtkit's Transformer has one value for both"
        )
    if hf["d_model"] % hf[enc]:
        raise MtkitError(f"{where}: d_model = {hf['d_model']} is not divisible by {enc} = {hf[enc]}")
    activation = hf.get("activation_function", "relu")
    if activation not in marian.ACTIVATIONS:
        raise MtkitError(
            f"{where}: activation_function = {json.dumps(activation)} cannot be represented; "
            f"mtkit has {', '.join(marian.ACTIVATIONS)}"
        )
    pad = hf.get("pad_token_id", 1)
    ffn, decoder_ffn = hf["encoder_ffn_dim"], hf.get("decoder_ffn_dim") or hf["encoder_ffn_dim"]
    return {
        "arch": "transformer",
        "d_model": hf["d_model"],
        "heads": hf[enc],
        "encoder_layers": hf["encoder_layers"],
        "decoder_layers": hf["decoder_layers"],
        "ffn_dim": ffn,
        "decoder_ffn_dim": decoder_ffn if decoder_ffn != ffn else None,
        "activation": marian.ACTIVATIONS[activation],
        "norm": "pre",
        "positions": "sinusoidal",
        "sinusoidal_layout": "fairseq",
        "position_offset": pad + 1,
        "max_positions": int(hf.get("max_position_embeddings", 1024)),
        "dropout": float(hf.get("dropout", 0.1)),
        "attention_dropout": float(hf.get("attention_dropout", 0.0)),
        "activation_dropout": float(hf.get("activation_dropout", 0.0)),
        "tie_embeddings": bool(hf.get("tie_word_embeddings", True)),
        "scale_embedding": bool(hf.get("scale_embedding", True)),
        "final_logits_bias": True,  # zero, but for the BOS row: a copy of </s> that is never predicted
    }


def convert(hf_dir: Path) -> ckpt.Bundle:
    """The mtkit checkpoint of the M2M-100 or NLLB-200 model in ``hf_dir``.

    Args:
        hf_dir: a local directory written by ``save_pretrained`` of ``M2M100ForConditionalGeneration`` and of its
            tokenizer (``M2M100Tokenizer``, ``NllbTokenizer``).

    Returns:
        The checkpoint bundle: the metadata (the run's config, update 0), the weights and the tokenizer files.

    Raises:
        MtkitError: a missing file, or a config, vocabulary, SentencePiece model or tensor that cannot be read or
            represented.
    """
    where = str(hf_dir / "config.json")
    hf = _read_json(hf_dir / "config.json")
    section = model_section(hf, where)
    tok_cfg = _read_json(hf_dir / "tokenizer_config.json") if (hf_dir / "tokenizer_config.json").is_file() else {}
    if not (hf_dir / SPM).is_file():
        raise MtkitError(f"{hf_dir / SPM}: not found; an M2M-100 or NLLB-200 directory holds it")
    family = _family(hf_dir, tok_cfg)
    vocab, codes, export = (_m2m100_vocab if family == "m2m100" else _nllb_vocab)(hf_dir, tok_cfg)
    if len(codes) < 2:
        raise MtkitError(f"{hf_dir}: the tokenizer names {len(codes)} language token(s); a many-to-many model has more")
    size = hf["vocab_size"]
    vocab = _filled(vocab, size, str(hf_dir))
    template = "__{lang}__" if family == "m2m100" else "{lang}"
    special = {"pad": hf.get("pad_token_id", 1), "eos": hf.get("eos_token_id", 2), "unk": vocab.get("<unk>")}
    special["start"] = hf.get("decoder_start_token_id", special["eos"])
    for key, value in special.items():
        if not isinstance(value, int) or not 0 <= value < size:
            raise MtkitError(f"{where}: the {key} id {json.dumps(value)} is not one id of the vocabulary")
    pad, eos, unk, start = special["pad"], special["eos"], special["unk"], special["start"]
    if len({pad, eos, unk}) < 3 or start in (pad, unk):
        raise MtkitError(f"{where}: pad, eos, <unk> and the decoder start ({pad}, {eos}, {unk}, {start}) clash")
    tags = [template.replace("{lang}", code) for code in codes]
    export = {**export, "tokenizer_config": tok_cfg, "generation": _generation(hf_dir)}
    blob = Vocab.encode_blob(vocab, pad=pad, unk=unk, eos=eos, start=start, tags=tags, hf=export)
    tokenizer = Tokenizer.from_model_bytes({"src": _spm_bytes(hf_dir / SPM), "vocab": blob})
    n = tokenizer.tgt_vocab_size
    beams = hf.get("num_beams") if isinstance(hf.get("num_beams"), int) and hf["num_beams"] >= 1 else None
    data = {
        "dir": "data",
        "vocab_size": n,
        "joint_vocab": True,
        "languages": codes,
        "source_tag": True,
        "target_tag": "decoder",
        "tag_template": template,
    }
    cfg = cfgmod.from_dict({"data": data, "model": section, "decoding": {"beam_size": beams} if beams else {}}, where)
    weights, source = read_weights(hf_dir)
    state = _state_dict(weights, cfg.model, marian_order(size, pad, unk, eos, start), source, size)
    model = build_model(cfg.model, n, n, True)
    ckpt.load_weights(model, state, source)
    return imported_bundle(cfg, model, tokenizer, hf_dir, n)


def _generation(hf_dir: Path) -> dict:
    """generation_config.json's settings an export writes back (none where there is no such file)."""
    path = hf_dir / "generation_config.json"
    return _read_json(path) if path.is_file() else {}


def _state_dict(weights: dict, model_cfg, order: list, source: Path, size: int) -> dict[str, torch.Tensor]:
    """mtkit's tensors from M2M100's (``weights``, without the leading ``model.``), rows in mtkit's order."""

    def get(*names: str) -> torch.Tensor:
        for name in names:
            if name in weights:
                return weights[name].float()
        raise MtkitError(f"{source}: tensor '{names[0]}' missing")

    shared = get("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
    if tuple(shared.shape) != (size, model_cfg.d_model):
        raise MtkitError(
            f"{source}: the embeddings are {tuple(shared.shape)}, config.json implies ({size}, {model_cfg.d_model})"
        )
    state = {"src_embed.weight": marian.permute_rows(shared, order), "tgt_embed.weight": None}
    state["tgt_embed.weight"] = state["src_embed.weight"]
    if not model_cfg.tie_embeddings:
        state["output.weight"] = marian.permute_rows(get("lm_head.weight"), order)
    bias = torch.zeros(len(order))
    bias[BOS] = marian.PAD_LOGIT
    state["final_logits_bias"] = bias
    for ours, theirs in marian.layer_names(model_cfg.encoder_layers, model_cfg.decoder_layers).items():
        state[ours] = torch.cat([get(name) for name in theirs], dim=0)
    for ours, theirs in (("encoder_norm", "encoder.layer_norm"), ("decoder_norm", "decoder.layer_norm")):
        for kind in ("weight", "bias"):
            state[f"{ours}.{kind}"] = get(f"{theirs}.{kind}")
    return state
