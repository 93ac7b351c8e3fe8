"""`mtkit extend-vocab`: new subwords and language codes in an imported model's vocabulary.

The small random NLLB-200 and M2M-100 models of test_m2m.py (and a multilingual MarianMT one of test_hf.py) are
imported and extended: each new subword comes out of the tokenizer as one piece, its rows are the mean of the rows
of the pieces that spelled it, old ids keep their ids and their logits, a new language code is a target and a source
of `mtkit translate` and of `mtkit prepare` for fine-tuning; every refusal is one line and exit code 2.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from mtkit.checkpoint import load_checkpoint
from mtkit.models.base import BOS, EOS
from test_m2m import build_m2m100, build_nllb, fine_tune_tree, imported_run, one_line_refusal, train_spm

TOKENS = ("▁Hund", "ürich")  # a word and a piece inside one, neither a piece of the toy SentencePiece model
NEW_LANGUAGE = {"nllb": "xxx_Latn", "m2m100": "xx"}
SOURCE = {"nllb": "eng_Latn", "m2m100": "en"}
OLD_ONLY = ("A dog runs in the park .", "Der Mann sitzt auf dem Ball .")  # spelled by old pieces only


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, one_thread) -> Path:
    root = tmp_path_factory.mktemp("extend")
    spm_model = train_spm(root)
    build_nllb(root / "nllb", spm_model)
    build_m2m100(root / "m2m100", spm_model)
    (root / "tokens.txt").write_text("\n".join(TOKENS) + "\n", encoding="utf-8")
    return root


def extended_run(workdir: Path, name: str) -> Path:
    """The import of the family ``name`` extended with TOKENS and its NEW_LANGUAGE (once per module)."""
    from mtkit.cli import main

    run, out = imported_run(workdir, name), workdir / f"extended-{name}"
    if not out.exists():
        flags = ("--add-tokens", workdir / "tokens.txt", "--add-language", NEW_LANGUAGE[name], "--output", out)
        assert main(["extend-vocab", str(run), *map(str, flags)]) == 0
    return out


@pytest.fixture(scope="module", params=["nllb", "m2m100"])
def extended(request, workdir):
    """(family, the import, its extended run)."""
    return request.param, imported_run(workdir, request.param), extended_run(workdir, request.param)


def test_new_subwords_come_out_as_one_piece_after_the_old_ids(extended):
    name, run, out = extended
    old, new = load_checkpoint(run), load_checkpoint(out)
    n = old.tokenizer.tgt_vocab_size
    assert new.tokenizer.vocab.pieces[:n] == old.tokenizer.vocab.pieces
    assert new.tokenizer.vocab.pieces[n:] == [
        *TOKENS,
        new.config.data.tag_template.replace("{lang}", NEW_LANGUAGE[name]),
    ]
    ids = {token: n + i for i, token in enumerate(TOKENS)}
    for token in TOKENS:
        assert len(old.tokenizer.encode_src([token.replace("▁", "")])[0]) > 1  # new: not one piece before
    assert new.tokenizer.encode_src(["Ein Hund ."])[0].count(ids["▁Hund"]) == 1
    assert ids["▁Hund"] in new.tokenizer.encode_src(["Hunde"])[0]  # kept whole wherever it occurs (documented)
    assert ids["ürich"] in new.tokenizer.encode_tgt(["Bürich"])[0]
    assert new.tokenizer.decode_tgt(new.tokenizer.encode_tgt(["Ein Hund in Bürich ."])) == ["Ein Hund in Bürich ."]
    for side in ("encode_src", "encode_tgt"):  # a text of old pieces keeps its ids
        assert getattr(new.tokenizer, side)(list(OLD_ONLY)) == getattr(old.tokenizer, side)(list(OLD_ONLY))
    assert new.config.data.vocab_size == n + 3 and new.metadata["src_vocab_size"] == n + 3
    record = new.metadata["vocab_extended"][-1]
    assert (record["tokens"], record["languages"]) == (list(TOKENS), [NEW_LANGUAGE[name]])
    assert json.loads((out / "vocab.marian.json").read_text(encoding="utf-8"))["added"][-1]["tokens"] == list(TOKENS)


def test_new_rows_are_the_mean_of_the_old_rows(extended):
    name, run, out = extended
    old, new = load_checkpoint(run), load_checkpoint(out)
    n = old.tokenizer.tgt_vocab_size
    before, after = old.model.state_dict(), new.model.state_dict()
    assert new.model.src_embed is new.model.tgt_embed and new.model.output is None  # still tied
    spelled = old.tokenizer.encode_tgt(["Hund"])[0]  # "▁Hund" as a word: the pieces of " Hund"
    codes = [old.tokenizer.vocab.ids[t] for t in old.tokenizer.vocab.tags]
    assert len(codes) == len(old.config.data.languages) > 2
    for key in ("tgt_embed.weight", "final_logits_bias"):
        assert torch.equal(after[key][:n], before[key])
        assert torch.allclose(after[key][n], before[key][spelled].mean(0), atol=1e-6)
        assert torch.allclose(after[key][n + 2], before[key][codes].mean(0), atol=1e-6)


def teacher_forced(loaded, family: str, target: str) -> list[torch.Tensor]:
    """The logits of OLD_ONLY translated into themselves, source language SOURCE, target ``target``."""
    tok, template = loaded.tokenizer, loaded.config.data.tag_template
    tag = tok.encode_tgt([template.replace("{lang}", target)])[0]
    src = tok.encode_src([f"{template.replace('{lang}', SOURCE[family])} {s}" for s in OLD_ONLY])
    tgt = tok.encode_tgt(list(OLD_ONLY))
    with torch.no_grad():
        return [loaded.model(torch.tensor([s + [EOS]]), torch.tensor([[BOS] + tag + t]))[0] for s, t in zip(src, tgt)]


@pytest.mark.compares
def test_old_ids_keep_their_logits_and_log_probs_among_them(extended):
    """Over the old ids the model is the one it was: the same logits, so the same log-probs among them (to 1e-5).
    The new ids take some probability, from every old id in one proportion: over the whole vocabulary each old
    log-prob at a position moves by one and the same amount."""
    name, run, out = extended
    old, new = load_checkpoint(run), load_checkpoint(out)
    n = old.tokenizer.tgt_vocab_size
    target = "deu_Latn" if name == "nllb" else "de"
    for before, after in zip(teacher_forced(old, name, target), teacher_forced(new, name, target)):
        assert torch.allclose(after[:, :n], before, atol=1e-5, rtol=0)
        assert torch.allclose(after[:, :n].log_softmax(-1), before.log_softmax(-1), atol=1e-5, rtol=0)
        shift = after.log_softmax(-1)[:, :n] - before.log_softmax(-1)
        assert torch.allclose(shift, shift[:, :1].expand_as(shift), atol=1e-5)
        assert bool((shift < 0).all())


def test_a_new_language_is_a_target_and_a_source(extended, run_cli):
    import mtkit

    name, _, out = extended
    new_language, source = NEW_LANGUAGE[name], SOURCE[name]
    flags = ("-b", 1, "--max-len-a", 0, "--max-len-b", 6, "--dtype", "float32")
    outputs = {}
    for src, tgt in ((source, new_language), (new_language, source)):
        done = run_cli("translate", out, "--source", src, "--target", tgt, *flags, stdin="\n".join(OLD_ONLY))
        assert done.code == 0, done.err
        outputs[src] = done.out.splitlines()
        assert len(outputs[src]) == len(OLD_ONLY)
    model = mtkit.load(out, source=source, beam_size=1, max_len_a=0, max_len_b=6, dtype="float32")
    assert new_language in model.targets and new_language in model.sources
    assert model.translate(list(OLD_ONLY), target=new_language) == outputs[source]


def test_fine_tuning_reads_the_new_language_from_init_from(workdir, tmp_path, write_config, run_cli):
    """data.directions into the new language with model.init_from the extended run: prepare encodes it with the
    new token, and training starts from the extended weights."""
    from mtkit import config as cfgmod
    from mtkit.models import build_model
    from mtkit.tokenizer import Tokenizer
    from mtkit.training.finetune import start_from

    name, out = "nllb", extended_run(workdir, "nllb")
    tree = fine_tune_tree(tmp_path, out)
    tree["training"].pop("lora")
    tree["data"]["directions"][0]["tgt_lang"] = NEW_LANGUAGE[name]
    config = write_config(tree)
    done = run_cli("prepare", config)
    assert done.code == 0, done.err
    tokenizer = Tokenizer.from_dir(tmp_path / "data")
    new = load_checkpoint(out)
    assert tokenizer.fingerprint() == new.tokenizer.fingerprint()
    assert tokenizer.encode_tgt([NEW_LANGUAGE[name]]) == [[new.tokenizer.vocab.ids[NEW_LANGUAGE[name]]]]
    cfg = cfgmod.load(config)
    model = build_model(cfg.model, tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, True)
    assert start_from(cfg, model, tokenizer) == new.path
    assert torch.equal(model.state_dict()["tgt_embed.weight"], new.model.state_dict()["tgt_embed.weight"])


def test_a_multilingual_marian_import_takes_subwords_and_a_target_language(tmp_path, one_thread, run_cli):
    """MarianMT: a source and a target SentencePiece model, each with the new subword; a new >>xxx<< target."""
    from test_hf import build_marian

    hf_dir = build_marian(tmp_path / "opus-mt-en-mul", tags=(">>deu<<", ">>fra<<"))
    run, out = tmp_path / "run", tmp_path / "run-extended"
    assert run_cli("import-hf", hf_dir, "--output", run).code == 0
    (tmp_path / "tokens.txt").write_text("▁Fahrradweg\n", encoding="utf-8")
    done = run_cli("extend-vocab", run, "--add-tokens", tmp_path / "tokens.txt", "--add-language", "spa")
    assert done.code == 0, done.err
    old, new = load_checkpoint(run), load_checkpoint(out)
    n = old.tokenizer.tgt_vocab_size
    assert new.tokenizer.encode_src(["Ein Fahrradweg ."])[0].count(n) == 1
    assert new.tokenizer.encode_tgt(["Ein Fahrradweg ."])[0].count(n) == 1
    assert [d.tgt_lang for d in new.config.data.directions][-1] == "spa"
    before, after = old.model.state_dict(), new.model.state_dict()
    spelled = old.tokenizer.encode_tgt(["Fahrradweg"])[0]  # one matrix for both sides: the target's spelling
    assert len(spelled) > 1 and new.model.src_embed is new.model.tgt_embed
    assert torch.allclose(after["tgt_embed.weight"][n], before["tgt_embed.weight"][spelled].mean(0), atol=1e-6)
    codes = [old.tokenizer.vocab.ids[t] for t in (">>deu<<", ">>fra<<")]
    assert torch.allclose(after["final_logits_bias"][n + 1], before["final_logits_bias"][codes].mean(0), atol=1e-6)
    done = run_cli("translate", out, "--target", "spa", "-b", 1, "--max-len-a", 0, "--max-len-b", 5, stdin="A dog .")
    assert done.code == 0, done.err


# --------------------------------------------------------------------------------------------- bad input
def not_an_import(run: Path, out: Path) -> Path:
    """A run holding the import's weights and tokenizer that no import wrote (as one fine-tuned from it)."""
    from mtkit import checkpoint as ckpt

    shutil.copytree(run, out)
    file = ckpt.resolve(out)
    bundle = ckpt.load(file)
    bundle.metadata.pop("imported_from")
    ckpt.save(file, bundle)
    return out


# case: (the subwords file's content: None for no such file, False for no --add-tokens; more flags; the message)
BAD = {
    "not an import": ("▁Hund\n", [], ("not an imported model", "mtkit import-hf")),
    "a subword the vocabulary has": ("▁Hund\n{old}\n", [], ("line 2", "already in the vocabulary")),
    "an empty file": ("\n\n", [], ("holds no subwords",)),
    "a missing file": (None, [], ("no such file",)),
    "invalid UTF-8": (b"\xe2\x96\x81Hund\nZ\xfcrich\n", [], ("line 2", "not valid UTF-8", "column 2")),
    "a known language": ("▁Hund\n", ["--add-language", "deu_Latn"], ("deu_Latn", "already has this language")),
    "a code of another form": ("▁Hund\n", ["--add-language", "xx"], ("'xx'", "fra_Latn")),
    "a subword twice": ("▁Hund\n▁Hund\n", [], ("line 2", "given twice", "line 1")),
    "whitespace in a subword": ("New York\n", [], ("line 1", "whitespace")),
    "a subword normalised away": ("▁ﬁsh\n", [], ("line 1", "never come out of the tokenizer")),
    "nothing to add": (False, [], ("nothing to add",)),
    "an --out that exists": ("▁Hund\n", [], ("already exists",)),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_input_is_refused_in_one_line(case, workdir, tmp_path, run_cli):
    content, flags, needles = BAD[case]
    run, tokens, out = imported_run(workdir, "nllb"), tmp_path / "tokens.txt", tmp_path / "out"
    if case == "not an import":
        run = not_an_import(run, tmp_path / "fine-tuned")
    if case == "an --out that exists":
        out.mkdir()
        (out / "config.yaml").write_text("{}\n", encoding="utf-8")
    if isinstance(content, bytes):
        tokens.write_bytes(content)
    elif isinstance(content, str):
        tokens.write_text(content.replace("{old}", load_checkpoint(run).tokenizer.vocab.pieces[20]), encoding="utf-8")
    if content is not False:
        flags = ["--add-tokens", tokens, *flags]
    done = run_cli("extend-vocab", run, *flags, "--output", out)
    one_line_refusal(done, *needles)
    assert not out.exists() or case == "an --out that exists"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


def test_export_hf_refuses_an_extended_m2m100_or_nllb_run(extended, tmp_path, run_cli):
    name, _, out = extended
    done = run_cli("export", out, "--format", "hf", "--output", tmp_path / "hf")
    one_line_refusal(done, "extend-vocab", "mtkit export RUN --output DIR")


@pytest.mark.compares
def test_ctranslate2_export_of_an_extended_run_translates_as_the_torch_engine(workdir, run_cli):
    pytest.importorskip("ctranslate2")
    import mtkit

    out = extended_run(workdir, "nllb")
    done = run_cli("export", out, "--output", workdir / "extended-ct2")
    assert done.code == 0, done.err
    opts = dict(source="eng_Latn", beam_size=1, max_len_a=0, max_len_b=6, threads=1)
    torch_model, ct2_model = mtkit.load(out, dtype="float32", **opts), mtkit.load(workdir / "extended-ct2", **opts)
    sources = [*OLD_ONLY, "Ein Hund in Bürich ."]
    for target in ("deu_Latn", NEW_LANGUAGE["nllb"]):
        want, got = (
            torch_model.translate_batch(sources, target=target),
            ct2_model.translate_batch(sources, target=target),
        )
        assert [t.hypotheses[0].tokens for t in got] == [t.hypotheses[0].tokens for t in want]
