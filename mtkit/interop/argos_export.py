"""`mtkit export RUN --format argos --output en_de.argosmodel`: a package that Argos Translate and LibreTranslate
install (``argostranslate.package.install_from_path``) and translate with, offline.

A package is a zip file holding one folder, which Argos Translate unpacks into its packages directory:

- ``model/``: the CTranslate2 model (``ct2_export.convert``, ``--quantization`` honoured), which Argos runs with its
  own search settings (beam 4, length penalty 0.2) and CTranslate2's default length limits (inputs of up to 1,024
  subwords: a sinusoidal position table is written that long; learned positions must be); it also holds
  ``mtkit_export.json`` and the SentencePiece model, so ``mtkit translate PACKAGE/model`` runs it too;
- ``sentencepiece.model``: Argos encodes the source and decodes the target with this one model, so the run must
  have one joint SentencePiece model (``data.joint_vocab: true``); a multilingual run's language tokens are control
  symbols in this copy (``tags_as_control``), so that they decode to no text;
- ``minisbd/<source>.onnx``: the sentence splitter. Argos Translate's default splitter, MiniSBD, looks for a model
  in this folder and downloads one only when there is none; this one is ``sentence_rules``'s rule (a sentence ends
  at . ! ? followed by a space and a capital), so splitting needs no download;
- ``metadata.json`` (the languages, their names, the package's version; ``target_prefix`` for a multilingual run,
  whose language token Argos forces as the decoder's first token and takes off the output) and ``README.md``.

A multilingual run is exported one direction at a time (``--target``, and ``--source`` where it has several
sources); its language token must be the decoder's first token (``data.target_tag: decoder``), which is where
Argos can put it. A model that also reads its source language as a token before the text (``data.source_tag``: an
imported M2M-100 or NLLB-200 model, or a run fine-tuned from one) gets it from CTranslate2 itself: the package's
``model/config.json`` has CTranslate2 add that token before every source (``add_source_bos``, the token as its
``bos_token``; ``source_token_first``), which Argos leaves alone; such a model's language tokens, numbered after
the SentencePiece pieces, are added to the package's SentencePiece model as control symbols. The zip is written to
a temporary sibling and renamed into place: whole or not at all.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import zipfile
from pathlib import Path
from typing import NamedTuple, Optional

from mtkit import config as cfgmod
from mtkit.errors import MtkitError
from mtkit.files import fsync_dir
from mtkit.interop import ct2_export, protobuf_wire, sentence_rules
from mtkit.interop.protobuf_wire import SPM_CONTROL, SPM_PIECE, SPM_PIECES, SPM_TYPE
from mtkit.languages import LISTED_IN_FULL, nearest_codes, run_sources
from mtkit.text.names import language_name
from mtkit.version import __version__

PACKAGE_VERSION = "1.0"
# Argos Translate leaves CTranslate2's length limits at their defaults: inputs cut at 1,024 subwords (EOS included),
# outputs at 256; so the model needs positions for 1,024 (a sinusoidal table is written that long)
ARGOS_MAX_INPUT = 1024
ARGOS_VERSION = "1.11.0"  # the Argos Translate release these packages are built for and tested with


class Direction(NamedTuple):
    """The direction a package translates, and the language tokens Argos must see for it."""

    source: str
    target: str
    target_prefix: str  # forced first in the target (metadata.json's target_prefix), or ""
    source_prefix: str  # first in every source (the model's add_source_bos), or ""


def package_languages(data, source: Optional[str], target: Optional[str]) -> Direction:
    """The direction a package translates and the tokens Argos must put first in the target and in the source.

    Args:
        data: the run config's ``data`` section.
        source: ``--source``, or None.
        target: ``--target``, or None.

    Returns:
        The ``Direction``: its target prefix is a multilingual run's language token of the target (``<2de>``,
        ``deu_Latn``), "" for a bilingual run; its source prefix is the source language's token of a model that
        reads it first in the source (``data.source_tag``: an imported M2M-100 or NLLB-200 model, or a run
        fine-tuned from one), else "".

    Raises:
        MtkitError: a multilingual run without ``--target``, with a language it does not translate, with no
            ``--source`` where several directions lead into the target, or with ``data.target_tag: source``; a
            bilingual run given other languages than its own.
    """
    if not data.multilingual:
        for flag, given, own in (("--source", source, data.src_lang), ("--target", target, data.tgt_lang)):
            if given is not None and given != own:
                raise MtkitError(f"{flag} {given!r}: this run translates {data.src_lang} -> {data.tgt_lang} only")
        return Direction(data.src_lang, data.tgt_lang, "", "")
    sources, targets = list(run_sources(data)), list(data.targets)
    if data.target_tag != "decoder":
        raise MtkitError(
            "data.target_tag is 'source': Argos Translate can force a language token only as the decoder's first "
            "token (its target_prefix), not in the source; export a run trained with target_tag: decoder"
        )
    if target is None:
        raise MtkitError(
            f"a multilingual run is exported one direction per package: pass --target (one of {_listed(targets)})"
        )
    if target not in targets:
        raise MtkitError(f"--target {target!r}: this run's targets are {_listed(targets, target)}")
    if source is None:  # the one source of the directions into target, or the run's one source
        if data.languages:
            into = [s for s in sources if s != target]
        else:
            into = list(dict.fromkeys(d.src_lang for d in data.directions if d.tgt_lang == target))
        if len(into) != 1 and len(sources) != 1:
            raise MtkitError(
                f"this run has several source languages: pass --source (one of {_listed(into or sources)})"
            )
        source = into[0] if len(into) == 1 else sources[0]
    if source not in sources:
        raise MtkitError(f"--source {source!r}: this run's source languages are {_listed(sources, source)}")
    if source == target:
        raise MtkitError(f"--source and --target are both {source!r}; a package translates between two languages")
    source_prefix = cfgmod.language_tag(source, data.tag_template) if data.source_tag else ""
    return Direction(source, target, cfgmod.language_tag(target, data.tag_template), source_prefix)


def _listed(codes: list[str], near: Optional[str] = None) -> str:
    """``codes`` for a message: all of them, or for many their count and the three nearest to ``near`` (difflib's
    ratio), or the first three."""
    if len(codes) <= LISTED_IN_FULL:
        return ", ".join(codes)
    if near is None:
        return f"{len(codes)} languages: {', '.join(codes[:3])}, ..."
    return f"{len(codes)} languages, the nearest {', '.join(nearest_codes(codes, near))}"


def metadata(source: str, target: str, target_prefix: str) -> dict:
    """The package's ``metadata.json``: the fields Argos Translate and LibreTranslate read.

    Args:
        source: the source language code.
        target: the target language code.
        target_prefix: the token forced first in the target, or "".

    Returns:
        The JSON object as a dict.
    """
    meta = {
        "package_version": PACKAGE_VERSION,
        "argos_version": ARGOS_VERSION,
        "type": "translate",
        "code": f"translate-{source}_{target}",
        "from_code": source,
        "from_name": language_name(source),
        "to_code": target,
        "to_name": language_name(target),
        "links": [],
    }
    if target_prefix:
        meta["target_prefix"] = target_prefix
    return meta


def readme(meta: dict, export_meta: dict, source_prefix: str = "") -> str:
    """The package's README.md (Argos Translate shows it as the package's description).

    Args:
        meta: the package's ``metadata.json`` (``metadata``).
        export_meta: what ``ct2_export.convert`` returned for its model.
        source_prefix: the token CTranslate2 puts first in every source (``source_token_first``), or "".

    Returns:
        The Markdown text.
    """
    model = "- model/: the CTranslate2 model (also an mtkit export: `mtkit translate model/`)"
    if source_prefix:
        model += f"; CTranslate2 puts the source language's token {source_prefix} first in every source itself"
    return (
        f"# {meta['from_name']} -> {meta['to_name']} ({meta['from_code']} -> {meta['to_code']})\n\n"
        f"A Transformer (update {export_meta['update']} of its run) exported by mtkit {__version__} for Argos "
        f"Translate as CTranslate2 {export_meta['quantization']}.\n\n"
        f"{model}\n"
        "- sentencepiece.model: the SentencePiece model of both languages\n"
        f"- minisbd/{meta['from_code']}.onnx: a rule-based sentence splitter for MiniSBD (a sentence ends at . ! ? "
        "followed by a space and a capital letter, or at a full-width 。！？), so that nothing is downloaded\n"
    )


def tags_as_control(model: bytes, tags: set[str], add: bool = False) -> bytes:
    """A SentencePiece model whose pieces ``tags`` are control symbols, which decode to no text.

    Argos Translate decodes a paragraph's sentences together and takes the forced first token (``target_prefix``)
    off the start of the text only; a language token that decodes to nothing leaves no trace after the first
    sentence either. No text contains the tags as such, and SentencePiece never cuts text into control symbols,
    so encoding is unchanged.

    Args:
        model: the bytes of a SentencePiece ``ModelProto``.
        tags: the pieces to make control symbols (a multilingual run's language tokens).
        add: append the tags the model lacks as control pieces of their own (an imported M2M-100 or NLLB-200
            model's language tokens, which its vocabulary numbers after the SentencePiece pieces); False: refuse
            a missing one.

    Returns:
        The model's bytes with those pieces' type set to CONTROL (and the missing ones after its last piece, where
        ``add``) and every other byte as it was.

    Raises:
        MtkitError: the bytes are not a SentencePiece model, or a tag is not one of its pieces (without ``add``).
    """
    out, found = [], set()
    try:
        for number, _, value, raw in protobuf_wire.fields(model):
            if number == SPM_PIECES:
                parts = list(protobuf_wire.fields(value))
                piece = next((v.decode("utf-8") for n, _, v, _ in parts if n == SPM_PIECE), None)
                if piece in tags:
                    found.add(piece)
                    body = b"".join(r for n, _, _, r in parts if n != SPM_TYPE)
                    raw = protobuf_wire.bytes_field(SPM_PIECES, body + protobuf_wire.int_field(SPM_TYPE, SPM_CONTROL))
            out.append(raw)
    except (ValueError, UnicodeDecodeError):
        raise MtkitError("the run's SentencePiece model does not read as one") from None
    missing = sorted(tags - found)
    if missing and not add:
        raise MtkitError(f"the SentencePiece model has no piece {missing[0]!r} (a language token)")
    return protobuf_wire.spm_with_pieces(b"".join(out), missing, SPM_CONTROL)


def package_spm(spm: bytes, tokenizer, data) -> bytes:
    """The package's SentencePiece model of a multilingual run: its language tokens made control symbols
    (``tags_as_control``). An imported model's vocabulary (M2M-100, NLLB-200) numbers its language tokens after the
    SentencePiece pieces: they are added as control pieces, with its PAD, BOS and EOS, so that the package decodes
    to the text mtkit's decoding gives, which leaves out every language token and special id.

    Args:
        spm: the bytes of the run's SentencePiece model.
        tokenizer: the run's ``Tokenizer``.
        data: the run config's ``data`` section.

    Returns:
        The bytes of the package's model.
    """
    from mtkit.tokenizer import BOS, EOS, PAD

    if tokenizer.vocab is None:
        return tags_as_control(spm, {cfgmod.language_tag(t, data.tag_template) for t in data.targets})
    names = ct2_export.ct2_vocabularies(tokenizer)[1]
    return tags_as_control(spm, set(tokenizer.vocab.tags) | {names[i] for i in (PAD, BOS, EOS)}, add=True)


def source_token_first(model_dir: Path, direction: Direction, tokenizer) -> None:
    """Have CTranslate2 itself put the source language's token first in every source, for a model that reads it
    there (``data.source_tag``), which Argos Translate does not add: CTranslate2's ``add_source_bos`` with that
    token as ``bos_token`` in the model's ``config.json`` (the decoder keeps its own start token,
    ``decoder_start_token``). The export's ``mtkit_export.json`` then names that one source language, and mtkit's
    CTranslate2 engine leaves the token out of what it passes (``Ct2Engine``).

    Args:
        model_dir: the package's CTranslate2 model (``ct2_export.convert``'s directory).
        direction: the package's direction (``package_languages``), with its source prefix.
        tokenizer: the model's ``Tokenizer``.

    Raises:
        MtkitError: the token is not in the model's vocabulary.
    """
    token = direction.source_prefix
    if token not in ct2_export.ct2_vocabularies(tokenizer)[0]:
        raise MtkitError(f"the model's vocabulary has no token {token!r} for --source {direction.source}")
    config_file = model_dir / "config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config.update(add_source_bos=True, bos_token=token)
    config_file.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    meta_file = model_dir / ct2_export.EXPORT_META
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    meta["runtime"]["sources"] = [direction.source]
    meta_file.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def _zip_tree(root: Path, top: str, out: Path) -> None:
    """Zip the folder ``root`` as ``top/...`` into ``out`` (deflated; entries in a fixed order), then fsync it."""
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.write(root, top)
        for path in sorted(root.rglob("*")):
            zf.write(path, f"{top}/{path.relative_to(root).as_posix()}")
    with open(out, "rb") as f:
        os.fsync(f.fileno())


def _check_out(out: Path, force: bool) -> None:
    if not out.exists():
        return
    if not force:
        raise MtkitError(f"{out}: already exists; pass --force to replace it")
    if not out.is_file() or not zipfile.is_zipfile(out):
        raise MtkitError(
            f"{out}: exists and is not an Argos Translate package; --force only replaces an earlier package "
            "(choose another --output)"
        )


def export_main(
    *,
    run: Path,
    out: Path,
    quantization: Optional[str],
    force: bool,
    source: Optional[str] = None,
    target: Optional[str] = None,
) -> Path:
    """``mtkit export --format argos``: write the Argos Translate package of a run's checkpoint to ``out``.

    Args:
        run: the run dir or checkpoint file (the checkpoint as translate picks it).
        out: the package file to write (``en_de.argosmodel``).
        quantization: one of ``ct2_export.QUANTIZATIONS``; None: float32.
        force: replace an earlier package at ``out``.
        source: ``--source`` (a multilingual run with several sources), or None.
        target: ``--target`` (a multilingual run), or None.

    Returns:
        ``out``.

    Raises:
        MtkitError: ``out`` exists (without ``force``, or is not a package), the run's languages do not make one
            direction (``package_languages``), the run has a source and a target SentencePiece model, or as
            ``ct2_export.convert``.
    """
    from mtkit import checkpoint as ckpt

    out = Path(out)
    _check_out(out, force)
    ct2_export.import_ctranslate2()
    file = ckpt.resolve(Path(run))
    cfg = cfgmod.from_dict(ckpt.read_metadata(file)["config"], f"{file} (embedded config)")
    ct2_export.check_exportable(cfg.model, str(file))
    direction = package_languages(cfg.data, source, target)
    src, tgt, prefix = direction.source, direction.target, direction.target_prefix
    if cfg.model.positions == "learned" and cfg.model.max_positions < ARGOS_MAX_INPUT:
        raise MtkitError(
            f"{file}: model.positions is 'learned' with max_positions {cfg.model.max_positions}; Argos Translate "
            f"feeds sentences of up to {ARGOS_MAX_INPUT} subwords, which this model has no positions for: export a "
            f"model with max_positions >= {ARGOS_MAX_INPUT}, or with sinusoidal, relative or rope positions"
        )
    if not cfg.data.joint_vocab:
        raise MtkitError(
            f"{file}: data.joint_vocab is false; Argos Translate encodes and decodes with one SentencePiece model, "
            "so export a run trained with data.joint_vocab: true"
        )
    meta = metadata(src, tgt, prefix)
    top = f"{meta['code']}-{PACKAGE_VERSION.replace('.', '_')}"

    out.parent.mkdir(parents=True, exist_ok=True)
    tag = hashlib.sha1(f"{os.getpid()}{out}".encode()).hexdigest()[:8]
    tmp_dir, tmp_zip = out.with_name(f".{out.name}.{tag}.tmp"), out.with_name(f".{out.name}.{tag}.zip.tmp")
    try:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        package = tmp_dir / top
        package.mkdir(parents=True)
        export_meta = ct2_export.convert(file, package / "model", quantization, table_positions=ARGOS_MAX_INPUT)
        files = export_meta["tokenizer"]
        if files["src"] != files["tgt"]:
            raise MtkitError(
                f"{file}: the run has a source and a target SentencePiece model; Argos Translate encodes and "
                "decodes with one, so export a run trained with data.joint_vocab: true"
            )
        spm = (package / "model" / files["src"]).read_bytes()
        if prefix:
            tokenizer = ct2_export.read_export(package / "model")[1]
            if direction.source_prefix:
                source_token_first(package / "model", direction, tokenizer)
            spm = package_spm(spm, tokenizer, cfg.data)
        (package / "sentencepiece.model").write_bytes(spm)
        (package / "minisbd").mkdir()
        (package / "minisbd" / f"{src}.onnx").write_bytes(sentence_rules.minisbd_model(src))
        (package / "metadata.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        (package / "README.md").write_text(readme(meta, export_meta, direction.source_prefix), encoding="utf-8")
        _zip_tree(package, top, tmp_zip)
        os.replace(tmp_zip, out)
        fsync_dir(out.parent)
    finally:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        tmp_zip.unlink(missing_ok=True)
    size = out.stat().st_size / 2**20
    print(
        f"exported {export_meta['checkpoint']} (update {export_meta['update']}) to {out} as an Argos Translate "
        f"package {src} -> {tgt} (CTranslate2 {export_meta['quantization']}), {size:.1f} MiB; install it with "
        f"argostranslate.package.install_from_path('{out}') (docs/argos.md)"
    )
    return out
