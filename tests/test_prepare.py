"""`mtkit prepare`: layout and manifest, cleaning filters, one-line errors, no-op reruns, atomicity, HF inputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import toy_pairs, write_lines
from mtkit import config as cfgmod
from mtkit.data import prepare as datamod
from mtkit.data.batches import ParallelData
from mtkit.data.prepare import prepare
from mtkit.errors import MtkitError
from mtkit.tokenizer import BATCH_ENCODE_FROM, Tokenizer


def one_line_error(result, *fragments):
    """Exit code 2 and a single stderr line containing every fragment."""
    assert result.code == 2, (result.code, result.err)
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert "Traceback" not in result.err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]


def snapshot(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in sorted(directory.iterdir())}


# ----------------------------------------------------------------------------------------- happy path
def test_prepare_writes_layout_and_manifest(tmp_path, toy_config, run_cli):
    result = run_cli("prepare", toy_config())
    assert result.code == 0, result.err
    assert "train" in result.out and "valid" in result.out  # the summary table

    data_dir = tmp_path / "data"
    manifest = json.loads((data_dir / "manifest.json").read_text())
    assert manifest["version"] == datamod.FORMAT_VERSION
    assert (manifest["src_lang"], manifest["tgt_lang"], manifest["joint_vocab"]) == ("en", "de", True)
    assert manifest["tokenizer"] == {"src": "spm.model", "tgt": "spm.model"}
    assert manifest["vocab_size"] == {"src": 100, "tgt": 100}
    assert manifest["dtype"] == {"src": "uint16", "tgt": "uint16"}
    assert len(manifest["inputs_fingerprint"]) == 64
    for split, n in (("train", 300), ("valid", 30), ("test", 30)):
        entry = manifest["splits"][split]
        assert entry["pairs_read"] == n
        assert entry["bad_lines_skipped"] == 0
        for lang in ("en", "de"):
            idx = np.fromfile(data_dir / f"{split}.{lang}.idx", dtype=np.int64)
            tokens = np.fromfile(data_dir / f"{split}.{lang}.bin", dtype=np.uint16)
            assert len(idx) == entry["pairs_kept"] + 1 and idx[0] == 0 and idx[-1] == len(tokens)
            assert (tokens >= 4).all()  # no PAD/UNK/BOS/EOS stored
        assert entry["src_tokens"] == len(np.fromfile(data_dir / f"{split}.en.bin", dtype=np.uint16))
        assert (data_dir / f"{split}.en.txt").exists() == (split != "train")
    assert set(manifest["splits"]["train"]["filtered"]) == set(datamod.FILTER_REASONS)

    tok = Tokenizer.from_dir(data_dir)
    assert tok.joint and tok.src_vocab_size == tok.tgt_vocab_size == 100
    assert tok.src_pieces([0, 1, 2, 3]) == ["<pad>", "<unk>", "<s>", "</s>"]
    assert len(tok.fingerprint()) == 64 and tok.fingerprint() == manifest["tokenizer_fingerprint"]

    # the token arrays decode back to the cleaned references, line for line
    valid = ParallelData(data_dir, "valid")
    refs = valid.text_path("tgt").read_text(encoding="utf-8").splitlines()
    assert refs == [p[1] for p in toy_pairs(30, seed=1)]
    assert tok.decode_tgt([valid.tgt(i) for i in range(len(valid))]) == refs
    assert valid.reference_lines() == refs

    # a checkpoint carries the model bytes; the rebuilt tokenizer is the same one
    blobs = tok.model_bytes()
    assert list(blobs) == ["src"] and blobs["src"] == (data_dir / "spm.model").read_bytes()
    again = Tokenizer.from_model_bytes(blobs)
    assert again.joint and again.fingerprint() == tok.fingerprint()
    assert again.encode_src(refs[:3]) == tok.encode_src(refs[:3])
    assert tok.decode_tgt([[2, *tok.encode_tgt(["Ein Hund ."])[0], 3, 0, 10_000]]) == ["Ein Hund ."]
    # many sequences are decoded in one threaded call, a few one by one: the same texts, specials dropped alike
    many = [[2, *ids, 3, 0] for ids in tok.encode_tgt(refs * 10)] + [[], [0, 1]]
    assert len(many) >= BATCH_ENCODE_FROM
    assert tok.decode_tgt(many) == [t for seq in many for t in tok.decode_tgt([seq])] == [*refs * 10, "", ""]


def test_separate_vocabularies_and_gzip_input(tmp_path, write_parallel, write_config, run_cli):
    src, tgt = write_parallel("train", n=300, gz=True)
    cfg = write_config(
        {
            "data": {
                "dir": str(tmp_path / "data"),
                "vocab_size": 60,
                "joint_vocab": False,
                "splits": {"train": {"src": str(src), "tgt": str(tgt)}},
            }
        }
    )
    result = run_cli("prepare", cfg)
    assert result.code == 0, result.err
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert manifest["tokenizer"] == {"src": "spm.en.model", "tgt": "spm.de.model"}
    assert manifest["splits"]["train"]["pairs_read"] == 300
    tok = Tokenizer.from_dir(tmp_path / "data")
    assert not tok.joint and tok.src_vocab_size == tok.tgt_vocab_size == 60
    data = ParallelData(tmp_path / "data", "train")
    assert tok.decode_tgt([data.tgt(0)]) == [toy_pairs(300)[0][1]]
    again = Tokenizer.from_model_bytes(tok.model_bytes())
    assert not again.joint and again.fingerprint() == tok.fingerprint()
    assert again.decode_tgt([data.tgt(0)]) == tok.decode_tgt([data.tgt(0)])
    with pytest.raises(MtkitError, match="keeps no text"):
        data.reference_lines()


def test_cleaning_and_train_only_filters(tmp_path, write_parallel, write_config, run_cli):
    good = toy_pairs(200)
    train = good + [
        ("  A   dog\t runs .  ", "Ein Hund läuft ."),  # kept, whitespace normalised
        ("", "Ein Hund ."),
        ("   ", "Hund"),  # empty
        ("A dog . " * 80, "Ein Hund ."),  # over max_chars
        good[0],  # exact duplicate
        (" ".join(["dog"] * 90), " ".join(["Hund"] * 90)),  # over max_tokens subwords
        ("A dog .", "Ein Hund ist mit der Katze und dem Ball im Garten neben dem Baum ."),  # length ratio > 3
    ]
    valid = [("A dog .", "Ein Hund ."), ("", ""), ("A  cat .", "Eine   Katze .")]
    src, tgt = write_parallel("train", pairs=train)
    vsrc, vtgt = write_parallel("valid", pairs=valid)
    cfg = write_config(
        {
            "data": {
                "dir": str(tmp_path / "data"),
                "vocab_size": 100,
                "max_chars": 500,
                "max_tokens": 80,
                "max_length_ratio": 3.0,
                "dedup": True,
                "splits": {"train": {"src": str(src), "tgt": str(tgt)}, "valid": {"src": str(vsrc), "tgt": str(vtgt)}},
            }
        }
    )

    result = run_cli("prepare", cfg)
    assert result.code == 0, result.err
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    entry = manifest["splits"]["train"]
    assert entry["pairs_read"] == len(train)
    assert entry["filtered"] == {"empty": 2, "max_chars": 1, "duplicate": 1, "max_tokens": 1, "length_ratio": 1}
    assert entry["pairs_kept"] == len(train) - 6
    assert "filtered: train empty: 2" in result.out

    # valid is kept whole: the empty pair stays, whitespace is normalised
    v = manifest["splits"]["valid"]
    assert (v["pairs_read"], v["pairs_kept"], v["filtered"]) == (3, 3, {})
    refs = (tmp_path / "data" / "valid.de.txt").read_text(encoding="utf-8").split("\n")
    assert refs == ["Ein Hund .", "", "Eine Katze .", ""]
    data = ParallelData(tmp_path / "data", "valid")
    assert data.src_lengths[1] == data.tgt_lengths[1] == 0

    train_data = ParallelData(tmp_path / "data", "train")
    tok = Tokenizer.from_dir(tmp_path / "data")
    kept_sources = tok.decode_src([train_data.src(i) for i in range(len(train_data))])
    assert "A dog runs ." in kept_sources
    assert (train_data.src_lengths <= 80).all() and (train_data.tgt_lengths <= 80).all()


# ------------------------------------------------------------------------------------ one-line errors
def test_parallel_files_of_different_lengths(tmp_path, write_parallel, write_config, run_cli):
    src, tgt = write_parallel("train", n=50)
    write_lines(tgt, tgt.read_text(encoding="utf-8").splitlines()[:47])
    cfg = write_config(
        {"data": {"dir": str(tmp_path / "data"), "splits": {"train": {"src": str(src), "tgt": str(tgt)}}}}
    )
    one_line_error(run_cli("prepare", cfg), str(src), "50 lines", str(tgt), "47")
    assert not (tmp_path / "data").exists()


def test_missing_file(tmp_path, toy_corpus, toy_config, run_cli):
    missing = str(tmp_path / "corpus" / "nope.en")
    cfg = toy_config(splits={**toy_corpus, "train": {"src": missing, "tgt": toy_corpus["train"]["tgt"]}})
    one_line_error(run_cli("prepare", cfg), "data.splits.train.src", missing, "not found")


def test_invalid_utf8_names_file_and_line(tmp_path, write_parallel, write_config, run_cli):
    src, tgt = write_parallel("train", n=100)
    lines = tgt.read_bytes().split(b"\n")
    lines[6] = b"Ein Hund \xff\xfe l\xe4uft ."  # latin-1 bytes on line 7
    tgt.write_bytes(b"\n".join(lines))
    cfg = write_config(
        {
            "data": {
                "dir": str(tmp_path / "data"),
                "vocab_size": 100,
                "splits": {"train": {"src": str(src), "tgt": str(tgt)}},
            }
        }
    )
    one_line_error(run_cli("prepare", cfg), f"{tgt}:7:", "invalid UTF-8", "skip_bad_lines")


def test_skip_bad_lines_drops_and_counts(tmp_path, write_parallel, write_config, run_cli):
    src, tgt = write_parallel("train", n=200)
    src_lines = src.read_bytes().split(b"\n")
    tgt_lines = tgt.read_bytes().split(b"\n")
    src_lines[3] = b"caf\xe9"
    tgt_lines[10] = b"\xc3\x28 broken"
    src.write_bytes(b"\n".join(src_lines))
    tgt.write_bytes(b"\n".join(tgt_lines))
    cfg = write_config(
        {
            "data": {
                "dir": str(tmp_path / "data"),
                "vocab_size": 100,
                "skip_bad_lines": True,
                "splits": {"train": {"src": str(src), "tgt": str(tgt)}},
            }
        }
    )
    result = run_cli("prepare", cfg)
    assert result.code == 0, result.err
    entry = json.loads((tmp_path / "data" / "manifest.json").read_text())["splits"]["train"]
    assert (entry["pairs_read"], entry["bad_lines_skipped"], entry["pairs_kept"]) == (200, 2, 198)


def test_empty_corpus_after_cleaning(tmp_path, write_parallel, write_config, run_cli):
    src, tgt = write_parallel("train", pairs=[("", "Hund"), ("  ", ""), ("Dog", "\t")])
    cfg = write_config(
        {"data": {"dir": str(tmp_path / "data"), "splits": {"train": {"src": str(src), "tgt": str(tgt)}}}}
    )
    one_line_error(run_cli("prepare", cfg), "no training pairs left", "3 read", "3 empty")
    assert not (tmp_path / "data").exists()


def test_yaml_syntax_error_has_line_and_column(tmp_path, run_cli):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("data:\n  dir: out\n  splits: {train: {src: a, tgt: b}\n  vocab_size: 100\n", encoding="utf-8")
    line = one_line_error(run_cli("prepare", cfg), str(cfg), "YAML syntax error")
    assert line.split(f"{cfg}:", 1)[1].split(":")[0].isdigit()  # path:LINE:COL


def test_unknown_config_key_names_dotted_path(toy_config, run_cli):
    one_line_error(run_cli("prepare", toy_config(vocab_sise=100)), "unknown key 'data.vocab_sise'")


def test_model_check_names_the_config_and_the_fix(toy_config, run_cli):
    cfg = toy_config({"model": {"arch": "luong", "encoder": "bidirectional", "hidden_size": 15}})
    one_line_error(run_cli("train", cfg), str(cfg), "model", "even hidden_size", "15")


# ------------------------------------------------------------------------------ subword regularisation
def test_sampled_copies_of_train_hold_the_same_sentences_in_new_segmentations(tmp_path, toy_config, run_cli):
    cfg = toy_config(src_subword_alpha=0.3, tgt_subword_alpha=0.2, subword_samples=3)
    result = run_cli("prepare", cfg)
    assert result.code == 0 and "sampled segmentations: 3 copies of train, src tokens" in result.out
    data_dir = tmp_path / "data"
    manifest = json.loads((data_dir / "manifest.json").read_text())
    copies = manifest["splits"]["train"]["files"]["samples"]
    assert [c["src"]["bin"] for c in copies] == ["train.s0.en.bin", "train.s1.en.bin", "train.s2.en.bin"]
    assert "samples" not in manifest["splits"]["valid"]["files"]  # only train is sampled

    tok = Tokenizer.from_dir(data_dir)
    train = ParallelData(data_dir, "train")
    assert (train.samples, train.sample) == (3, None)
    text = {
        side: getattr(tok, f"decode_{side}")([getattr(train, side)(i) for i in range(len(train))])
        for side in ("src", "tgt")
    }
    plain = (train.src_lengths.copy(), train.tgt_lengths.copy())
    seen = []
    for epoch, copy in ((1, 0), (2, 1), (3, 2), (4, 0), (6, 2)):
        train.use_epoch(epoch)
        assert train.sample == copy and len(train) == len(plain[0])
        for side, lengths in zip(("src", "tgt"), plain):
            ids = [getattr(train, side)(i) for i in range(len(train))]
            assert getattr(tok, f"decode_{side}")(ids) == text[side]  # the same sentences, in the same order
            assert getattr(train, f"{side}_lengths").sum() > lengths.sum()  # dropped merges: more, shorter pieces
            assert getattr(train, f"{side}_lengths").sum() == copies[copy][f"{side}_tokens"]
        seen.append(np.asarray(train.tgt_lengths).copy())
    assert not np.array_equal(seen[0], seen[1])  # each copy is its own sampling
    assert np.array_equal(seen[0], seen[3])  # epoch 4 reads copy 0 again

    # a second prepare is a no-op while every copy is there; a missing copy rebuilds the data dir
    assert "up to date" in run_cli("prepare", cfg).out
    (data_dir / "train.s1.de.idx").unlink()
    result = run_cli("prepare", cfg)
    assert result.code == 0 and "up to date" not in result.out and (data_dir / "train.s1.de.idx").is_file()


def test_sampled_segmentation_is_reproducible_and_off_by_default(tmp_path, toy_config, run_cli):
    from mtkit.tokenizer import seed_sampling

    assert run_cli("prepare", toy_config()).code == 0
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert "samples" not in manifest["splits"]["train"]["files"]
    assert {"src_subword_alpha", "subword_samples"} <= set(manifest["config"])
    assert ParallelData(tmp_path / "data", "train").samples == 0

    tok = Tokenizer.from_dir(tmp_path / "data")
    lines = [src for src, _ in toy_pairs(200)]
    draws = []
    for seed in (5, 5, 6):
        seed_sampling(seed)
        draws.append(tok.encode_src(lines, alpha=0.5))
    assert draws[0] == draws[1] != draws[2]
    assert draws[0] != tok.encode_src(lines) and tok.decode_src(draws[0]) == lines


def test_data_dirs_prepared_before_the_subword_keys_stay_up_to_date(toy_config):
    """The new keys at their defaults leave the inputs fingerprint as it was, so nothing is rebuilt."""
    data_cfg = cfgmod.load(toy_config()).data
    files = datamod.input_files(data_cfg)
    older = data_cfg.model_dump(mode="json")
    for key in datamod.LATER_KEYS:
        older.pop(key)
    stamp = [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    blob = json.dumps(
        {"version": datamod.FORMAT_VERSION, "config": {k: v for k, v in older.items() if k != "dir"}, "files": stamp},
        sort_keys=True,
    )
    import hashlib

    assert datamod._inputs_fingerprint(data_cfg, files) == hashlib.sha256(blob.encode("utf-8")).hexdigest()
    sampled = cfgmod.load(toy_config(src_subword_alpha=0.1, subword_samples=2)).data
    assert datamod._inputs_fingerprint(sampled, files) != datamod._inputs_fingerprint(data_cfg, files)


@pytest.mark.parametrize(
    "keys, fragment",
    [
        ({"src_subword_alpha": 0.1}, "need subword_samples"),
        ({"subword_samples": 4}, "needs src_subword_alpha or tgt_subword_alpha"),
        ({"tgt_subword_alpha": 1.5, "subword_samples": 4}, "data.tgt_subword_alpha"),
    ],
)
def test_subword_sampling_keys_are_checked(tmp_path, toy_config, run_cli, keys, fragment):
    one_line_error(run_cli("prepare", toy_config(**keys)), fragment)
    assert not (tmp_path / "data").exists()


def test_shipped_configs_load_and_share_a_data_dir_only_with_the_same_data_section():
    """Two configs writing one data.dir with different data sections would rebuild it for each other."""
    by_dir = {}
    for path in sorted((Path(__file__).parent.parent / "configs").glob("*.yaml")):
        data = cfgmod.load(path).data
        by_dir.setdefault(data.dir, []).append((path.name, data.model_dump()))
    shipped = {name for sections in by_dir.values() for name, _ in sections}
    assert {"multi30k-transformer.yaml", "multi30k-transformer-2h.yaml", "multi30k-bahdanau.yaml"} <= shipped
    for directory, sections in by_dir.items():
        assert all(section == sections[0][1] for _, section in sections), (directory, [n for n, _ in sections])


def test_vocab_too_large(tmp_path, toy_config, run_cli):
    line = one_line_error(run_cli("prepare", toy_config(vocab_size=5000)), "data.vocab_size", "at most", "lower")
    assert any(word.rstrip(";").isdigit() and int(word.rstrip(";")) < 5000 for word in line.split())
    assert not (tmp_path / "data").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # temp dir cleaned up


def test_refuses_to_replace_a_foreign_directory(tmp_path, toy_config, run_cli):
    precious = tmp_path / "data" / "notes.txt"
    precious.parent.mkdir()
    precious.write_text("keep me")
    one_line_error(run_cli("prepare", toy_config()), "not an mtkit data dir")
    assert precious.read_text() == "keep me"


# ---------------------------------------------------------------------------------- reruns, atomicity
def test_rerun_on_unchanged_inputs_is_a_no_op(tmp_path, toy_corpus, toy_config, run_cli):
    cfg = toy_config()
    assert run_cli("prepare", cfg).code == 0
    data_dir = tmp_path / "data"
    before = snapshot(data_dir)

    result = run_cli("prepare", cfg)
    assert result.code == 0 and "up to date" in result.out
    assert snapshot(data_dir) == before

    assert run_cli("prepare", cfg, "--force").code == 0  # --force rebuilds
    assert snapshot(data_dir) != before

    before = snapshot(data_dir)
    train_src = Path(toy_corpus["train"]["src"])
    os.utime(train_src, ns=(train_src.stat().st_atime_ns, train_src.stat().st_mtime_ns + 10**9))
    assert "up to date" not in run_cli("prepare", cfg).out  # a touched input rebuilds
    assert snapshot(data_dir) != before

    result = run_cli("prepare", cfg, "--set", "data.vocab_size=90")  # so does a changed data config
    assert result.code == 0 and "up to date" not in result.out
    assert json.loads((data_dir / "manifest.json").read_text())["vocab_size"]["src"] == 90


def test_interrupted_prepare_keeps_the_old_data(tmp_path, toy_config, monkeypatch):
    cfg = cfgmod.load(toy_config())
    prepare(cfg.data)
    data_dir = tmp_path / "data"
    before = snapshot(data_dir)
    manifest_before = (data_dir / "manifest.json").read_text()

    calls = {"n": 0}
    real_encode = Tokenizer.encode_src

    def failing_encode(self, lines):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # as if Ctrl-C hit in the middle of encoding
        return real_encode(self, lines)

    monkeypatch.setattr(datamod, "CHUNK_LINES", 100)  # several chunks per split
    monkeypatch.setattr(Tokenizer, "encode_src", failing_encode)
    with pytest.raises(KeyboardInterrupt):
        prepare(cfg.data, force=True)
    assert calls["n"] == 3
    assert snapshot(data_dir) == before
    assert (data_dir / "manifest.json").read_text() == manifest_before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml", "corpus", "data"]  # no temp dir left

    # an interrupted first build leaves no data dir at all
    calls["n"] = 0
    fresh = cfgmod.load(toy_config(dir=str(tmp_path / "fresh")))
    with pytest.raises(KeyboardInterrupt):
        prepare(fresh.data)
    assert not (tmp_path / "fresh").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml", "corpus", "data"]


# ---------------------------------------------------------------------------------- Hugging Face input
def test_hf_save_to_disk(tmp_path, write_config, run_cli):
    datasets = pytest.importorskip("datasets")
    train, valid = toy_pairs(200, seed=3), toy_pairs(12, seed=4)
    rows = lambda pairs: {"translation": [{"en": s, "de": t} for s, t in pairs]}  # noqa: E731
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict(rows(train)), "validation": datasets.Dataset.from_dict(rows(valid))}
    ).save_to_disk(str(tmp_path / "hfdict"))
    cfg = write_config(
        {
            "data": {
                "dir": str(tmp_path / "data"),
                "vocab_size": 100,
                "hf": {"format": "disk", "path": str(tmp_path / "hfdict")},
            }
        }
    )
    result = run_cli("prepare", cfg)
    assert result.code == 0, result.err
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert set(manifest["splits"]) == {"train", "valid"}  # no "test" split in the dataset: skipped
    assert manifest["splits"]["train"]["pairs_read"] == 200
    refs = (tmp_path / "data" / "valid.de.txt").read_text(encoding="utf-8").splitlines()
    assert refs == [t for _, t in valid]

    # a single Dataset with flat columns is the train split; src_field/tgt_field name the columns
    datasets.Dataset.from_dict({"english": [s for s, _ in train], "german": [t for _, t in train]}).save_to_disk(
        str(tmp_path / "flat")
    )
    cfg = write_config(
        {
            "data": {
                "dir": str(tmp_path / "data2"),
                "vocab_size": 100,
                "hf": {"path": str(tmp_path / "flat"), "src_field": "english", "tgt_field": "german"},
            }
        },
        name="flat.yaml",
    )
    assert run_cli("prepare", cfg).code == 0
    assert json.loads((tmp_path / "data2" / "manifest.json").read_text())["splits"]["train"]["pairs_kept"] == 200

    cfg = write_config(
        {"data": {"dir": str(tmp_path / "data3"), "hf": {"path": str(tmp_path / "flat")}}}, name="bad.yaml"
    )
    one_line_error(run_cli("prepare", cfg), "no column 'en'", "english, german", "data.hf.src_field")


def test_hf_json_files(tmp_path, write_config, run_cli):
    pytest.importorskip("datasets")
    corpus = tmp_path / "jsonl"
    corpus.mkdir()
    for name, n, seed in (("train", 200, 5), ("dev", 10, 6)):
        rows = [json.dumps({"en": s, "de": t}, ensure_ascii=False) for s, t in toy_pairs(n, seed)]
        (corpus / f"{name}.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    cfg = write_config(
        {
            "data": {
                "dir": str(tmp_path / "data"),
                "vocab_size": 100,
                "hf": {
                    "format": "json",
                    "path": str(corpus),
                    "data_files": {"train": "train.jsonl", "validation": "dev.jsonl"},
                },
            }
        }
    )
    result = run_cli("prepare", cfg)
    assert result.code == 0, result.err
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    assert manifest["splits"]["train"]["pairs_read"] == 200 and manifest["splits"]["valid"]["pairs_read"] == 10
    assert not any(p.name.startswith(".") for p in (tmp_path / "data").iterdir())  # no HF cache shipped
    assert run_cli("prepare", cfg).out.startswith(f"{tmp_path / 'data'}: up to date")


def test_prepare_never_imports_torch(tmp_path, toy_config):
    code = (
        "import sys; from mtkit.cli import main; rc = main(['prepare', sys.argv[1]]); "
        "assert rc == 0, rc; assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code, str(toy_config())], check=True, capture_output=True, timeout=60)


@pytest.mark.slow
def test_kill_9_during_prepare_never_leaves_a_manifest_pointing_at_partial_data(tmp_path, write_parallel, write_config):
    """kill -9 at seeded random moments of `mtkit prepare --force`: the data dir is always either the last whole
    build or absent, never a manifest over partial arrays; a later prepare succeeds."""
    import random
    import signal
    import time

    splits = {}
    for name, n, seed in (("train", 4000, 0), ("valid", 200, 1)):
        src, tgt = write_parallel(name, n=n, seed=seed)
        splits[name] = {"src": str(src), "tgt": str(tgt)}
    data_dir = tmp_path / "data"
    config = write_config({"data": {"dir": str(data_dir), "vocab_size": 100, "splits": splits}})
    cmd = [sys.executable, "-m", "mtkit", "prepare", str(config), "--force"]
    env = dict(os.environ, OMP_NUM_THREADS="1")

    def check_whole():
        if not data_dir.exists():
            return
        manifest = json.loads((data_dir / "manifest.json").read_text())  # present whenever the dir is
        for split, info in manifest["splits"].items():
            data = ParallelData(data_dir, split)
            assert len(data) == info["pairs_kept"]
            assert int(data.tgt_lengths.sum()) == info["tgt_tokens"]

    started = time.perf_counter()
    assert subprocess.run(cmd, env=env, capture_output=True).returncode == 0  # a first whole build
    whole = time.perf_counter() - started
    rng = random.Random(7)
    killed_alive = attempts = 0
    while attempts < 5 or killed_alive < 3:  # at least 3 kills inside running builds, whatever the machine's pace
        assert attempts < 15, f"only {killed_alive} of {attempts} kills landed inside a running build"
        attempts += 1
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.2, 0.95) * whole)
        if proc.poll() is not None:  # the build was over before the kill: aim earlier next time
            whole *= 0.7
        else:
            killed_alive += 1
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        check_whole()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    check_whole()
    assert data_dir.exists()
    # the killed builds' folders were removed by the next prepare, not left to fill the disk
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".data.")) == []


def test_prepare_removes_builds_of_dead_processes_only(tmp_path, write_parallel, write_config, run_cli):
    """Folders a killed prepare left beside the data dir go; a live process's build and foreign files stay."""
    import socket
    import time

    from mtkit.data.builddir import STALE_UNOWNED_SECONDS

    src, tgt = write_parallel("train", n=300, seed=0)
    data_dir = tmp_path / "data"
    config = write_config(
        {"data": {"dir": str(data_dir), "vocab_size": 100, "splits": {"train": {"src": str(src), "tgt": str(tgt)}}}}
    )
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # its pid is now free (reuse within this test is vanishingly unlikely)
    host = socket.gethostname()

    def build(name, age=0.0):
        path = tmp_path / name
        path.mkdir()
        (path / "train.en.txt").write_text("partial\n")
        if age:
            stamp = time.time() - age
            os.utime(path, (stamp, stamp))
        return path

    stale = build(f".data.tmp-{dead.pid}@{host}-a1b2c3")  # empty of any owner file: the name says it all
    unowned_old = build(".data.tmp-unowned", age=STALE_UNOWNED_SECONDS + 60)
    live = build(f".data.tmp-{os.getpid()}@{host}-d4e5f6")
    unowned_new = build(".data.tmp-fresh")  # not named by this version's prepare, and recently touched
    other_host = build(f".data.tmp-{dead.pid}@not-{host}-g7h8")
    unrelated = build(f".database.tmp-{dead.pid}@{host}-x")
    result = run_cli("prepare", config)
    assert result.code == 0, result.err
    assert not stale.exists() and not unowned_old.exists()
    assert live.exists() and unowned_new.exists() and other_host.exists() and unrelated.exists()
    assert "removed the unfinished build" in result.out
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".data.")) == sorted(
        p.name for p in (live, unowned_new, other_host)
    )  # prepare's own build became the data dir
