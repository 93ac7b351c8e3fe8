"""Hugging Face MarianMT models: `mtkit import-hf`, `mtkit export --format hf` and fine-tuning with model.init_from,
checked against transformers' own MarianMTModel (a test dependency; nothing is downloaded).

- A small random MarianMT model (SentencePiece source and target models trained on 300 shipped Multi30k lines,
  a vocab.json built from them as MarianTokenizer expects, swish, a non-zero final_logits_bias) is saved and
  imported: the teacher-forced log-probs equal transformers' to LOG_PROB_TOL over the whole vocabulary, and greedy
  search equals generate(num_beams=1) token for token (parting only at a near-tie, conftest.py), through the
  Python API and `mtkit translate`.
- Exporting the import gives the original directory back (weights bit for bit, the same vocab.json); an mtkit-
  trained Transformer (interleaved sinusoids, relu) exports to a directory transformers loads and runs with the
  same log-probs and greedy outputs.
- Fine-tuning: prepare encodes with the imported tokenizer, train starts from the imported weights, resumes,
  translates and scores; a data dir prepared with another vocabulary is refused.
- Every refusal is one line and exit code 2.
"""

from __future__ import annotations

import gzip
import json
import pickle
from pathlib import Path

import pytest
import torch
import yaml

from conftest import LOG_PROB_TOL, NEAR_TIE, first_divergence
from mtkit.checkpoint import load_checkpoint
from mtkit.models.base import BOS, EOS, PAD

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.filterwarnings("ignore:Recommended. pip install sacremoses")
from transformers import MarianConfig, MarianMTModel, MarianTokenizer  # noqa: E402

DATA = Path(__file__).resolve().parent.parent / "data" / "multi30k"
MAX_NEW = 12  # output tokens compared (EOS excluded)


def multi30k(split: str, lang: str, n: int, skip: int = 0) -> list[str]:
    with gzip.open(DATA / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
        return [line.strip() for _, line in zip(range(n + skip), f)][skip:]


def build_marian(directory: Path, *, seed: int = 0, tags: tuple[str, ...] = (">>deu<<",), **overrides) -> Path:
    """A random MarianMT model with Marian's vocabulary layout (</s> 0, <unk> 1, ..., <pad> last), saved."""
    import sentencepiece as spm

    directory.mkdir(parents=True)
    for lang, size in (("en", 120), ("de", 140)):
        spm.SentencePieceTrainer.train(
            sentence_iterator=iter(multi30k("train", lang, 300)),
            model_prefix=str(directory / f"spm_{lang}"),
            vocab_size=size,
            model_type="unigram",
            unk_id=0,
            eos_id=1,
            bos_id=-1,
            minloglevel=2,
            num_threads=1,
        )
    vocab = {"</s>": 0, "<unk>": 1}
    for lang, name in (("en", "source.spm"), ("de", "target.spm")):
        sp = spm.SentencePieceProcessor(model_file=str(directory / f"spm_{lang}.model"))
        for i in range(2, sp.get_piece_size()):
            vocab.setdefault(sp.id_to_piece(i), len(vocab))
        (directory / name).write_bytes((directory / f"spm_{lang}.model").read_bytes())
    for tag in tags:
        vocab[tag] = len(vocab)
    vocab["<pad>"] = size = len(vocab)
    size += 1
    (directory / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    settings = dict(
        vocab_size=size,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=128,
        activation_function="swish",
        scale_embedding=True,
        pad_token_id=size - 1,
        decoder_start_token_id=size - 1,
        eos_token_id=0,
        forced_eos_token_id=0,
        init_std=0.6,  # a random model whose greedy outputs differ from sentence to sentence
    )
    torch.manual_seed(seed)
    model = MarianMTModel(MarianConfig(**{**settings, **overrides}))
    with torch.no_grad():
        model.final_logits_bias.normal_(0.0, 0.3)
    model.generation_config.bad_words_ids = [[size - 1]]
    model.save_pretrained(directory)
    MarianTokenizer(str(directory / "source.spm"), str(directory / "target.spm"), str(directory / "vocab.json"))
    return directory


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, one_thread) -> Path:
    root = tmp_path_factory.mktemp("hf")
    build_marian(root / "opus-mt-en-de")
    return root


@pytest.fixture(scope="module")
def imported(workdir) -> Path:
    from mtkit.cli import main

    assert main(["import-hf", str(workdir / "opus-mt-en-de"), "--output", str(workdir / "run")]) == 0
    return workdir / "run"


@pytest.fixture(scope="module")
def reference(workdir):
    hf_dir = workdir / "opus-mt-en-de"
    return MarianMTModel.from_pretrained(hf_dir).eval(), MarianTokenizer.from_pretrained(hf_dir)


SOURCES = multi30k("val", "en", 12)
TARGETS = multi30k("val", "de", 12)


def hf_log_probs(model, tok, sources, targets) -> tuple[list[torch.Tensor], list[list[int]]]:
    """Per sentence, transformers' (target length + 1, vocab) teacher-forced log-probs and the target ids. One
    sentence at a time: a padded batch rounds differently in float32, by up to 2e-4 on these random weights."""
    out, labels = [], []
    for source, target in zip(sources, targets):
        batch = tok([source], text_target=[target], return_tensors="pt")
        with torch.no_grad():
            out.append(model(**batch).logits.float().log_softmax(-1)[0])
        labels.append(batch["labels"][0].tolist())
    return out, labels


def mtkit_log_probs(model, src_ids: list[int], tgt_ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([src_ids + [EOS]]), torch.tensor([[BOS] + tgt_ids])).float().log_softmax(-1)[0]


def hf_greedy(model, tok, sources: list[str]) -> list[list[int]]:
    batch = tok(sources, return_tensors="pt", padding=True)
    with torch.no_grad():
        out = model.generate(**batch, num_beams=1, do_sample=False, max_new_tokens=MAX_NEW + 1)
    result = []
    for row in out.tolist():
        row = row[1:]  # the decoder start
        result.append(row[: row.index(model.config.eos_token_id)] if model.config.eos_token_id in row else row)
    return result


def mtkit_greedy(run: Path, sources: list[str]):
    import mtkit

    translator = mtkit.load(run, beam_size=1, max_len_a=0, max_len_b=MAX_NEW, device="cpu", threads=1, dtype="float32")
    ids = translator.engine.encode(sources)
    return ids, [hyps[0].tokens for hyps in translator.engine.translate_ids(ids)]


def assert_same_greedy(model, ids, ours: list[list[int]], theirs: list[list[int]]):
    """Token for token, except where the search meets a near-tie (each side within LOG_PROB_TOL)."""
    differing = 0
    for src, a, b in zip(ids, ours, theirs):
        divergence = first_divergence(model, src + [EOS], a, b)
        if divergence is not None:
            differing += 1
            assert divergence[1] <= NEAR_TIE, (a, b, divergence)
    assert differing <= len(ours) // 4
    assert len({tuple(x) for x in ours}) > 1  # the random model does not say the same thing to every sentence


# ------------------------------------------------------------------------------------------- import
def test_import_writes_a_run_directory(imported):
    assert sorted(p.name for p in imported.iterdir()) == [
        "checkpoints",
        "config.yaml",
        "spm.src.model",
        "spm.tgt.model",
        "vocab.marian.json",
    ]
    cfg = yaml.safe_load((imported / "config.yaml").read_text())
    assert (cfg["data"]["src_lang"], cfg["data"]["tgt_lang"]) == ("en", "de")
    model = cfg["model"]
    assert (model["activation"], model["norm"], model["sinusoidal_layout"]) == ("swish", "post", "halves")
    assert model["final_logits_bias"] and model["scale_embedding"] and model["tie_embeddings"]


def test_teacher_forced_log_probs_equal_transformers(imported, reference):
    hf_model, tok = reference
    loaded = load_checkpoint(imported)
    order = loaded.tokenizer.vocab.marian_ids  # the Marian id of each mtkit id (None: mtkit's own PAD row)
    assert order[0] is None and order[BOS] == tok.pad_token_id and order[EOS] == tok.eos_token_id
    theirs, labels = hf_log_probs(hf_model, tok, SOURCES, TARGETS)
    src_ids, tgt_ids = loaded.tokenizer.encode_src(SOURCES), loaded.tokenizer.encode_tgt(TARGETS)
    for i, (src, tgt, want) in enumerate(zip(src_ids, tgt_ids, theirs)):
        assert [order[t] for t in tgt + [EOS]] == labels[i]  # the same pieces
        got = mtkit_log_probs(loaded.model, src, tgt)
        assert torch.allclose(got[:, 1:], want[:, order[1:]], atol=LOG_PROB_TOL, rtol=0)
        assert bool((got[:, PAD] < -50).all())  # the row Marian does not have takes no probability


def test_greedy_equals_generate(imported, reference):
    hf_model, tok = reference
    loaded = load_checkpoint(imported)
    order = loaded.tokenizer.vocab.marian_ids
    back = {marian: ours for ours, marian in enumerate(order) if marian is not None}
    ids, ours = mtkit_greedy(imported, SOURCES)
    theirs = [[back[t] for t in row] for row in hf_greedy(hf_model, tok, SOURCES)]
    assert [[order[i] for i in row] for row in ids] == [r[:-1] for r in tok(SOURCES)["input_ids"]]
    assert_same_greedy(loaded.model, ids, ours, theirs)


def test_translate_cli_and_language_tags(imported, reference, run_cli):
    hf_model, tok = reference
    done = run_cli(
        "translate",
        imported,
        "-b",
        1,
        "--dtype",
        "float32",
        "--max-len-a",
        0,
        "--max-len-b",
        MAX_NEW,
        stdin="\n".join(SOURCES),
    )
    assert done.code == 0, done.err
    theirs = tok.batch_decode(
        [[hf_model.config.pad_token_id, *row] for row in hf_greedy(hf_model, tok, SOURCES)],
        skip_special_tokens=True,
        use_source_tokenizer=False,
    )
    same = sum(a == b for a, b in zip(done.out.splitlines(), theirs))
    assert len(done.out.splitlines()) == len(SOURCES) and same >= len(SOURCES) * 3 // 4
    loaded = load_checkpoint(imported)  # a leading >>lang<< tag is one token, as MarianTokenizer makes it
    tagged = ">>deu<< " + SOURCES[0]
    assert [loaded.tokenizer.vocab.marian_ids[i] for i in loaded.tokenizer.encode_src([tagged])[0]] == (
        tok([tagged])["input_ids"][0][:-1]
    )


def test_export_of_an_import_is_the_original(imported, workdir, run_cli):
    from safetensors.torch import load_file

    out = workdir / "back"
    assert run_cli("export", imported, "--format", "hf", "--output", out).code == 0
    original, back = workdir / "opus-mt-en-de", out
    assert json.loads((back / "vocab.json").read_text()) == json.loads((original / "vocab.json").read_text())
    for name in ("source.spm", "target.spm"):
        assert (back / name).read_bytes() == (original / name).read_bytes()
    want, got = load_file(original / "model.safetensors"), load_file(back / "model.safetensors")
    assert sorted(got) == sorted(want)
    assert all(torch.equal(got[k], want[k]) for k in want)
    tok = MarianTokenizer.from_pretrained(back)
    assert tok(SOURCES[:2])["input_ids"] == MarianTokenizer.from_pretrained(original)(SOURCES[:2])["input_ids"]


@pytest.mark.compares
def test_ctranslate2_export_of_an_import_decodes_as_the_torch_engine(imported, workdir, run_cli):
    """Marian's table (sines and cosines in halves), its non-zero fixed logit bias, swish, and a source and a target
    SentencePiece model behind one vocabulary file go to CTranslate2: its greedy outputs and log-probs equal the
    torch engine's."""
    pytest.importorskip("ctranslate2")
    import mtkit

    out = workdir / "ct2"
    done = run_cli("export", imported, "--output", out)
    assert done.code == 0, done.err
    assert {"source.spm.model", "target.spm.model", "vocab.json"} <= {p.name for p in out.iterdir()}
    options = dict(beam_size=1, max_len_a=0, max_len_b=MAX_NEW, threads=1)
    want = mtkit.load(imported, dtype="float32", **options).translate_batch(SOURCES)
    got = mtkit.load(out, **options).translate_batch(SOURCES)
    assert [t.text for t in got] == [t.text for t in want]
    assert len({t.text for t in got}) > 1
    for a, b in zip(got, want):
        assert a.hypotheses[0].log_prob == pytest.approx(b.hypotheses[0].log_prob, abs=1e-3)


# --------------------------------------------------------------------------- export of an mtkit model
@pytest.fixture(scope="module")
def trained_export(toy_run_workdir, tmp_path_factory):
    from mtkit.cli import main

    out = tmp_path_factory.mktemp("hf-export") / "toy-hf"
    assert main(["export", str(toy_run_workdir / "run"), "--format", "hf", "--output", str(out)]) == 0
    return out


def test_an_mtkit_model_exports_to_transformers(toy_run_workdir, trained_export, one_thread):
    run = toy_run_workdir / "run"
    loaded = load_checkpoint(run)
    hf_model = MarianMTModel.from_pretrained(trained_export).eval()
    tok = MarianTokenizer.from_pretrained(trained_export)
    assert (hf_model.config.pad_token_id, hf_model.config.decoder_start_token_id) == (PAD, BOS)
    sources = (toy_run_workdir / "corpus" / "test.en").read_text().splitlines()[:12]
    targets = (toy_run_workdir / "corpus" / "test.de").read_text().splitlines()[:12]
    theirs, _ = hf_log_probs(hf_model, tok, sources, targets)
    src_ids, tgt_ids = loaded.tokenizer.encode_src(sources), loaded.tokenizer.encode_tgt(targets)
    for src, tgt, want in zip(src_ids, tgt_ids, theirs):
        assert torch.allclose(mtkit_log_probs(loaded.model, src, tgt), want, atol=LOG_PROB_TOL, rtol=0)
    ids, ours = mtkit_greedy(run, sources)
    assert_same_greedy(loaded.model, ids, ours, hf_greedy(hf_model, tok, sources))


# ----------------------------------------------------------------------------------------- fine-tuning
@pytest.mark.slow
def test_fine_tune_an_import_prepare_train_resume_translate_score(imported, tmp_path, write_config, run_cli):
    corpus = {}
    for split, n, skip in (("train", 120, 1000), ("valid", 10, 0)):
        name = "train" if split == "train" else "val"
        for lang in ("en", "de"):
            path = tmp_path / f"{split}.{lang}"
            path.write_text("\n".join(multi30k(name, lang, n, skip)) + "\n", encoding="utf-8")
        corpus[split] = {"src": str(tmp_path / f"{split}.en"), "tgt": str(tmp_path / f"{split}.de")}
    training = dict(run_dir=str(tmp_path / "ft"), max_updates=3, save_every=3, validate_every=3, batch_tokens=500)
    tree = {
        "data": {"dir": str(tmp_path / "data"), "splits": corpus},
        "model": {"init_from": str(imported), "dropout": 0.0},
        "training": {**training, "lr": 1e-4, "warmup_updates": 1, "threads": 1, "valid_max_sentences": 4},
        "decoding": {"beam_size": 2, "device": "cpu", "threads": 1},
    }
    config = write_config(tree)
    assert run_cli("prepare", config).code == 0
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert manifest["tokenizer"]["vocab"] == "vocab.marian.json"
    assert manifest["vocab_size"]["tgt"] == load_checkpoint(imported).tokenizer.tgt_vocab_size
    first = run_cli("train", config)
    assert first.code == 0, first.err
    assert "model.init_from" in first.out
    start = load_checkpoint(imported).model.state_dict()
    after = load_checkpoint(tmp_path / "ft").model.state_dict()
    assert not torch.equal(start["encoder.0.ffn.fc1.weight"], after["encoder.0.ffn.fc1.weight"])
    assert torch.equal(start["final_logits_bias"], after["final_logits_bias"])  # fixed, as in Marian
    resumed = run_cli("train", "--resume", tmp_path / "ft", "--set", "training.max_updates=5")
    assert resumed.code == 0, resumed.err
    assert "resumed from ckpt_0000003" in resumed.out
    hyps = tmp_path / "hyps.de"
    assert run_cli("translate", tmp_path / "ft", "-i", corpus["valid"]["src"], "-o", hyps).code == 0
    assert len(hyps.read_text().splitlines()) == 10
    scored = run_cli("score", corpus["valid"]["tgt"], "-i", hyps, "--json")
    assert scored.code == 0 and "bleu" in json.loads(scored.out)
    # a data dir prepared with another vocabulary is refused before any update
    other = write_config({**tree, "data": {**tree["data"], "vocab_size": 100}, "model": TINY_MODEL}, "other.yaml")
    assert run_cli("prepare", other, "--force").code == 0
    refused = run_cli("train", config, "--set", f"training.run_dir={tmp_path / 'ft2'}")
    assert refused.code == 2 and "another vocabulary than model.init_from" in refused.err
    assert len(refused.err.strip().splitlines()) == 1


TINY_MODEL = {"arch": "transformer", "d_model": 16, "heads": 2, "encoder_layers": 1, "decoder_layers": 1, "ffn_dim": 32}


def test_init_from_refuses_another_architecture_and_a_missing_run(imported, tmp_path, write_config, run_cli):
    data = {"dir": str(tmp_path / "data"), "splits": {"train": {"src": "a", "tgt": "b"}}}
    differs = write_config({"data": data, "model": {"init_from": str(imported), "d_model": 64}})
    done = run_cli("prepare", differs)
    assert done.code == 2 and "model.d_model = 64 differs from 32" in done.err
    missing = write_config({"data": data, "model": {"init_from": str(tmp_path / "nowhere")}}, "missing.yaml")
    done = run_cli("prepare", missing)
    assert done.code == 2 and "model.init_from" in done.err and "not a run directory" in done.err


# --------------------------------------------------------------------------------------------- refusals
def one_line_refusal(result, *needles):
    assert result.code == 2, result
    assert len(result.err.strip().splitlines()) == 1 and "Traceback" not in result.err, result.err
    for needle in needles:
        assert needle in result.err, result.err


def copy_marian(workdir: Path, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(workdir / "opus-mt-en-de", tmp_path / "opus-mt-en-de"))


@pytest.mark.parametrize(
    "key, value, needle",
    [
        ("normalize_before", True, "normalize_before = true cannot be represented"),
        ("normalize_embedding", True, "normalize_embedding = true"),
        ("static_position_embeddings", False, "static_position_embeddings = false"),
        ("activation_function", "gelu_new", 'activation_function = "gelu_new"'),
        ("decoder_attention_heads", 2, "decoder_attention_heads = 2 differ"),
        ("model_type", "bart", 'model_type is "bart"'),
    ],
)
def test_import_refuses_what_mtkit_cannot_represent(workdir, tmp_path, run_cli, key, value, needle):
    hf_dir = copy_marian(workdir, tmp_path)
    config = json.loads((hf_dir / "config.json").read_text())
    (hf_dir / "config.json").write_text(json.dumps({**config, key: value}))
    one_line_refusal(run_cli("import-hf", hf_dir, "--output", tmp_path / "run"), "config.json", needle)
    assert not (tmp_path / "run").exists()


def test_a_marian_model_with_a_narrower_decoder_ffn_imports_and_decodes_as_transformers(tmp_path):
    """encoder_ffn_dim 64, decoder_ffn_dim 24 (a student's shape): the import keeps both, and greedy decoding
    gives transformers' tokens."""
    from mtkit.cli import main

    hf_dir = build_marian(tmp_path / "opus-mt-student", seed=3, decoder_ffn_dim=24)
    assert main(["import-hf", str(hf_dir), "--output", str(tmp_path / "run")]) == 0
    loaded = load_checkpoint(tmp_path / "run")
    assert (loaded.config.model.ffn_dim, loaded.config.model.decoder_ffn_dim) == (64, 24)
    assert loaded.model.decoder[0].ffn.fc1.out_features == 24 and loaded.model.encoder[0].ffn.fc1.out_features == 64
    model, tok = MarianMTModel.from_pretrained(hf_dir).eval(), MarianTokenizer.from_pretrained(hf_dir)
    back = {marian: ours for ours, marian in enumerate(loaded.tokenizer.vocab.marian_ids) if marian is not None}
    ids, ours = mtkit_greedy(tmp_path / "run", SOURCES)
    theirs = [[back[t] for t in row] for row in hf_greedy(model, tok, SOURCES)]  # Marian's ids -> mtkit's
    assert_same_greedy(loaded.model, ids, ours, theirs)


def test_import_refuses_missing_files_and_unsafe_pickles(workdir, tmp_path, run_cli):
    hf_dir = copy_marian(workdir, tmp_path)
    (hf_dir / "target.spm").unlink()
    one_line_refusal(run_cli("import-hf", hf_dir, "--output", tmp_path / "run"), "target.spm: not found")
    hf_dir = copy_marian(workdir, tmp_path / "b")
    (hf_dir / "model.safetensors").unlink()
    one_line_refusal(run_cli("import-hf", hf_dir, "--output", tmp_path / "run"), "no weights")
    # a pickle that would run code when unpickled: the weights-only loader refuses it, and so does import-hf
    (hf_dir / "pytorch_model.bin").write_bytes(pickle.dumps(Path("x")))
    one_line_refusal(
        run_cli("import-hf", hf_dir, "--output", tmp_path / "run"), "pytorch_model.bin: cannot be read safely"
    )
    assert not (tmp_path / "run").exists()


def test_import_refuses_to_overwrite_without_force(imported, workdir, run_cli):
    one_line_refusal(run_cli("import-hf", workdir / "opus-mt-en-de", "--output", imported), "already exists")
    assert run_cli("import-hf", workdir / "opus-mt-en-de", "--output", imported, "--force").code == 0


def test_import_reads_weights_only_pytorch_bins(imported, workdir, tmp_path, run_cli):
    from safetensors.torch import load_file

    hf_dir = copy_marian(workdir, tmp_path)
    torch.save(load_file(hf_dir / "model.safetensors"), hf_dir / "pytorch_model.bin")
    (hf_dir / "model.safetensors").unlink()
    assert run_cli("import-hf", hf_dir, "--output", tmp_path / "run").code == 0
    a = load_checkpoint(tmp_path / "run").model.state_dict()
    b = load_checkpoint(imported).model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize(
    "change, needle",
    [
        ({"norm": "pre"}, "model.norm = 'pre' cannot be expressed in Marian"),
        ({"positions": "learned"}, "model.positions = 'learned' cannot be expressed"),
        ({"arch": "bahdanau"}, "model.arch is 'bahdanau'"),
        ({"decoder_self": "ssru"}, "model.decoder_self = 'ssru' cannot be expressed"),
    ],
)
def test_export_refuses_what_marian_cannot_express(toy_run_workdir, tmp_path, run_cli, change, needle):
    from mtkit import checkpoint as ckpt
    from mtkit import config as cfgmod
    from mtkit.models import build_model

    bundle = ckpt.load(ckpt.resolve(toy_run_workdir / "run"))
    tree = bundle.metadata["config"]
    model_tree = {**tree["model"], **change}
    if change.get("arch") == "bahdanau":
        model_tree = {"arch": "bahdanau", "embed_dim": 16, "hidden_size": 16}
    cfg = cfgmod.from_dict({**tree, "model": model_tree})
    meta = bundle.metadata
    model = build_model(cfg.model, meta["src_vocab_size"], meta["tgt_vocab_size"], meta["joint_vocab"])
    file = tmp_path / "ckpt_0000001.safetensors"
    ckpt.save(file, ckpt.Bundle({**meta, "config": cfgmod.to_dict(cfg)}, model.state_dict(), bundle.tokenizer))
    one_line_refusal(run_cli("export", file, "--format", "hf", "--output", tmp_path / "out"), needle)
    assert not (tmp_path / "out").exists()


def test_a_narrower_shallower_decoder_exports_to_transformers(toy_run_workdir, tmp_path, run_cli, one_thread):
    """A student's shape (2 encoder layers, 1 decoder layer, decoder_ffn_dim 16; fresh weights): transformers
    computes the same log-probs."""
    from mtkit import checkpoint as ckpt
    from mtkit import config as cfgmod
    from mtkit.models import build_model

    bundle = ckpt.load(ckpt.resolve(toy_run_workdir / "run"))
    tree, meta = bundle.metadata["config"], bundle.metadata
    student = {"encoder_layers": 2, "decoder_layers": 1, "decoder_ffn_dim": 16}
    cfg = cfgmod.from_dict({**tree, "model": {**tree["model"], **student}})
    torch.manual_seed(0)
    model = build_model(cfg.model, meta["src_vocab_size"], meta["tgt_vocab_size"], meta["joint_vocab"]).eval()
    file = tmp_path / "ckpt_0000001.safetensors"
    ckpt.save(file, ckpt.Bundle({**meta, "config": cfgmod.to_dict(cfg)}, model.state_dict(), bundle.tokenizer))
    assert run_cli("export", file, "--format", "hf", "--output", tmp_path / "hf").code == 0
    hf_model = MarianMTModel.from_pretrained(tmp_path / "hf").eval()
    assert (hf_model.config.decoder_layers, hf_model.config.decoder_ffn_dim) == (1, 16)
    tok = MarianTokenizer.from_pretrained(tmp_path / "hf")
    sources = (toy_run_workdir / "corpus" / "test.en").read_text().splitlines()[:6]
    targets = (toy_run_workdir / "corpus" / "test.de").read_text().splitlines()[:6]
    theirs, _ = hf_log_probs(hf_model, tok, sources, targets)
    ours = load_checkpoint(file)
    src_ids, tgt_ids = ours.tokenizer.encode_src(sources), ours.tokenizer.encode_tgt(targets)
    for src, tgt, want in zip(src_ids, tgt_ids, theirs):
        assert torch.allclose(mtkit_log_probs(ours.model, src, tgt), want, atol=LOG_PROB_TOL, rtol=0)


def test_export_hf_refuses_quantization(toy_run_workdir, tmp_path, run_cli):
    done = run_cli("export", toy_run_workdir / "run", "--format", "hf", "-q", "int8", "--output", tmp_path / "o")
    one_line_refusal(done, "--quantization is for --format ctranslate2")
    one_line_refusal(
        run_cli("export", toy_run_workdir / "run", "--format", "onnx", "--output", tmp_path / "o"), "--format"
    )


def test_export_refuses_a_model_with_a_source_and_a_target_vocabulary(toy_run_workdir, workdir, tmp_path, run_cli):
    from mtkit import checkpoint as ckpt
    from mtkit import config as cfgmod
    from mtkit.models import build_model
    from mtkit.tokenizer import Tokenizer

    bundle = ckpt.load(ckpt.resolve(toy_run_workdir / "run"))
    separate = Tokenizer(workdir / "opus-mt-en-de" / "spm_en.model", workdir / "opus-mt-en-de" / "spm_de.model")
    assert not separate.joint
    tree = bundle.metadata["config"]
    cfg = cfgmod.from_dict({**tree, "data": {**tree["data"], "joint_vocab": False}})
    sizes = {"src_vocab_size": separate.src_vocab_size, "tgt_vocab_size": separate.tgt_vocab_size}
    model = build_model(cfg.model, sizes["src_vocab_size"], sizes["tgt_vocab_size"], False)
    meta = {**bundle.metadata, **sizes, "joint_vocab": False, "config": cfgmod.to_dict(cfg)}
    file = tmp_path / "ckpt_0000001.safetensors"
    ckpt.save(file, ckpt.Bundle(meta, model.state_dict(), separate.model_bytes()))
    one_line_refusal(
        run_cli("export", file, "--format", "hf", "--output", tmp_path / "out"), "data.joint_vocab = false cannot"
    )
    assert not (tmp_path / "out").exists()


def test_a_multilingual_opus_mt_model_keeps_its_language_tokens_as_targets(tmp_path, run_cli):
    """Several >>xxx<< tokens in the vocabulary: the import is a multilingual run whose targets they are."""
    import mtkit

    hf_dir = build_marian(tmp_path / "opus-mt-en-mul", tags=(">>deu<<", ">>fra<<", ">>ces<<"))
    assert run_cli("import-hf", hf_dir, "--output", tmp_path / "run").code == 0
    model = mtkit.load(tmp_path / "run", beam_size=1)
    assert model.targets == ("ces", "deu", "fra") and model.languages[0] == "en"
    found = model.translate_batch(SOURCES[:2], target="fra")
    assert all(t.source_tokens[0] == ">>fra<<" for t in found)  # the tag is one token, first in the source
    assert [t.text for t in found] != model.translate(SOURCES[:2], target="deu")
    with pytest.raises(mtkit.MtkitError, match="translates into ces, deu, fra; choose one"):
        model.translate(SOURCES[0])
