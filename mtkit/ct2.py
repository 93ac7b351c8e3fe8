"""CTranslate2 (the optional extra ``mtkit[ct2]``): `mtkit export` writes a trained Transformer as a CTranslate2
model directory, and ``Ct2Translator`` is the translation engine that runs one.

The spec is built with CTranslate2's Python model-spec API (``ctranslate2.specs``), tensor by tensor:

- vocabularies are the SentencePiece pieces by id, so CTranslate2's ``<unk> <s> </s>`` are our UNK/BOS/EOS
  (ids 1-3) and ``<pad>`` is id 0; the source gets ``</s>`` appended (``add_source_eos``), as in mtkit;
- embeddings are scaled by sqrt(d_model); sinusoidal positions are stored as an explicit table (CTranslate2's
  built-in table has another layout, sin and cos in two halves; ours interleaves them), learned ones likewise;
- relative positions (Shaw et al.) map to CTranslate2's ``relative_position`` keys/values (same clipping
  ``clamp(key - query, -k, k)``); rotary positions to ``rotary_dim=0`` with halves rotated
  (``rotary_interleave=False``), the layout of ``models.transformer.Rotary``;
- the fused ``qkv`` of self-attention is CTranslate2's fused first linear; cross-attention is ``q`` then the
  fused ``kv``; pre- or post-norm; LayerNorm epsilon 1e-5 (PyTorch's).

The directory holds CTranslate2's ``model.bin``, ``config.json`` and vocabularies, the SentencePiece
model(s) and ``mtkit_export.json`` (the run's config, so ``mtkit translate DIR`` needs nothing else).
It is written to a temporary sibling and renamed into place: whole or not at all.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from pathlib import Path
from typing import Optional

from mtkit import checkpoint as ckpt
from mtkit import config as cfgmod
from mtkit.engine import Engine, Options, batches
from mtkit.errors import MtkitError
from mtkit.files import fsync_tree, replace_dir
from mtkit.models.transformer import sinusoidal_table
from mtkit.search import Hypothesis, length_penalty_of
from mtkit.tokenizer import BOS, EOS, PAD, UNK, Tokenizer

EXPORT_META = "mtkit_export.json"
EXPORT_FORMAT = "mtkit-ctranslate2-1"
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16", "bfloat16", "float32")
INSTALL_HINT = 'pip install "mtkit[ct2]" (or pip install ctranslate2)'
LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm's default, which models.transformer uses


def import_ctranslate2():
    """The ctranslate2 module, or a one-line error that says how to install it."""
    try:
        import ctranslate2
    except ImportError:
        raise MtkitError(
            f"the CTranslate2 engine needs the ctranslate2 package, which is not installed; "
            f"install it with: {INSTALL_HINT}"
        ) from None
    return ctranslate2


def check_exportable(model_cfg, where: str) -> None:
    """Refuse, in one line, a model CTranslate2's Transformer spec cannot represent."""
    if model_cfg.arch != "transformer":
        raise MtkitError(
            f"{where}: model.arch is {model_cfg.arch!r} (an RNN); CTranslate2 runs only Transformer "
            "models: translate this one with --engine torch"
        )


# ------------------------------------------------------------------------------------------ the spec
def _np(tensor):
    return tensor.detach().to("cpu").float().contiguous().numpy()


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


def build_spec(model, tokenizer):
    """A ``ctranslate2.specs.TransformerSpec`` holding ``model`` (a models.transformer.Transformer)."""
    import_ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    cfg = model.cfg
    pre_norm, relative, rope = cfg.norm == "pre", cfg.positions == "relative", cfg.positions == "rope"
    activation = {"relu": common_spec.Activation.RELU, "gelu": common_spec.Activation.GELU}[cfg.activation]
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
    encoder.scale_embeddings = decoder.scale_embeddings = True
    if cfg.positions == "sinusoidal":
        table = _np(sinusoidal_table(cfg.max_positions, cfg.d_model))  # (max_positions, d_model)
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

    src_pieces = tokenizer.src_pieces(range(tokenizer.src_vocab_size))
    tgt_pieces = tokenizer.tgt_pieces(range(tokenizer.tgt_vocab_size))
    spec.register_source_vocabulary(src_pieces)
    spec.register_target_vocabulary(tgt_pieces)
    config = spec.config
    config.unk_token, config.bos_token, config.eos_token = tgt_pieces[UNK], tgt_pieces[BOS], tgt_pieces[EOS]
    config.decoder_start_token = tgt_pieces[BOS]
    config.add_source_bos, config.add_source_eos = False, True
    config.layer_norm_epsilon = LAYER_NORM_EPS
    return spec


def save_spec(spec, directory: Path, quantization: Optional[str]) -> None:
    """Validate, quantize and write ``spec`` to ``directory`` (which must not exist) via CTranslate2's Converter."""
    from ctranslate2.converters import Converter

    class _Built(Converter):
        def _load(self):
            return spec

    try:
        _Built().convert(str(directory), quantization=quantization)
    except (ValueError, RuntimeError) as err:
        raise MtkitError(f"CTranslate2 refused the model: {str(err).strip().splitlines()[0]}") from None


# ----------------------------------------------------------------------------------------- the files
def tokenizer_files(tokenizer) -> dict[str, str]:
    """File names of the SentencePiece models in an export dir: {"src": ..., "tgt": ...}."""
    return (
        {"src": "spm.model", "tgt": "spm.model"}
        if tokenizer.joint
        else {"src": "source.spm.model", "tgt": "target.spm.model"}
    )


def is_export_dir(path: Path) -> bool:
    path = Path(path)
    return path.is_dir() and (path / EXPORT_META).is_file() and (path / "model.bin").is_file()


def read_export(path: Path) -> tuple[dict, object]:
    """(metadata, Tokenizer) of an export dir."""
    path = Path(path)
    meta_file = path / EXPORT_META
    try:
        meta = json.loads(meta_file.read_text(encoding="utf-8"))
        if meta.get("format") != EXPORT_FORMAT:
            raise ValueError(meta.get("format"))
        files = meta["tokenizer"]
    except (OSError, ValueError, KeyError, TypeError):
        raise MtkitError(
            f"{meta_file}: not an mtkit CTranslate2 export; rerun mtkit export RUN_DIR --out {path}"
        ) from None
    return meta, Tokenizer(path / files["src"], path / files["tgt"])


def convert(checkpoint: Path, directory: Path, quantization: Optional[str]) -> dict:
    """Write the export of ``checkpoint`` (run dir or file) into ``directory`` (must not exist); its metadata."""
    import_ctranslate2()
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise MtkitError(f"--quantization {quantization!r}: use one of {', '.join(QUANTIZATIONS)}")
    file = ckpt.resolve(Path(checkpoint))
    cfg = cfgmod.from_dict(ckpt.read_metadata(file)["config"], f"{file} (embedded config)")
    check_exportable(cfg.model, str(file))
    loaded = ckpt.load_checkpoint(file)
    spec = build_spec(loaded.model, loaded.tokenizer)
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
    }
    (directory / EXPORT_META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return meta


def export_main(*, run: Path, fmt: str, out: Path, quantization: Optional[str], force: bool) -> Path:
    """``mtkit export``: convert the run's checkpoint (as translate picks it) into ``out``."""
    cfgmod.check_flags(export_format=fmt)
    out = Path(out)
    if out.exists():
        if not force:
            raise MtkitError(f"{out}: already exists; pass --force to replace it")
        if not out.is_dir() or (any(out.iterdir()) and not (out / EXPORT_META).is_file()):
            raise MtkitError(
                f"{out}: exists and is not an mtkit export; --force only replaces an earlier export "
                "(choose another --out)"
            )
    out.parent.mkdir(parents=True, exist_ok=True)
    tag = hashlib.sha1(f"{os.getpid()}{out}".encode()).hexdigest()[:8]
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
class Ct2Translator(Engine):
    """The translation engine over a CTranslate2 model written by ``mtkit export`` (``translate_stream`` serves it
    and the torch engine alike).

    Decoding keeps the torch engine's contract: PAD and BOS are never emitted, EOS may come first (empty output),
    at most ``ceil(a * src_len + b)`` tokens (``src_len`` with EOS, capped at max_positions - 1; CTranslate2 takes
    one limit per call: a batch runs under its longest limit, and a sentence whose output went past its own
    limit is cut there (greedy, sampling: the same as stopping there) or searched again under it (beam)), and
    scores are log-probabilities over the GNMT
    penalty ``((5 + n + 1) / 6) ** length_penalty``. Beam search stops a sentence once ``beam_size`` hypotheses
    have finished (the ``beam_full`` rule; ``stopping: exact`` is not available here) and ranks them with our
    penalty. Hypotheses carry no attention.

    CTranslate2 renormalises its log-probs over the tokens it may emit (all but PAD and BOS), so its scores
    sit slightly above the model's own (by the PAD and BOS mass, tiny in a trained model) and its beams are
    ranked by them: where that mass is not tiny, a near-tie may go another way than in the torch engine.
    With ``exact_scores`` the kept hypotheses are rescored by a teacher-forced pass (``score_batch``): their
    ``score``/``log_prob`` are then the model's and ``token_log_probs`` is filled (otherwise it is empty).
    ``translate_main`` asks for it where scores are shown (n-best lists, jsonl).
    """

    # CTranslate2's beam search stops at beam_size finished hypotheses (our beam_full rule) only under a length
    # penalty (with none it exits once the top beam ends), keeps the beam_size best by score / length ** penalty
    # and ranks by that. A penalty this small keeps that stopping rule while ranking by log-probability, which
    # keeps the hypotheses our GNMT penalty would pick (ranked afterwards, on the raw log-probs) far more often
    # than CTranslate2's length ** alpha, which favours hypotheses cut at the length limit.
    _NEUTRAL_PENALTY = 1e-6

    def __init__(
        self,
        model_dir: Path,
        tokenizer,
        options: Options,
        *,
        max_positions: int,
        device: str = "cpu",
        compute_type: str = "default",
        threads: int = 0,
        exact_scores: bool = False,
    ):
        super().__init__(tokenizer, options, max_positions)
        ct2 = import_ctranslate2()
        try:
            self.engine = ct2.Translator(
                str(model_dir), device=device, compute_type=compute_type, inter_threads=1, intra_threads=threads
            )
        except (ValueError, RuntimeError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else err.__class__.__name__
            raise MtkitError(f"CTranslate2 cannot run this model on {device} as {compute_type} ({first})") from None
        self.exact_scores = exact_scores
        self.where = f"{device} as {compute_type}"
        self.max_len_cap = self.max_src
        self.src_vocab = tokenizer.src_pieces(range(tokenizer.src_vocab_size))
        self.tgt_vocab = tokenizer.tgt_pieces(range(tokenizer.tgt_vocab_size))
        self.tgt_ids = {piece: i for i, piece in enumerate(self.tgt_vocab)}
        self.banned = [[self.tgt_vocab[PAD]], [self.tgt_vocab[BOS]]]
        if options.sampling:
            ct2.set_random_seed(options.seed)

    def max_length(self, src_len: int) -> int:
        """``search.max_lengths`` for one sentence of ``src_len`` tokens (EOS included)."""
        o = self.opt
        return min(max(math.ceil(o.max_len_a * src_len + o.max_len_b - 1e-6), 0), self.max_len_cap)

    def translate_ids(self, ids: list[list[int]]) -> list[list]:
        results: list[list] = [[] for _ in ids]  # empty in, empty out
        for idx in batches(ids, self.opt):  # batches of similar length, so of similar limits
            sources = [[self.src_vocab[t] for t in ids[i]] for i in idx]  # CTranslate2 appends </s>
            limits = [self.max_length(len(ids[i]) + 1) for i in idx]
            for i, hyps in zip(idx, self._search(sources, limits)):
                results[i] = hyps
        return results

    def _search(self, sources: list[list[str]], limits: list[int]) -> list[list]:
        """The n-best hypotheses of each source, each under its own output limit."""
        found = self._candidates(sources, max(limits))
        again: dict[int, list[int]] = {}  # limit -> sources whose beam search must run again under it
        for s, limit in enumerate(limits):
            if any(len(pieces) > limit for pieces, _ in found[s]):
                if self.opt.sampling or max(self.opt.beam_size, self.opt.nbest) == 1:
                    # a greedy or sampled output cut at the limit is what stopping there would have given
                    found[s] = [
                        (pieces, lp) if len(pieces) < limit else (pieces[:limit], None) for pieces, lp in found[s]
                    ]
                else:
                    again.setdefault(limit, []).append(s)
        for limit, group in again.items():
            for s, cands in zip(group, self._candidates([sources[s] for s in group], limit)):
                found[s] = cands
        return self._ranked(sources, found)

    def _candidates(self, sources: list[list[str]], limit: int) -> list[list[tuple[list[str], Optional[float]]]]:
        """Per source: CTranslate2's hypotheses under one output limit, as (pieces, log-prob), where the
        log-prob is None when CTranslate2 gives no usable one (``_ranked`` rescores those)."""
        o = self.opt
        found: list[list[tuple[list[str], Optional[float]]]] = []
        if limit == 0:  # only EOS may follow BOS
            found = [[([], None)] for _ in sources]
        else:
            if o.sampling:
                ct2_penalty = 0.0
                kwargs = dict(
                    beam_size=1,
                    num_hypotheses=o.nbest,
                    sampling_topk=o.top_k,
                    sampling_topp=o.top_p,
                    sampling_temperature=o.temperature,
                )
            else:
                beam = max(o.beam_size, o.nbest)
                ct2_penalty = 0.0 if beam == 1 else self._NEUTRAL_PENALTY
                kwargs = dict(beam_size=beam, num_hypotheses=beam)
            out = self._run(
                self.engine.translate_batch,
                sources,
                max_batch_size=o.batch_size,
                length_penalty=ct2_penalty,
                max_decoding_length=limit,
                min_decoding_length=0,
                max_input_length=0,
                return_scores=True,
                suppress_sequences=self.banned,
                **kwargs,
            )
            for result in out:
                # Undo CTranslate2's score / length ** penalty. Two kinds get no usable score (None): an empty
                # hypothesis under a penalty (-inf), and one cut at the limit, which CTranslate2 ends without
                # EOS where we force it (so its score lacks log p(EOS)).
                found.append(
                    [
                        (
                            pieces,
                            score * len(pieces) ** ct2_penalty
                            if (pieces or not ct2_penalty) and len(pieces) < limit
                            else None,
                        )
                        for pieces, score in zip(result.hypotheses, result.scores)
                    ]
                )
        return found

    def _ranked(self, sources: list[list[str]], found: list[list[tuple[list[str], Optional[float]]]]) -> list[list]:
        """Hypotheses from ``_candidates``' output: missing log-probs filled in, GNMT-penalised, best first."""
        o = self.opt
        missing = [(s, c) for s, cands in enumerate(found) for c, (_, lp) in enumerate(cands) if lp is None]
        if missing:
            scored = self._score([sources[s] for s, _ in missing], [found[s][c][0] for s, c in missing])
            for (s, c), (log_prob, _) in zip(missing, scored):
                found[s][c] = (found[s][c][0], log_prob)
        results = []
        for cands in found:
            hyps = [
                Hypothesis(
                    [self.tgt_ids.get(p, UNK) for p in pieces],
                    log_prob / length_penalty_of(len(pieces) + 1, o.length_penalty),
                    log_prob,
                    [],
                )
                for pieces, log_prob in cands
            ]
            hyps.sort(key=lambda h: h.score, reverse=True)
            results.append(hyps[: o.nbest])
        if self.exact_scores:
            kept = [(s, h) for s, hyps in enumerate(results) for h in hyps]
            targets = [[self.tgt_vocab[t] for t in h.tokens] for _, h in kept]
            scored = self._score([sources[s] for s, _ in kept], targets)
            for (_, h), (log_prob, token_log_probs) in zip(kept, scored):
                h.log_prob, h.token_log_probs = log_prob, token_log_probs
                h.score = log_prob / length_penalty_of(len(h.tokens) + 1, o.length_penalty)
            for hyps in results:
                hyps.sort(key=lambda h: h.score, reverse=True)
        return results

    def _run(self, method, *args, **kwargs):
        """A CTranslate2 call; its runtime failures (a missing CUDA library, out of memory) become one line."""
        try:
            return method(*args, **kwargs)
        except RuntimeError as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else err.__class__.__name__
            raise MtkitError(
                f"CTranslate2 failed running the model on {self.where} ({first}); on a GPU check "
                "that the CUDA libraries CTranslate2 was built for are installed, or use --device cpu "
                "or --engine torch"
            ) from None

    def _score(self, sources: list[list[str]], targets: list[list[str]]) -> list[tuple[float, list[float]]]:
        """(log-prob, token log-probs with EOS's last) of each target given its source: the model's own numbers."""
        scored = self._run(
            self.engine.score_batch, sources, targets, max_batch_size=self.opt.batch_size, max_input_length=0
        )
        return [(math.fsum(r.log_probs), list(r.log_probs)) for r in scored]
