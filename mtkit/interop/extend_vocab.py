"""`mtkit extend-vocab RUN --add-tokens FILE --add-language CODE --output NEW_RUN`: an imported model (NLLB-200,
M2M-100, MarianMT) with new subwords and new language codes in its vocabulary, as a new run directory.

An import cuts text with its SentencePiece model(s) and numbers the pieces through its vocabulary file
(``tokenizer.Vocab``). A new subword becomes a user-defined piece of each SentencePiece model (written into the
``ModelProto`` with ``protobuf_wire``), which SentencePiece keeps whole wherever it occurs in the text, and the next
id of the vocabulary. A new language code becomes the model's token for it (``xxx_Latn``, ``__xx__``, ``>>xxx<<``),
the next id too, read whole at the start of a line as the import's own codes are, and a language of the run's
config (``data.languages``; a multilingual MarianMT model's ``data.directions``). Old ids keep their ids: the new
ones come after them.

The new rows of the embeddings, of the output layer where it is not tied to them, and of the fixed logits bias are
the mean of the rows of the pieces that spelled the new subword before (as the subword is cut inside a text:
``▁word`` as a word, ``word`` inside one), or for a language code the mean of the model's language codes' rows. The
model computes what it computed for every text the old pieces spell: the same logits of the old ids, so the same
log-probabilities among them; the probability the new ids take (their logits are those of an average of pieces) is
taken from all old ids in one proportion.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional, Sequence

import sentencepiece as spm
import torch

from mtkit import checkpoint as ckpt
from mtkit import config as cfgmod
from mtkit.errors import MtkitError
from mtkit.interop import protobuf_wire
from mtkit.languages import language_tag
from mtkit.models import build_model
from mtkit.tokenizer import UNK, Tokenizer

CHECKPOINT = "ckpt_0000000.safetensors"
# SentencePiece's ModelProto: normalizer_spec (field 3: add_dummy_prefix 3, remove_extra_whitespaces 4)
SPM_NORMALIZER, NORM_DUMMY_PREFIX, NORM_EXTRA_WHITESPACES = 3, 3, 4
CODES = {  # the language codes each family of imports names, as a pattern
    "nllb": re.compile(r"[a-z]{2,3}_[A-Z][a-z]{3}"),  # fra_Latn
    "m2m100": re.compile(r"[a-z]{2,3}"),  # fr, ast
    "marian": re.compile(r"[a-z]{2,3}(_[A-Za-z]{4})?"),  # deu, zho_Hant
}
EXAMPLES = {"nllb": "fra_Latn", "m2m100": "fr", "marian": "deu"}
# tensors with a row per id of the vocabulary, and the side whose SentencePiece model spells a new subword for them
VOCAB_ROWS = {"src_embed.weight": "src", "tgt_embed.weight": "tgt", "output.weight": "tgt", "final_logits_bias": "tgt"}


def read_tokens(path: Path) -> list[tuple[int, str]]:
    """The subwords of a file with one a line: (line number, subword); blank lines are skipped.

    Raises:
        MtkitError: no such file, bytes that are not UTF-8 (the line and column named), a subword with whitespace
            in it or given twice, or no subword at all.
    """
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise MtkitError(f"--add-tokens {path}: no such file") from None
    except OSError as err:
        raise MtkitError(f"--add-tokens {path}: cannot be read ({err.strerror or err})") from None
    tokens: list[tuple[int, str]] = []
    first: dict[str, int] = {}
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8").removesuffix("\r").removeprefix("\ufeff" if number == 1 else "")
        except UnicodeDecodeError as err:
            raise MtkitError(
                f"{path}, line {number}: not valid UTF-8 (byte 0x{raw[err.start]:02x} at column {err.start + 1}); "
                "save the file as UTF-8"
            ) from None
        if not line.strip():
            continue
        if any(c.isspace() for c in line):
            raise MtkitError(
                f"{path}, line {number}: {line!r} holds whitespace; write one subword a line, with ▁ (U+2581) "
                "where it starts a word, as SentencePiece writes its pieces (▁Zürich)"
            )
        if line in first:
            raise MtkitError(f"{path}, line {number}: {line!r} is given twice (first on line {first[line]})")
        first[line] = number
        tokens.append((number, line))
    if not tokens:
        raise MtkitError(f"--add-tokens {path}: the file holds no subwords (one a line)")
    return tokens


def with_pieces(model: bytes, pieces: Sequence[str]) -> bytes:
    """A SentencePiece model with ``pieces`` added after its own as user-defined pieces (kept whole in any text).

    Raises:
        MtkitError: the bytes are not a SentencePiece model.
    """
    try:
        return protobuf_wire.spm_with_pieces(model, pieces, protobuf_wire.SPM_USER_DEFINED)
    except ValueError:
        raise MtkitError("the run's SentencePiece model does not read as one") from None


def _speller(model: bytes) -> spm.SentencePieceProcessor:
    """The SentencePiece model cutting a subword as it is cut inside a text: no word start added before it, its
    spaces (``▁``) kept (a normalizer_spec written after the model's is merged into it, as protobuf reads one)."""
    spec = protobuf_wire.int_field(NORM_DUMMY_PREFIX, 0) + protobuf_wire.int_field(NORM_EXTRA_WHITESPACES, 0)
    return spm.SentencePieceProcessor(model_proto=model + protobuf_wire.bytes_field(SPM_NORMALIZER, spec))


def _family(tokenizer) -> Optional[str]:
    """The family of an import's tokenizer ("nllb", "m2m100" or "marian"); None for any other tokenizer."""
    if tokenizer.vocab is None:
        return None
    facts = json.loads(tokenizer.vocab.blob.decode("utf-8")).get("hf")
    if isinstance(facts, dict) and facts.get("family") in ("nllb", "m2m100"):
        return facts["family"]
    return "marian"


def _check_languages(languages: Sequence[str], family: str, cfg, vocab: dict, pieces: Sequence[str]) -> list[str]:
    """The tokens of the new language codes, each checked: of its family's form, not known, not given twice."""
    data = cfg.data
    if languages and family == "marian" and not data.directions:
        raise MtkitError(
            f"--add-language {languages[0]}: this MarianMT model translates {data.src_lang} -> {data.tgt_lang} "
            "only and has no language tokens; a multilingual one (>>xxx<< tokens) takes new target languages"
        )
    known = set(data.languages) | set(data.targets) | {d.src_lang for d in data.directions}
    tags = []
    for i, code in enumerate(languages):
        if not CODES[family].fullmatch(code):
            raise MtkitError(
                f"--add-language {code!r}: not a language code of this model's form ({EXAMPLES[family]}, whose "
                f"token is {language_tag(EXAMPLES[family], data.tag_template)!r})"
            )
        tag = language_tag(code, data.tag_template)
        if code in known or tag in vocab:
            raise MtkitError(f"--add-language {code}: the model already has this language (its token {tag!r})")
        if code in languages[:i]:
            raise MtkitError(f"--add-language {code} is given twice")
        if tag in pieces:
            raise MtkitError(f"--add-language {code}: its token {tag!r} is one of the subwords of --add-tokens too")
        tags.append(tag)
    return tags


def _is_piece(sp: spm.SentencePieceProcessor, piece: str) -> bool:
    return sp.id_to_piece(sp.piece_to_id(piece)) == piece


def _spellings(old, new, blobs: dict, tokens: list[tuple[int, str]], where: str) -> dict[str, list[list[int]]]:
    """{side: the old ids that spelled each new subword}: what each side's old SentencePiece model cut it into.

    Raises:
        MtkitError: a subword that the new tokenizer does not give for its own text (SentencePiece normalises a
            text before it looks for user-defined pieces in it).
    """
    spellings = {}
    for side in ("src", "tgt"):
        speller = _speller(blobs.get(side, blobs["src"]))
        encode = new.encode_src if side == "src" else new.encode_tgt
        rows = []
        for number, token in tokens:
            text = token.replace("\u2581", " ")
            spelled = [old.vocab.ids.get(p, UNK) for p in speller.encode(text, out_type=str)]
            if new.vocab.ids[token] not in encode([text])[0] or not spelled:
                raise MtkitError(
                    f"{where}, line {number}: {token!r} would never come out of the tokenizer: SentencePiece "
                    "normalises a text before cutting it; add the subword as it reads normalised"
                )
            rows.append(spelled)
        spellings[side] = rows
    return spellings


def _new_config(cfg, languages: Sequence[str], size: int):
    """``cfg`` with the new vocabulary size and languages (a many-to-many model: data.languages; a multilingual
    MarianMT model: a direction from its source language into each)."""
    tree = cfgmod.to_dict(cfg)
    data = tree["data"]
    data["vocab_size"] = size
    if data.get("languages"):
        data["languages"] = [*data["languages"], *languages]
    elif languages:
        sources = list(dict.fromkeys(d["src_lang"] for d in data["directions"]))
        data["directions"] = [
            *data["directions"],
            *({"src_lang": s, "tgt_lang": c} for s in sources for c in languages),
        ]
    return cfgmod.from_dict(tree)


def _new_rows(table: torch.Tensor, sources: list[list[int]]) -> torch.Tensor:
    """``table`` (rows by id) with a row after them for each entry of ``sources``: the mean of the rows it names."""
    rows = [table[ids].double().mean(0).to(table.dtype) for ids in sources]
    return torch.cat([table, torch.stack(rows)]) if rows else table


def extend(bundle: ckpt.Bundle, file: Path, tokens: list[tuple[int, str]], languages: list[str], where: str):
    """The checkpoint of an import with new subwords and language codes.

    Args:
        bundle: the import's checkpoint, read from ``file``.
        file: where it was read from, for messages.
        tokens: (line number, subword) of ``read_tokens``.
        languages: the new language codes.
        where: the subwords' file, for messages.

    Returns:
        (the new bundle, its config, its tokenizer).

    Raises:
        MtkitError: ``bundle`` is not an import's; a subword already in the vocabulary or that would never come out
            of the tokenizer; a language code the model has, given twice or not of its family's form; a language
            for a bilingual MarianMT model.
    """
    meta = bundle.metadata
    cfg = cfgmod.from_dict(meta["config"], f"{file} (embedded config)")
    old = Tokenizer.from_model_bytes(bundle.tokenizer)
    family = _family(old)
    if not meta.get("imported_from") or family is None:
        raise MtkitError(
            f"{file}: not an imported model; mtkit extend-vocab extends the vocabulary of a run made by mtkit "
            "import-hf (NLLB-200, M2M-100, MarianMT): extend the import, then fine-tune it (model.init_from)"
        )
    data = json.loads(old.vocab.blob.decode("utf-8"))
    vocab, blobs = data["vocab"], old.model_bytes()
    models = [spm.SentencePieceProcessor(model_proto=blob) for side, blob in blobs.items() if side != "vocab"]
    for number, token in tokens:
        if token in vocab or any(_is_piece(sp, token) for sp in models):
            raise MtkitError(f"{where}, line {number}: {token!r} is already in the vocabulary")
    pieces = [token for _, token in tokens]
    tags = _check_languages(languages, family, cfg, vocab, pieces)
    for piece in [*pieces, *tags]:  # after every id the vocabulary has: old ids keep theirs
        vocab[piece] = len(vocab)
    if family != "marian":  # M2M-100's and NLLB-200's codes are read whole as the first word of a line
        data["tags"] = [*data.get("tags", []), *tags]
    data["added"] = [*data.get("added", []), {"tokens": pieces, "languages": list(languages)}]
    new_blobs = {side: with_pieces(blob, pieces) for side, blob in blobs.items() if side != "vocab"}
    new_blobs["vocab"] = json.dumps(data, ensure_ascii=False, indent=0).encode("utf-8")
    new = Tokenizer.from_model_bytes(new_blobs)
    old_n, new_n = old.tgt_vocab_size, new.tgt_vocab_size
    assert new.vocab.pieces[:old_n] == old.vocab.pieces and new_n == old_n + len(pieces) + len(tags)

    codes = [old.vocab.ids[t] for t in (language_tag(c, cfg.data.tag_template) for c in cfg.data.targets)]
    sources = {side: rows + [codes] * len(tags) for side, rows in _spellings(old, new, blobs, tokens, where).items()}
    state = dict(bundle.model)
    tied = state.get("src_embed.weight") is state.get("tgt_embed.weight")  # one matrix: the target side's spelling
    for name, side in VOCAB_ROWS.items():
        if name in state:
            state[name] = _new_rows(state[name], sources["tgt" if tied else side])
    new_cfg = _new_config(cfg, languages, new_n)
    model = build_model(new_cfg.model, new_n, new_n, True)
    ckpt.load_weights(model, state, file)
    record = {"from": str(file), "tokens": pieces, "languages": list(languages)}
    new_meta = {
        **meta,
        "config": cfgmod.to_dict(new_cfg),
        "src_vocab_size": new_n,
        "tgt_vocab_size": new_n,
        "tokenizer_fingerprint": new.fingerprint(),
        "vocab_extended": [*meta.get("vocab_extended", []), record],
    }
    return ckpt.Bundle(new_meta, model.state_dict(), new.model_bytes()), new_cfg, new


def extend_main(run: Path, *, out: Optional[Path], tokens_file: Optional[Path], languages: Sequence[str]) -> Path:
    """``mtkit extend-vocab``: write the import ``run`` with new subwords and language codes to a new run directory.

    The run is written to a temporary sibling of ``out`` and renamed into place: whole or not at all. It holds one
    checkpoint (update 0), its config (the new ``data.vocab_size`` and languages), the tokenizer files; the
    checkpoint's metadata ``vocab_extended`` and the vocabulary file's ``added`` record what was added.

    Args:
        run: the imported run directory (or its checkpoint file).
        out: the new run directory; None: RUN-extended beside ``run``.
        tokens_file: the new subwords, one a line, or None.
        languages: the new language codes (``--add-language``, repeatable).

    Returns:
        ``out``.

    Raises:
        MtkitError: nothing to add, ``out`` exists and is not an empty folder, a missing or empty subwords file,
            one that is not UTF-8 or repeats a subword, or as ``extend``.
    """
    run = Path(run)
    if tokens_file is None and not languages:
        raise MtkitError("nothing to add: give --add-tokens FILE (one subword a line) and/or --add-language CODE")
    if out is None:
        if not run.is_dir():
            raise MtkitError(f"{run}: not a run directory; name the new run directory with --output")
        out = run.resolve().with_name(f"{run.resolve().name}-extended")
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise MtkitError(
            f"--output {out}: already exists; mtkit extend-vocab writes a new run directory and never over a run "
            "(choose another --output)"
        )
    tokens = read_tokens(tokens_file) if tokens_file is not None else []
    file = ckpt.resolve(run)
    bundle, cfg, tokenizer = extend(ckpt.load(file), file, tokens, list(languages), str(tokens_file))
    ckpt.save_run(out, cfg, tokenizer, bundle, CHECKPOINT, "extend")
    size = bundle.metadata["tgt_vocab_size"]
    added = f"{len(tokens)} subword(s)" + (f" and language(s) {', '.join(languages)}" if languages else "")
    hint = ""
    if languages:
        source = f" --source {cfg.data.languages[0]}" if cfg.data.source_tag else ""
        hint = f"; translate with: mtkit translate {out}{source} --target {languages[0]}"
    print(f"added {added} to {file} ({size - len(tokens) - len(languages)} -> {size} ids) -> {out}{hint}")
    return out
