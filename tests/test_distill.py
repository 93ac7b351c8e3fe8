"""`mtkit distill` (mtkit/data/distill.py, mtkit/inference/teacher.py): a teacher's translations of the student's
training split, in a data dir `mtkit train` reads.

- The toy teacher of conftest (``toy_run_workdir``) distils 60 training sentences: the train arrays hold its own
  translations (top) in its vocabulary, the other splits keep their references, a student trains on it, a rerun
  says it is done.
- The n-best selection keeps the hypothesis closest to the reference, on hand-made n-best lists (a teacher that
  returns given lists), with and without the references kept too.
- Chunks and resume: interrupted after a chunk, a rerun goes on from the next one; kill -9 then a rerun gives
  the arrays of an uninterrupted run, byte for byte (three processes).
- Refusals, one line and nothing written: a vocabulary the config pins otherwise, a missing teacher, an unfinished
  distillation asked again with another selection or teacher, a data dir prepare wrote; prepare in turn refuses to
  replace a distilled dir without --force.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import (
    SUBPROCESS_ENV,
    TINY_TRANSFORMER,
    assert_one_line_error,
    kill_after_first_chunk,
    without_curves,
    write_lines,
)
from mtkit import config as cfgmod
from mtkit.data import distill as distillmod
from mtkit.data.selection import Selector
from mtkit.tokenizer import Tokenizer

TRAIN_SENTENCES = 60
CHUNK = 25  # 60 sentences: chunks of 25, 25 and 10

pytestmark = pytest.mark.usefixtures("one_thread")


# ------------------------------------------------------------------------------------------- fixtures
@pytest.fixture
def student(tmp_path, toy_run_workdir):
    """student(**data) -> the path of a student config: the toy corpus's first 60 training pairs, its valid and test
    splits, data.dir tmp_path/distilled, a 1+1-layer Transformer with an SSRU decoder."""
    corpus = toy_run_workdir / "corpus"
    train = {}
    for side, lang in (("src", "en"), ("tgt", "de")):
        lines = (corpus / f"train.{lang}").read_text(encoding="utf-8").splitlines()[:TRAIN_SENTENCES]
        train[side] = str(write_lines(tmp_path / "corpus" / f"train.{lang}", lines))
    splits = {
        "train": train,
        **{s: {"src": str(corpus / f"{s}.en"), "tgt": str(corpus / f"{s}.de")} for s in ("valid", "test")},
    }

    def write(name: str = "student.yaml", **data) -> Path:
        tree = {
            "data": {"dir": str(tmp_path / "distilled"), "splits": splits, **data},
            "model": {**TINY_TRANSFORMER, "decoder_self": "ssru"},
            "training": {
                "run_dir": str(tmp_path / "student"),
                "devices": "cpu",
                "threads": 1,
                "max_updates": 3,
                "batch_tokens": 400,
                "validate_every": 3,
                "valid_bleu": False,
            },
        }
        path = tmp_path / name
        path.write_text(yaml.safe_dump(without_curves(tree), sort_keys=False), encoding="utf-8")
        return path

    return write


def arrays(data_dir: Path, split: str = "train") -> dict[str, bytes]:
    """The bytes of a split's token arrays, by file name."""
    manifest = json.loads((data_dir / "manifest.json").read_text(encoding="utf-8"))
    files = manifest["splits"][split]["files"]
    return {
        files[side][kind]: (data_dir / files[side][kind]).read_bytes()
        for side in ("src", "tgt")
        for kind in ("bin", "idx")
    }


def decoded_pairs(data_dir: Path, split: str = "train") -> list[tuple[str, str]]:
    """The (source, target) texts of a split's token arrays, decoded with the data dir's tokenizer."""
    manifest = json.loads((data_dir / "manifest.json").read_text(encoding="utf-8"))
    tok = Tokenizer.from_dir(data_dir)
    files = manifest["splits"][split]["files"]
    sides = []
    for side in ("src", "tgt"):
        tokens = np.fromfile(data_dir / files[side]["bin"], dtype=manifest["dtype"][side])
        offsets = np.fromfile(data_dir / files[side]["idx"], dtype=np.int64)
        ids = [tokens[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]
        sides.append(tok.decode_src(ids) if side == "src" else tok.decode_tgt(ids))
    return list(zip(*sides))


class GivenTeacher:
    """A teacher whose n-best lists are given: ``lists[source]`` (what ``data.distill.Teacher`` asks of one)."""

    engine = "given"
    languages = ("en", "de")
    targets = ()

    def __init__(self, tokenizer, lists: dict[str, list[str]], fingerprint: str = "given"):
        self.tokenizer, self.lists, self.fingerprint = tokenizer, lists, fingerprint
        self.members = [{"path": "given", "fingerprint": fingerprint}]
        self.search = {"beam_size": 3, "length_penalty": 1.0, "max_len_a": 1.5, "max_len_b": 10}
        self.calls = 0

    def translate(self, lines: list[str], nbest: int) -> list[list[str]]:
        self.calls += 1
        return [self.lists[line][:nbest] for line in lines]


def near_misses(reference: str, odd: bool) -> list[str]:
    """Three hypotheses for a reference: unrelated words, then the reference less a word and its first word alone
    (in the other order when ``odd``)."""
    words = reference.split()
    near, first = " ".join(words[:-2] + words[-1:]), f"{words[0]} ."
    return ["Quark Zebra Xylophon .", *((first, near) if odd else (near, first))]


def closest(hypotheses: list[str], reference: str) -> str:
    """The hypothesis of highest sentence chrF (sacreBLEU), the first of equals."""
    from sacrebleu.metrics import CHRF

    scores = [CHRF().sentence_score(h, [reference]).score for h in hypotheses]
    return hypotheses[scores.index(max(scores))]


# ------------------------------------------------------------------------------------------ selection
def test_selection_keeps_the_hypothesis_closest_to_the_reference():
    from sacrebleu.metrics import CHRF

    reference = "Ein Mann fährt Fahrrad im Park ."
    hyps = ["Eine Frau läuft .", "Ein Mann fährt im Park .", "Ein Mann fährt Fahrrad im Park .", "Mann Park"]
    assert Selector("chrf").pick(hyps, reference) == 2
    assert Selector("bleu").pick(hyps, reference) == 2
    assert Selector("top").pick(hyps, reference) == 0
    without = hyps[:2] + hyps[3:]
    scores = [CHRF().sentence_score(h, [reference]).score for h in without]
    assert Selector("chrf").pick(without, reference) == scores.index(max(scores)) == 1
    assert Selector("chrf").pick(["Hund .", "Hund ."], "Ein Hund .") == 0  # a tie: the teacher's better-ranked
    assert Selector("bleu").pick([], reference) == -1


def test_mbr_selection_keeps_the_hypothesis_closest_to_the_others():
    """--select mbr: the reference is not read; the pick has the highest mean sentence chrF (sacreBLEU's, computed
    here pair by pair) against the whole n-best list."""
    from sacrebleu.metrics import CHRF

    hyps = ["Ein Mann fährt Rad .", "Ein Mann fährt Fahrrad .", "Ein Mann fährt ein Fahrrad .", "Zwei Hunde ."]
    means = [sum(CHRF().sentence_score(h, [r]).score for r in hyps) / len(hyps) for h in hyps]
    assert Selector("mbr").pick(hyps, "unused") == means.index(max(means)) != 0
    assert Selector("mbr").pick(hyps, "a different reference") == Selector("mbr").pick(hyps, "unused")
    assert Selector("mbr").pick(["Hund ."], "x") == 0 and Selector("mbr").pick([], "x") == -1


@pytest.mark.parametrize("keep_original", [False, True])
def test_distilled_targets_are_the_n_best_closest_to_the_reference(student, toy_run_workdir, keep_original):
    cfg = cfgmod.load(student())
    corpus = cfg.data.splits["train"]
    sources = Path(corpus.src).read_text(encoding="utf-8").splitlines()
    references = Path(corpus.tgt).read_text(encoding="utf-8").splitlines()
    lists = {s: near_misses(r, i % 2 == 1) for i, (s, r) in enumerate(zip(sources, references))}
    teacher = GivenTeacher(Tokenizer.from_run(toy_run_workdir / "run"), lists)
    manifest = distillmod.distill(cfg, teacher, select="chrf", chunk_size=CHUNK, keep_original=keep_original)
    kept = {s: closest(lists[s], r) for s, r in zip(sources, references)}
    assert all(kept[s] == " ".join(r.split()[:-2] + r.split()[-1:]) for s, r in zip(sources, references))
    assert {lists[s].index(kept[s]) for s in sources} == {1, 2}  # the near miss, wherever the teacher ranked it
    expected = [(s, kept[s]) for s in sources]
    if keep_original:
        expected = [pair for s, r in zip(sources, references) for pair in ((s, kept[s]), (s, r))]
    pairs = decoded_pairs(Path(cfg.data.dir))
    dropped = sum(manifest["splits"]["train"]["filtered"].values())  # prepare's own filters, after distill
    assert dropped + len(pairs) == len(expected) and dropped <= len(expected) // 4
    assert pairs == [p for p in expected if p in set(pairs)]  # the kept ones, in order
    entry = manifest["distillation"]
    assert (entry["select"], entry["search"]["nbest"], entry["keep_original"]) == ("chrf", 3, keep_original)
    assert entry["not_best"] == TRAIN_SENTENCES and teacher.calls == 3  # chunks of 25, 25, 10
    assert manifest["tokenizer_fingerprint"] == teacher.tokenizer.fingerprint()
    rows = distillmod.read_chunk(distillmod.work_dir(Path(cfg.data.dir)) / "chunk-000002.tsv")
    assert [(r[0], r[1], r[2]) for r in rows] == [(s, r, kept[s]) for s, r in zip(sources[50:], references[50:])]
    for split in ("valid", "test"):  # the references, as they are
        original = (toy_run_workdir / "corpus" / f"{split}.de").read_text(encoding="utf-8")
        assert (Path(cfg.data.dir) / f"{split}.de.txt").read_text(encoding="utf-8") == original


# ----------------------------------------------------------------------------------- a real teacher
@pytest.mark.parametrize("engine", ["torch", "ctranslate2"])
def test_distill_writes_a_data_dir_that_train_reads(student, toy_run_workdir, run_cli, tmp_path, engine):
    """The train arrays hold the teacher's own best translations (translated chunk by chunk as distill does), in its
    vocabulary; valid and test keep their references; the student trains; a rerun says it is done."""
    if engine == "ctranslate2":
        pytest.importorskip("ctranslate2")
    from mtkit.inference.teacher import load_teacher

    config, run = student(), toy_run_workdir / "run"
    common = ("--engine", engine, "--threads", "1", "--dtype", "float32")
    result = run_cli("distill", run, "--config", config, "--select", "top", "--chunk-size", CHUNK, *common)
    assert result.code == 0, result.err
    data_dir = tmp_path / "distilled"
    manifest = json.loads((data_dir / "manifest.json").read_text(encoding="utf-8"))
    entry = manifest["distillation"]
    best = run / "checkpoints" / "best.safetensors"
    assert entry["teachers"] == [
        {"path": str(best.resolve()), "fingerprint": hashlib.sha256(best.read_bytes()).hexdigest()}
    ]
    assert (entry["select"], entry["engine"], entry["search"]["beam_size"], entry["sentences"]) == (
        "top",
        engine,
        4,
        60,
    )
    teacher = load_teacher([run], engine=engine, threads=1, dtype="float32", chunk_size=CHUNK)
    assert manifest["tokenizer_fingerprint"] == teacher.tokenizer.fingerprint()
    sources = (tmp_path / "corpus" / "train.en").read_text(encoding="utf-8").splitlines()
    translated = {}
    for start in range(0, len(sources), CHUNK):
        chunk = sources[start : start + CHUNK]
        translated.update(zip(chunk, (hyps[0] for hyps in teacher.translate(chunk, 1))))
    pairs = decoded_pairs(data_dir)
    assert len(pairs) >= len(sources) // 2  # prepare's length filters drop the toy teacher's worst
    assert all(translated[src] == tgt for src, tgt in pairs)
    for split in ("valid", "test"):
        original = (toy_run_workdir / "corpus" / f"{split}.de").read_text(encoding="utf-8")
        assert (data_dir / f"{split}.de.txt").read_text(encoding="utf-8") == original
    assert run_cli("train", config).code == 0
    assert (tmp_path / "student" / "checkpoints" / "ckpt_0000003.safetensors").is_file()
    before = {name: (data_dir / name).stat().st_mtime_ns for name in arrays(data_dir)}
    again = run_cli("distill", run, "--config", config, "--select", "top", *common)
    assert again.code == 0 and "already distilled" in again.out, again.err
    assert {name: (data_dir / name).stat().st_mtime_ns for name in arrays(data_dir)} == before


def test_an_export_or_an_ensemble_teaches(student, toy_run_workdir, run_cli, tmp_path):
    """auto: CTranslate2 for an export (fingerprinted by its files), the torch engine for an ensemble; an ensemble
    with an export in it is refused."""
    pytest.importorskip("ctranslate2")
    run, export = toy_run_workdir / "run", tmp_path / "teacher-ct2"
    assert run_cli("export", run, "--output", export).code == 0
    common = ("--select", "top", "--threads", "1", "--chunk-size", TRAIN_SENTENCES)
    mixed = run_cli("distill", run, export, "--config", student(), *common)
    assert_one_line_error(mixed, "an ensemble of teachers runs on the torch engine", "not a CTranslate2 export")
    assert run_cli("distill", export, "--config", student(), *common).code == 0
    entry = json.loads((tmp_path / "distilled" / "manifest.json").read_text())["distillation"]
    assert entry["engine"] == "ctranslate2" and entry["teachers"][0]["path"] == str(export.resolve())
    ensemble = (run, run / "checkpoints" / "ckpt_0000150.safetensors")
    result = run_cli("distill", *ensemble, "--config", student(dir=str(tmp_path / "ensemble")), *common)
    assert result.code == 0, result.err
    entry = json.loads((tmp_path / "ensemble" / "manifest.json").read_text())["distillation"]
    assert entry["engine"] == "torch" and [Path(m["path"]).name for m in entry["teachers"]] == [
        "best.safetensors",
        "ckpt_0000150.safetensors",
    ]


# ------------------------------------------------------------------------------------- resume, refusals
def test_an_interrupted_distillation_resumes_and_refuses_another_selection_or_teacher(
    student, toy_run_workdir, run_cli, tmp_path, monkeypatch
):
    from mtkit.inference import teacher as teachermod

    config, run = student(), toy_run_workdir / "run"
    real, calls = teachermod.Teacher.translate, []

    def interrupted(self, lines, nbest):
        calls.append(len(lines))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(self, lines, nbest)

    monkeypatch.setattr(teachermod.Teacher, "translate", interrupted)
    common = ("--engine", "torch", "--threads", "1")
    assert run_cli("distill", run, "--config", config, "--chunk-size", CHUNK, *common).code == 130
    work = tmp_path / "distilled.distill"
    assert (
        sorted(p.name for p in work.glob("chunk-*")) == ["chunk-000000.tsv"] and not (tmp_path / "distilled").exists()
    )
    snapshot = {p.name: p.read_bytes() for p in work.iterdir() if p.is_file()}
    bleu = run_cli("distill", run, "--config", config, "--select", "bleu", *common)
    assert_one_line_error(bleu, str(work), "--select was chrf, now bleu", "remove")
    other = run_cli("distill", run / "checkpoints" / "ckpt_0000150.safetensors", "--config", config, *common)
    assert_one_line_error(other, "the teacher was", "ckpt_0000150.safetensors")
    size = run_cli("distill", run, "--config", config, "--chunk-size", 10, *common)
    assert_one_line_error(size, "--chunk-size was 25, now 10")
    with open(work / "distill.lock", "a") as held:  # as a distill writing the folder holds it
        fcntl.flock(held, fcntl.LOCK_EX)
        busy = run_cli("distill", run, "--config", config, *common)
    assert_one_line_error(busy, "another mtkit distill is writing this folder")
    assert {p.name: p.read_bytes() for p in work.iterdir() if p.is_file()} == snapshot
    assert not (tmp_path / "distilled").exists()
    monkeypatch.setattr(teachermod.Teacher, "translate", real)
    resumed = run_cli("distill", run, "--config", config, *common)  # the folder's chunk size
    assert resumed.code == 0, resumed.err
    assert "resuming at chunk 2 of 3 (25 sentences done)" in resumed.out
    assert json.loads((tmp_path / "distilled" / "manifest.json").read_text())["distillation"]["sentences"] == 60


def test_refusals_are_one_line_and_write_nothing(student, toy_run_workdir, run_cli, tmp_path):
    run = toy_run_workdir / "run"
    common = ("--engine", "torch", "--threads", "1")
    pinned = run_cli("distill", run, "--config", student(vocab_size=200), *common)
    assert_one_line_error(pinned, "data.vocab_size = 200", "100 subwords", str(run))
    unigram = run_cli("distill", run, "--config", student(spm_model_type="unigram"), *common)
    assert_one_line_error(unigram, "data.spm_model_type = unigram", "bpe")
    languages = run_cli("distill", run, "--config", student(src_lang="fr"), *common)
    assert_one_line_error(languages, "data.src_lang / data.tgt_lang are fr / de", "translates en into de")
    missing = run_cli("distill", tmp_path / "no-such-run", "--config", student(), *common)
    assert_one_line_error(missing, "no-such-run: no such teacher")
    selection = run_cli("distill", run, "--config", student(), "--select", "best", *common)
    assert_one_line_error(selection, "--select 'best'", "chrf", "top")
    assert not (tmp_path / "distilled").exists() and not (tmp_path / "distilled.distill").exists()
    assert run_cli("prepare", student(vocab_size=100)).code == 0  # the corpus itself: not distill's to replace
    prepared = run_cli("distill", run, "--config", student(vocab_size=100), *common)
    assert_one_line_error(prepared, "holds data mtkit prepare wrote", "a data.dir of its own")
    assert not (tmp_path / "distilled.distill").exists()


def test_prepare_refuses_to_replace_a_distilled_dir_without_force(student, toy_run_workdir, run_cli, tmp_path):
    config = student(vocab_size=100)
    cfg = cfgmod.load(config)
    sources = Path(cfg.data.splits["train"].src).read_text(encoding="utf-8").splitlines()
    teacher = GivenTeacher(Tokenizer.from_run(toy_run_workdir / "run"), {s: ["Ein Hund ."] for s in sources})
    distillmod.distill(cfg, teacher, select="top")
    refused = run_cli("prepare", config)
    assert_one_line_error(refused, "holds a training set distilled by mtkit distill", "--force")
    assert "distillation" in json.loads((tmp_path / "distilled" / "manifest.json").read_text())
    assert run_cli("prepare", config, "--force").code == 0
    assert "distillation" not in json.loads((tmp_path / "distilled" / "manifest.json").read_text())


# ---------------------------------------------------------------------------------------------- kill -9
def test_kill_9_then_rerun_gives_the_arrays_of_an_uninterrupted_run(student, toy_run_workdir, tmp_path):
    """A distill killed after its first chunk, then run again, writes the same arrays as one run straight through."""
    run = toy_run_workdir / "run"
    straight, killed = student("straight.yaml", dir=str(tmp_path / "straight")), student("killed.yaml")
    common = ["--engine", "torch", "--threads", "1", "--chunk-size", "5"]

    def distill(config: Path) -> list[str]:
        return [sys.executable, "-m", "mtkit", "distill", str(run), "--config", str(config), *common]

    env = {**SUBPROCESS_ENV, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(distill(straight), capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    work = tmp_path / "distilled.distill"
    chunks = kill_after_first_chunk(distill(killed), work, env, "distillation")
    assert 1 <= chunks < 12 and not (tmp_path / "distilled").exists()
    again = subprocess.run(distill(killed), capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0, again.stderr
    assert f"resuming at chunk {chunks + 1} of 12" in again.stdout
    assert arrays(tmp_path / "distilled") == arrays(tmp_path / "straight")
    assert not list(work.glob(".*.tmp"))  # the write the kill cut short was cleaned up
