"""`mtkit export`: a trained Transformer as a CTranslate2 model directory (the engine that runs one: engine.py).

The spec is built with CTranslate2's Python model-spec API (``ctranslate2.specs``), tensor by tensor:

- vocabularies are the SentencePiece pieces by id, so CTranslate2's ``<unk> <s> </s>`` are our UNK/BOS/EOS
  (ids 1-3) and ``<pad>`` is id 0; the source gets ``</s>`` appended (``add_source_eos``), as in mtkit;
- embeddings are scaled by sqrt(d_model) (or not: ``model.scale_embedding``); sinusoidal positions are stored as
  an explicit table, the model's own (interleaved, Marian's halves or fairseq's, from ``position_offset``), learned
  ones likewise; a fixed ``final_logits_bias`` (imported Marian, M2M-100, NLLB-200) is the output layer's bias;
- relative positions (Shaw et al.) map to CTranslate2's ``relative_position`` keys/values (same clipping
  ``clamp(key - query, -k, k)``); rotary positions to ``rotary_dim=0`` with halves rotated
  (``rotary_interleave=False``), the layout of ``models.positions.Rotary``; ALiBi is refused: CTranslate2 has
  linear attention biases for decoders only (``TransformerDecoderSpec(alibi=True)``), none for an encoder;
- the fused ``qkv`` of self-attention is CTranslate2's fused first linear; cross-attention is ``q`` then the
  fused ``kv``; pre- or post-norm; LayerNorm epsilon 1e-5 (PyTorch's).
- CTranslate2 looks tokens up by name, so each id gets a name of its own (``ct2_vocabularies``): an imported model whose
  table names two rows alike (M2M-100's BOS and EOS are both ``</s>``) has the extra one renamed.

The directory holds CTranslate2's ``model.bin``, ``config.json`` and vocabularies, the SentencePiece
model(s), an imported model's ``vocab.json``, and ``mtkit_export.json`` (the run's config, so
``mtkit translate DIR`` needs nothing else).
It is written to a temporary sibling and renamed into place: whole or not at all.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Optional

from mtkit.errors import MtkitError
from mtkit.files import fsync_tree, replace_dir
from mtkit.languages import run_languages, run_sources
from mtkit.tokenizer import BOS, EOS, NUM_SPECIAL, PAD, UNK, Tokenizer

EXPORT_META = "mtkit_export.json"
EXPORT_FORMAT = "mtkit-ctranslate2-1"
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")
INSTALL_HINT = 'pip install "mtkit[ct2]" (or pip install ctranslate2)'
LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default, which models.transformer uses


def import_ctranslate2():
    """Import ctranslate2.

    Returns:
        The ``ctranslate2`` module.

    Raises:
        MtkitError: it is not installed; the one-line message says how to install it.
    """
    try:
        import ctranslate2
    except ImportError:
        raise MtkitError(
            f"the CTranslate2 engine needs the ctranslate2 package, which is not installed; "
            f"install it with: {INSTALL_HINT}"
        ) from None
    return ctranslate2


def check_exportable(model_cfg, where: str) -> None:
    """Refuse, in one line, a model CTranslate2's Transformer spec cannot represent.

    Args:
        model_cfg: the config's ``model`` section.
        where: what the message names (the checkpoint file).

    Raises:
        MtkitError: an RNN, ALiBi positions or an SSRU decoder.
    """
    if model_cfg.arch != "transformer":
        raise MtkitError(
            f"{where}: model.arch is {model_cfg.arch!r} (an RNN); CTranslate2 runs only Transformer "
            "models: translate this one with --engine torch"
        )
    if model_cfg.positions == "alibi":  # ctranslate2's ALiBi is a decoder-only option; its encoders have none
        raise MtkitError(
            f"{where}: model.positions is 'alibi'; CTranslate2's encoder-decoder Transformer has no linear "
            "attention biases in its encoder: translate this model with --engine torch"
        )
    if model_cfg.decoder_self != "attention":  # CTranslate2's decoder layers always start with self-attention
        raise MtkitError(
            f"{where}: model.decoder_self is {model_cfg.decoder_self!r}; CTranslate2's Transformer decoder has no "
            "recurrent layer in place of self-attention: translate this model with --engine torch"
        )


# ------------------------------------------------------------------------------------------ the spec
def _np(tensor):
    # a copy: CTranslate2's quantization may write into the arrays it is given, which would otherwise be the model's
    return tensor.detach().to("cpu").float().contiguous().numpy().copy()


def _linear(spec, linear) -> None:
    spec.weight = _np(linear.weight)
    if linear.bias is not None:
        spec.bias = _np(linear.bias)


def _norm(spec, norm) -> None:
    spec.gamma, spec.beta = _np(norm.weight), _np(norm.bias)


def _attention(spec, attn, relative: bool) -> None:
    """Self-attention: [fused qkv, out]; cross-attention: [q, fused kv, out] (CTranslate2's layouts)."""
    if attn.self_attention:
        _linear(spec.linear[0], attn.qkv)
    else:
        _linear(spec.linear[0], attn.q)
        _linear(spec.linear[1], attn.kv)
    _linear(spec.linear[-1], attn.out)
    if relative:
        spec.relative_position_keys = _np(attn.rel_k.weight)  # (2k + 1, head_dim)
        spec.relative_position_values = _np(attn.rel_v.weight)


def build_spec(model, tokenizer, table_positions: Optional[int] = None):
    """The CTranslate2 spec of a Transformer, tensor by tensor (the module docstring has the mapping).

    Args:
        model: a ``models.transformer.Transformer`` that ``check_exportable`` accepts.
        tokenizer: its ``Tokenizer``; the vocabularies are its pieces by id.
        table_positions: rows of the sinusoidal position table, when more than ``model.max_positions`` are wanted
            (for a runtime that feeds longer inputs, such as Argos Translate); None: ``max_positions``.

    Returns:
        A ``ctranslate2.specs.TransformerSpec`` holding ``model``.

    Raises:
        MtkitError: ctranslate2 is not installed, or is too old for rotary positions in an encoder.
    """
    import_ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    cfg = model.cfg
    pre_norm, relative, rope = cfg.norm == "pre", cfg.positions == "relative", cfg.positions == "rope"
    activations = {"relu": "RELU", "gelu": "GELU", "swish": "SWISH"}
    activation = getattr(common_spec.Activation, activations[cfg.activation])
    rotary = dict(rotary_dim=0, rotary_interleave=False, rotary_base=10000.0) if rope else {}
    try:
        encoder = transformer_spec.TransformerEncoderSpec(
            cfg.encoder_layers,
            cfg.heads,
            pre_norm=pre_norm,
            activation=activation,
            relative_position=relative,
            **rotary,
        )
    except TypeError:  # older releases have rotary embeddings in decoders only
        raise MtkitError(
            "model.positions = rope: this ctranslate2 has no rotary encoder; upgrade it "
            "(pip install -U ctranslate2) or translate with --engine torch"
        ) from None
    decoder = transformer_spec.TransformerDecoderSpec(
        cfg.decoder_layers,
        cfg.heads,
        pre_norm=pre_norm,
        activation=activation,
        relative_position=relative,
        alignment_heads=cfg.heads,
        **rotary,
    )
    if rope:  # the encoder spec keeps a position table slot even with rotary attention; rotary replaces it
        del encoder.position_encodings
    spec = transformer_spec.TransformerSpec(encoder, decoder)

    # Inputs: scaled embeddings plus our own position table (absent for relative and rotary positions).
    encoder.embeddings[0].weight = _np(model.src_embed.weight)
    decoder.embeddings.weight = _np(model.tgt_embed.weight)
    encoder.scale_embeddings = decoder.scale_embeddings = cfg.scale_embedding
    if cfg.positions == "sinusoidal":  # as the model's own table: its layout, from its offset
        from mtkit.models.positions import sinusoidal_table

        rows = max(cfg.max_positions, table_positions or 0)
        table = _np(sinusoidal_table(rows, cfg.d_model, cfg.sinusoidal_layout, cfg.position_offset))  # (rows, d_model)
        encoder.position_encodings.encodings = table
        decoder.position_encodings.encodings = table
    elif cfg.positions == "learned":
        encoder.position_encodings.encodings = _np(model.src_pos.weight)
        decoder.position_encodings.encodings = _np(model.tgt_pos.weight)

    for layer_spec, layer in zip(encoder.layer, model.encoder):
        _attention(layer_spec.self_attention, layer.attn, relative)
        _norm(layer_spec.self_attention.layer_norm, layer.r1.norm)
        _linear(layer_spec.ffn.linear_0, layer.ffn.fc1)
        _linear(layer_spec.ffn.linear_1, layer.ffn.fc2)
        _norm(layer_spec.ffn.layer_norm, layer.r2.norm)
    for layer_spec, layer in zip(decoder.layer, model.decoder):
        _attention(layer_spec.self_attention, layer.self_attn, relative)
        _norm(layer_spec.self_attention.layer_norm, layer.r1.norm)
        _attention(layer_spec.attention, layer.cross_attn, False)
        _norm(layer_spec.attention.layer_norm, layer.r2.norm)
        _linear(layer_spec.ffn.linear_0, layer.ffn.fc1)
        _linear(layer_spec.ffn.linear_1, layer.ffn.fc2)
        _norm(layer_spec.ffn.layer_norm, layer.r3.norm)
    if pre_norm:
        _norm(encoder.layer_norm, model.encoder_norm)
        _norm(decoder.layer_norm, model.decoder_norm)
    decoder.projection.weight = _np(model.tgt_embed.weight if model.output is None else model.output.weight)
    if model.logits_bias is not None:
        decoder.projection.bias = _np(model.logits_bias)

    src_pieces, tgt_pieces = ct2_vocabularies(tokenizer)
    spec.register_source_vocabulary(src_pieces)
    spec.register_target_vocabulary(tgt_pieces)
    config = spec.config
    config.unk_token, config.bos_token, config.eos_token = tgt_pieces[UNK], tgt_pieces[BOS], tgt_pieces[EOS]
    config.decoder_start_token = tgt_pieces[BOS]
    config.add_source_bos, config.add_source_eos = False, True
    config.layer_norm_epsilon = LAYER_NORM_EPS
    return spec


def save_spec(spec, directory: Path, quantization: Optional[str]) -> None:
    """Validate, quantize and write ``spec`` through CTranslate2's ``Converter``.

    Args:
        spec: what ``build_spec`` returned.
        directory: the folder to write, which must not exist.
        quantization: one of ``QUANTIZATIONS``; None keeps float32.

    Raises:
        MtkitError: CTranslate2 refused the spec or the folder (the first line of its error).
    """
    from ctranslate2.converters import Converter

    class _Built(Converter):
        def _load(self):
            return spec

    try:
        _Built().convert(str(directory), quantization=quantization)
    except (ValueError, RuntimeError) as err:
        raise MtkitError(f"CTranslate2 refused the model: {str(err).strip().splitlines()[0]}") from None


def ct2_vocabularies(tokenizer) -> tuple[list[str], list[str]]:
    """The source and target vocabularies as an export registers them and the engine looks tokens up in them: the
    tokenizer's pieces by id, each name once (one table serves both sides where the tokenizer has one id space).

    SentencePiece names every id apart. An imported model's table may not: M2M-100's BOS and EOS rows are both
    ``</s>``, Marian's PAD and BOS both ``<pad>``, and rows a tokenizer leaves unnamed read ``<pad>``. EOS and UNK
    keep their names first, then the ordinary pieces, then PAD and BOS; a name already taken becomes ``<mtkit:ID>``.
    """

    def named_once(pieces: list[str]) -> list[str]:
        table, taken = list(pieces), set()
        for i in (EOS, UNK, *range(NUM_SPECIAL, len(table)), PAD, BOS):
            if table[i] in taken:
                table[i] = f"<mtkit:{i}>"
            taken.add(table[i])
        return table

    src = named_once(tokenizer.src_pieces(list(range(tokenizer.src_vocab_size))))
    if tokenizer.joint:
        return src, src
    return src, named_once(tokenizer.tgt_pieces(list(range(tokenizer.tgt_vocab_size))))


# ----------------------------------------------------------------------------------------- the files
def tokenizer_files(tokenizer) -> dict[str, str]:
    """The file names of the tokenizer's files in an export dir.

    Args:
        tokenizer: the model's ``Tokenizer``.

    Returns:
        {"src": ..., "tgt": ...}: ``spm.model`` for both with one SentencePiece model, else ``source.spm.model``
        and ``target.spm.model``; and "vocab": ``vocab.json`` for an imported model's vocabulary.
    """
    blobs = tokenizer.model_bytes()
    files = (
        {"src": "source.spm.model", "tgt": "target.spm.model"}
        if "tgt" in blobs
        else {"src": "spm.model", "tgt": "spm.model"}
    )
    return {**files, "vocab": "vocab.json"} if "vocab" in blobs else files


def is_export_dir(path: Path) -> bool:
    """Whether ``path`` is a folder holding ``mtkit_export.json`` and ``model.bin`` (neither is read)."""
    path = Path(path)
    return path.is_dir() and (path / EXPORT_META).is_file() and (path / "model.bin").is_file()


def read_export(path: Path) -> tuple[dict, object]:
    """Read an export dir's metadata and tokenizer.

    Args:
        path: the export dir.

    Returns:
        (metadata, tokenizer): the contents of ``mtkit_export.json`` and the ``Tokenizer`` of its SentencePiece
        models (and vocabulary).

    Raises:
        MtkitError: ``mtkit_export.json`` is missing, unreadable or not of this format.
    """
    path = Path(path)
    meta_file = path / EXPORT_META
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        if not isinstance(meta, dict) or meta.get("format") != EXPORT_FORMAT:
            raise ValueError("not this format")
        files = meta["tokenizer"]
        if not {"src", "tgt"} <= set(files):
            raise KeyError("src")
    except (OSError, ValueError, KeyError, TypeError):
        raise MtkitError(
            f"{meta_file}: not an mtkit CTranslate2 export; rerun mtkit export RUN_DIR --output {path}"
        ) from None
    return meta, Tokenizer.from_files(path, files)


def convert(
    checkpoint: Path, directory: Path, quantization: Optional[str], table_positions: Optional[int] = None
) -> dict:
    """Export a checkpoint into a new CTranslate2 model directory.

    Args:
        checkpoint: a run dir (its checkpoint as translate picks it: ``checkpoint.resolve``) or a checkpoint file.
        directory: the folder to write, which must not exist.
        quantization: one of ``QUANTIZATIONS``; None: float32.
        table_positions: as ``build_spec``'s (a longer sinusoidal table); None: the model's ``max_positions``.

    Returns:
        The metadata, as written to ``mtkit_export.json``.

    Raises:
        MtkitError: ctranslate2 is missing, an unknown quantization, no readable checkpoint, or a model
            CTranslate2 cannot represent.
    """
    import_ctranslate2()
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise MtkitError(f"--quantization {quantization!r}: use one of {', '.join(QUANTIZATIONS)}")
    from mtkit import checkpoint as ckpt  # torch: only to convert, never to translate an export
    from mtkit import config as cfgmod

    file = ckpt.resolve(Path(checkpoint))
    cfg = cfgmod.from_dict(ckpt.read_metadata(file)["config"], f"{file} (embedded config)")
    check_exportable(cfg.model, str(file))
    loaded = ckpt.load_checkpoint(file)
    spec = build_spec(loaded.model, loaded.tokenizer, table_positions)
    save_spec(spec, directory, quantization)
    files = tokenizer_files(loaded.tokenizer)
    for side, blob in loaded.tokenizer.model_bytes().items():
        (directory / files[side]).write_bytes(blob)
    meta = {
        "format": EXPORT_FORMAT,
        "checkpoint": str(file),
        "update": loaded.metadata.get("update"),
        "quantization": quantization or "float32",
        "src_vocab_size": loaded.tokenizer.src_vocab_size,
        "tgt_vocab_size": loaded.tokenizer.tgt_vocab_size,
        "max_positions": cfg.model.max_positions,
        "tokenizer": files,
        "tokenizer_fingerprint": loaded.tokenizer.fingerprint(),
        "config": loaded.metadata["config"],
        "runtime": runtime_facts(cfg),
    }
    (directory / EXPORT_META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return meta


def runtime_facts(cfg) -> dict:
    """What translating needs of a run's config (``mtkit_export.json``'s "runtime"), resolved so that loading an
    export reads no schema: the ``decoding`` section with every default, the (source, target) languages, a
    multilingual model's targets and how its language token is placed and spelt."""
    languages, targets = run_languages(cfg.data)
    return {
        "sources": list(run_sources(cfg.data)),
        "decoding": cfg.decoding.model_dump(),
        "languages": list(languages),
        "targets": list(targets),
        "target_tag": cfg.data.target_tag,
        "tag_template": cfg.data.tag_template,
        "source_tag": cfg.data.source_tag,
    }


def export_main(*, run: Path, fmt: str, out: Path, quantization: Optional[str], force: bool) -> Path:
    """``mtkit export``: convert the run's checkpoint (as translate picks it) into ``out``, whole or not at all.

    The export is written to a temporary sibling and swapped into place; a summary line is printed.

    Args:
        run: the run dir or checkpoint file.
        fmt: the ``--format`` value, only checked: this function always writes CTranslate2 (the command line
            sends ``hf`` to ``marian_export``).
        out: the export dir to write.
        quantization: one of ``QUANTIZATIONS``; None: float32.
        force: replace an earlier export at ``out``.

    Returns:
        ``out``.

    Raises:
        MtkitError: an unknown format, ``out`` exists (without ``force``, or is not an export), or as ``convert``.
    """
    from mtkit.flags import check_flags

    check_flags(export_format=fmt)
    out = Path(out)
    if out.exists():
        if not force:
            raise MtkitError(f"{out}: already exists; pass --force to replace it")
        if not out.is_dir() or (any(out.iterdir()) and not (out / EXPORT_META).is_file()):
            raise MtkitError(
                f"{out}: exists and is not an mtkit export; --force only replaces an earlier export "
                "(choose another --output)"
            )
    out.parent.mkdir(parents=True, exist_ok=True)
    tag = f"{os.getpid()}-{os.urandom(4).hex()}"
    tmp = out.with_name(f".{out.name}.{tag}.tmp")
    try:
        meta = convert(run, tmp, quantization)
        fsync_tree(tmp)
        replace_dir(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    size = sum(p.stat().st_size for p in out.iterdir()) / 2**20
    print(
        f"exported {meta['checkpoint']} (update {meta['update']}) to {out} as CTranslate2 "
        f"{meta['quantization']}, {size:.1f} MiB; translate with: mtkit translate {out}"
    )
    return out


# ---------------------------------------------------------------------------------------- the engine
