"""`mtkit backtranslate` (mtkit/data/backtranslate.py) and the data keys a back-translated corpus is trained with
(data.user_symbols, data.mix in mtkit/data/prepare.py).

The direction: the toy run of conftest translates en into de, so here it back-translates English "monolingual"
text: the corpus it writes holds its German translations as the synthetic side (bt.de) and the English lines as
the real side (bt.en), training data for a de->en model. A real use runs a de->en model on German text for en->de.

- The corpus: MONO's non-empty lines, whitespace-normalised, in order, beside the run's own translations of them
  chunk by chunk; --tag puts the tag first on every synthetic line, and rewrites the folder without translating.
- Resume: interrupted after its first chunk (Ctrl-C in process, kill -9 of a process), a rerun goes on and writes the
  bytes of an uninterrupted run, with beam search and with sampling (each chunk drawn with its own seed); another
  decoding is refused meanwhile.
- Refusals, one line, exit 2, nothing written: invalid UTF-8 (file and line), a missing MONO, an --out that is a
  file or a foreign folder, sampling on CTranslate2.
- prepare: a tag in data.user_symbols is one SentencePiece id in the prepared data (several without it); data.mix
  adds each part's ratio of the train split's pairs, every pair of an upsampled part k or k + 1 times, drawn by the
  part's seed.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import SUBPROCESS_ENV, assert_one_line_error, kill_after_first_chunk, toy_pairs, write_lines
from mtkit.tokenizer import Tokenizer

CHUNK = 20
COMMON = ("--engine", "torch", "--threads", "1", "--chunk-size", CHUNK)

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def mono(tmp_path, toy_run_workdir) -> Path:
    """50 English lines of the toy corpus, gzipped, with two empty lines, a blank one and odd spaces among them."""
    lines = (toy_run_workdir / "corpus" / "train.en").read_text(encoding="utf-8").splitlines()[:50]
    lines[3] = "  " + lines[3].replace(" ", "\t ")
    lines[10:10] = ["", "   "]
    lines.append("")
    return write_lines(tmp_path / "mono.en.gz", lines, gz=True)


def kept(path: Path) -> list[str]:
    import gzip

    return [" ".join(line.split()) for line in gzip.decompress(path.read_bytes()).decode().splitlines() if line.strip()]


def corpus(out: Path) -> dict[str, bytes]:
    return {name: (out / name).read_bytes() for name in ("bt.en", "bt.de")}


def test_backtranslate_writes_the_lines_and_their_translations(tmp_path, toy_run_workdir, run_cli, mono):
    from mtkit.inference.teacher import load_teacher

    run, out = toy_run_workdir / "run", tmp_path / "bt"
    result = run_cli("backtranslate", run, mono, "--output", out, *COMMON)
    assert result.code == 0, result.err
    lines = kept(mono)
    assert len(lines) == 50 and "\t" not in lines[3]
    assert (out / "bt.en").read_text(encoding="utf-8").splitlines() == lines
    model = load_teacher([run], engine="torch", threads=1, chunk_size=CHUNK, algorithm="beam")
    expected = [hyps[0] for start in range(0, 50, CHUNK) for hyps in model.translate(lines[start : start + CHUNK], 1)]
    assert (out / "bt.de").read_text(encoding="utf-8").splitlines() == expected
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["files"] == {"synthetic": "bt.de", "original": "bt.en"}
    assert (report["lines_read"], report["pairs"], report["dropped"]) == (53, 50, {"empty": 3, "bad_lines": 0})
    assert (report["search"]["algorithm"], report["search"]["beam_size"], report["tag"]) == ("beam", 4, None)
    assert sorted(p.name for p in (tmp_path / "bt.work").glob("chunk-*")) == [f"chunk-00000{i}.tsv" for i in range(3)]

    # --tag: the same translations, the tag first; the chunks are reused, nothing is translated again
    from mtkit.inference import teacher as teachermod

    def refuse(*args, **kwargs):
        raise AssertionError("translated again")

    untagged = (out / "bt.de").read_text(encoding="utf-8").splitlines()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(teachermod.Teacher, "translate", refuse)
        tagged = run_cli("backtranslate", run, mono, "--output", out, "--tag", *COMMON)
        assert tagged.code == 0, tagged.err
        custom = run_cli("backtranslate", run, mono, "--output", out, "--tag-token", "<bt_de>", *COMMON)
        assert custom.code == 0, custom.err
    assert (out / "bt.de").read_text(encoding="utf-8").splitlines() == [f"<bt_de> {h}".strip() for h in untagged]
    assert json.loads((out / "report.json").read_text(encoding="utf-8"))["tag"] == "<bt_de>"
    assert run_cli("backtranslate", run, mono, "--output", out, "--tag", *COMMON).code == 0
    synthetic = (out / "bt.de").read_text(encoding="utf-8").splitlines()
    assert all(line.split()[0] == "<BT>" for line in synthetic) and len(synthetic) == 50
    assert [line[len("<BT> ") :] for line in synthetic] == untagged


@pytest.mark.parametrize(
    "decoding", [(), ("--algorithm", "sampling", "--top-k", "5", "--seed", "7")], ids=["beam", "sampling"]
)
def test_an_interrupted_run_resumes_to_the_bytes_of_an_uninterrupted_one(
    tmp_path, toy_run_workdir, run_cli, mono, monkeypatch, decoding
):
    from mtkit.inference import teacher as teachermod

    run = toy_run_workdir / "run"
    straight = run_cli("backtranslate", run, mono, "--output", tmp_path / "straight", *COMMON, *decoding)
    assert straight.code == 0, straight.err
    real, calls = teachermod.Teacher.translate, []

    def interrupted(self, lines, nbest, **decoding):
        calls.append(decoding)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, lines, nbest, **decoding)

    monkeypatch.setattr(teachermod.Teacher, "translate", interrupted)
    out, work = tmp_path / "resumed", tmp_path / "resumed.work"
    assert run_cli("backtranslate", run, mono, "--output", out, *COMMON, *decoding).code == 130
    assert sorted(p.name for p in work.glob("chunk-*")) == ["chunk-000000.tsv"] and not out.exists()
    other = run_cli("backtranslate", run, mono, "--output", out, *COMMON, "--beam-size", "2", "--algorithm", "beam")
    if decoding:
        assert_one_line_error(other, str(work), "the decoding options", "'algorithm': 'sampling'", "remove")
    else:
        assert_one_line_error(other, str(work), "the decoding options", "'beam_size': 4", "'beam_size': 2")
    monkeypatch.setattr(teachermod.Teacher, "translate", real)
    resumed = run_cli("backtranslate", run, mono, "--output", out, *COMMON, *decoding)
    assert resumed.code == 0, resumed.err
    assert "resuming at chunk 2 of 3 (20 sentences done)" in resumed.out
    assert corpus(out) == corpus(tmp_path / "straight")
    if decoding:  # each chunk drawn with the seed plus its index
        assert calls[0] == {"seed": 7} and calls[1] == {"seed": 8}
        beam = run_cli("backtranslate", run, mono, "--output", tmp_path / "beam", *COMMON)
        assert beam.code == 0 and corpus(tmp_path / "beam")["bt.de"] != corpus(out)["bt.de"]


def test_kill_9_then_rerun_gives_the_corpus_of_an_uninterrupted_run(tmp_path, toy_run_workdir, mono):
    """A back-translation killed after its first chunk, then run again, writes the corpus of one run straight
    through (each in a process of its own)."""
    run = toy_run_workdir / "run"
    env = {**SUBPROCESS_ENV, "PYTHONUNBUFFERED": "1"}

    def command(out: Path) -> list[str]:
        flags = ("--engine", "torch", "--threads", "1", "--chunk-size", "5")
        return [sys.executable, "-m", "mtkit", "backtranslate", str(run), str(mono), "--output", str(out), *flags]

    done = subprocess.run(command(tmp_path / "straight"), capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    out, work = tmp_path / "killed", tmp_path / "killed.work"
    chunks = kill_after_first_chunk(command(out), work, env, "back-translation")
    assert 1 <= chunks < 10 and not out.exists()
    again = subprocess.run(command(out), capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0, again.stderr
    assert f"resuming at chunk {chunks + 1} of 10" in again.stdout
    assert corpus(out) == corpus(tmp_path / "straight")
    assert not list(work.glob(".*.tmp"))


def test_bad_inputs_are_one_line_and_write_nothing(tmp_path, toy_run_workdir, run_cli, mono):
    run, out = toy_run_workdir / "run", tmp_path / "bt"
    bad = write_lines(tmp_path / "bad.en", ["A man .", "A dog .", b"A \xff cat .", "A tree ."])
    invalid = run_cli("backtranslate", run, bad, "--output", out, *COMMON)
    assert_one_line_error(invalid, f"{bad}:3: invalid UTF-8", "--skip-bad-lines")
    missing = run_cli("backtranslate", run, tmp_path / "no-such.en", "--output", out, *COMMON)
    assert_one_line_error(missing, "MONO:", "no-such.en: file not found")
    afile = write_lines(tmp_path / "afile", ["x"])
    assert_one_line_error(run_cli("backtranslate", run, mono, "--output", afile, *COMMON), "--out", "is a file")
    foreign = tmp_path / "foreign"
    write_lines(foreign / "notes.txt", ["mine"])
    taken = run_cli("backtranslate", run, mono, "--output", foreign, *COMMON)
    assert_one_line_error(taken, "--out", "other files in it", "report.json")
    spaced = run_cli("backtranslate", run, mono, "--output", out, "--tag-token", "<B T>", *COMMON)
    assert_one_line_error(spaced, "--tag-token", "without spaces")
    assert not out.exists() and not (tmp_path / "bt.work").exists()
    assert not list(tmp_path.glob(".bt.tmp-*"))
    assert (foreign / "notes.txt").read_text() == "mine\n" and afile.read_text() == "x\n"
    skipped = run_cli("backtranslate", run, bad, "--output", out, "--skip-bad-lines", *COMMON)
    assert skipped.code == 0, skipped.err
    assert (out / "bt.en").read_text(encoding="utf-8").splitlines() == ["A man .", "A dog .", "A tree ."]
    assert json.loads((out / "report.json").read_text())["dropped"] == {"empty": 0, "bad_lines": 1}


@pytest.mark.skipif(not importlib.util.find_spec("ctranslate2"), reason="needs ctranslate2")
def test_sampled_back_translation_on_ctranslate2_is_the_same_every_run(tmp_path, toy_run_workdir, run_cli, mono):
    """Chunk k draws from seed + k on CTranslate2 too (a translator per seed), so a run, and a resumed one, writes
    the same corpus every time."""
    run = toy_run_workdir / "run"
    drawn = ("--engine", "ctranslate2", "--algorithm", "sampling", "--threads", "1", "--chunk-size", "3")
    texts = []
    for name in ("a", "b"):
        done = run_cli("backtranslate", run, mono, "--output", tmp_path / name, *drawn)
        assert done.code == 0, done.err
        texts.append((tmp_path / name / "bt.de").read_text(encoding="utf-8"))  # the synthetic side
    assert texts[0] == texts[1] and texts[0].strip()
    other = run_cli("backtranslate", run, mono, "--output", tmp_path / "c", *drawn, "--seed", "7")
    assert other.code == 0, other.err
    assert (tmp_path / "c" / "bt.de").read_text(encoding="utf-8") != texts[0]  # another seed, other samples


# ----------------------------------------------------------------------------------- prepare: tag and mix
def prepared_ids(data_dir: Path, side: str = "src") -> list[list[int]]:
    manifest = json.loads((data_dir / "manifest.json").read_text(encoding="utf-8"))
    files = manifest["splits"]["train"]["files"][side]
    tokens = np.fromfile(data_dir / files["bin"], dtype=manifest["dtype"][side])
    offsets = np.fromfile(data_dir / files["idx"], dtype=np.int64)
    return [tokens[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]


@pytest.fixture
def mixed(tmp_path, write_config):
    """mixed(mix, **data) -> (config path, real pairs, {part name: pairs}): 100 real toy pairs (de -> en), a
    tagged part of 40 pairs and a plain part of 30, each pair distinct."""
    real = [(de, en) for en, de in toy_pairs(100, seed=11)]
    parts = {"tagged": [(f"<BT> {de}", en) for en, de in toy_pairs(40, seed=12)]}
    parts["plain"] = [(de, en) for en, de in toy_pairs(30, seed=13)]
    paths = {}
    for name, pairs in (("real", real), *parts.items()):
        src = write_lines(tmp_path / "mix" / f"{name}.de", [p[0] for p in pairs])
        tgt = write_lines(tmp_path / "mix" / f"{name}.en", [p[1] for p in pairs])
        paths[name] = {"src": str(src), "tgt": str(tgt)}

    def make(mix: list, name: str = "config.yaml", **data):
        section = {"src_lang": "de", "tgt_lang": "en", "dir": str(tmp_path / name.replace(".yaml", ""))}
        section |= {"vocab_size": 120, "splits": {"train": paths["real"]}}
        section["mix"] = [{**paths[part], **options} for part, options in mix]
        return write_config({"data": {**section, **data}}, name), real, parts

    return make


def test_a_declared_tag_is_one_id_in_the_prepared_data(mixed, run_cli, tmp_path):
    config, real, parts = mixed([("tagged", {"ratio": 0.4})], user_symbols=["<BT>"])
    assert run_cli("prepare", config).code == 0
    data_dir = tmp_path / "config"
    tok = Tokenizer.from_dir(data_dir)
    [tag_ids] = [ids for ids in tok.encode_src(["<BT>"])]
    tag_id = next(i for i in tag_ids if tok.src_pieces([i]) == ["<BT>"])
    ids = prepared_ids(data_dir)
    tagged = [s for s in ids if tag_id in s]
    assert len(ids) == 140 and len(tagged) == 40
    assert all(tok.src_pieces(s[: s.index(tag_id) + 1])[-1] == "<BT>" and s.index(tag_id) <= 1 for s in tagged)
    assert {tok.decode_src([s])[0] for s in tagged} == {src for src, _ in parts["tagged"]}
    undeclared, _, _ = mixed([("tagged", {"ratio": 0.4})], name="undeclared.yaml")
    assert run_cli("prepare", undeclared).code == 0
    plain = Tokenizer.from_dir(tmp_path / "undeclared")
    assert "<BT>" not in plain.src_pieces(plain.encode_src(["<BT> Ein Hund ."])[0])


def test_mix_adds_each_part_at_its_ratio_drawn_by_its_seed(mixed, run_cli, tmp_path):
    config, real, parts = mixed([("tagged", {"ratio": 2.5, "seed": 3}), ("plain", {"ratio": 0.13})])
    assert run_cli("prepare", config).code == 0
    data_dir = tmp_path / "config"
    manifest = json.loads((data_dir / "manifest.json").read_text(encoding="utf-8"))
    tok = Tokenizer.from_dir(data_dir)
    pairs = list(zip(tok.decode_src(prepared_ids(data_dir, "src")), tok.decode_tgt(prepared_ids(data_dir, "tgt"))))
    counts = Counter(pairs)
    assert manifest["splits"]["train"]["pairs_kept"] == len(pairs) == 100 + 250 + 13
    assert all(counts[p] == 1 for p in real)
    tagged = [counts[p] for p in parts["tagged"]]  # 250 of 40: each 6 times, 10 of them a 7th
    assert sorted(Counter(tagged).items()) == [(6, 30), (7, 10)]
    plain = [counts[p] for p in parts["plain"]]  # 13 of 30, each once
    assert sorted(Counter(plain).items()) == [(0, 17), (1, 13)]
    described = manifest["inputs"]["train"]["mix"]
    assert [(d["pairs_read"], d["pairs_drawn"], d["seed"]) for d in described] == [(40, 250, 3), (30, 13, 1)]
    assert pairs[:100] == real  # the train split first, then each part in its file's order
    # the same seed draws the same pairs; another seed others
    again, _, _ = mixed([("tagged", {"ratio": 2.5, "seed": 3}), ("plain", {"ratio": 0.13})], name="again.yaml")
    other, _, _ = mixed([("tagged", {"ratio": 2.5, "seed": 3}), ("plain", {"ratio": 0.13, "seed": 2})], name="o.yaml")
    assert run_cli("prepare", again).code == 0 and run_cli("prepare", other).code == 0
    assert prepared_ids(tmp_path / "again") == prepared_ids(data_dir)
    assert prepared_ids(tmp_path / "o") != prepared_ids(data_dir)


def test_mix_refusals_name_the_key(mixed, run_cli, tmp_path, write_config):
    config, _, _ = mixed([("plain", {"ratio": 1.0})])
    tree = yaml.safe_load(config.read_text())
    tree["data"]["mix"][0]["src"] = str(tmp_path / "missing.de")
    missing = run_cli("prepare", write_config(tree, "missing.yaml"))
    assert_one_line_error(missing, "data.mix[0].src", "missing.de", "not found")
    tree["data"]["mix"] = [{"src": "a", "tgt": "b", "ratio": 0}]
    assert_one_line_error(run_cli("prepare", write_config(tree, "zero.yaml")), "ratio")
    tree["data"]["user_symbols"] = ["<B T>"]
    tree["data"]["mix"] = []
    assert_one_line_error(run_cli("prepare", write_config(tree, "spaced.yaml")), "user_symbols")
    assert not (tmp_path / "missing").exists() and not (tmp_path / "zero").exists()
    from mtkit import config as cfgmod
    from mtkit.data.distill import distill
    from mtkit.errors import MtkitError

    with pytest.raises(MtkitError, match=r"data.mix: mtkit distill translates the train split alone"):
        distill(cfgmod.load(config), teacher=None, select="top")
