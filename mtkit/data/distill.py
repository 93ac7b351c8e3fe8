"""`mtkit distill`: sequence-level knowledge distillation (Kim and Rush 2016) of a student config's training split.

A teacher (``inference.teacher``: one model, an ensemble, or a CTranslate2 export) translates the training sources
with beam search, and one hypothesis of each n-best list becomes the sentence's target (``selection``: the one
closest to the reference by chrF or BLEU, or the teacher's best); the other splits keep their references. The
student's data dir is then built by ``prepare.prepare`` itself (the same cleaning, filters, manifest and atomic
build), encoded with the teacher's tokenizer, and its manifest's ``distillation`` entry names the teacher.

The translations go to a work folder beside the data dir, a chunk at a time:

    NAME.distill/job.json            what is distilled: the teacher's fingerprint, the rule, the search, the corpus
    NAME.distill/chunk-NNNNNN.tsv    a finished chunk: source TAB reference TAB kept hypothesis TAB its n-best rank
    NAME.distill/distill.lock        held by the process writing the folder

A chunk is written whole or not at all (``files.atomic_open``), so a rerun after any interrupt, kill -9 included,
translates from the first missing chunk on; a rerun with another teacher, rule or search is refused rather than
mixed. The folder stays when the data dir is done: a later change of the data section (filters, subword sampling)
re-encodes its chunks without translating again. Remove it to free the space.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterator, Optional, Protocol

from mtkit.config import ParallelFiles
from mtkit.data import chunkwork
from mtkit.data.builddir import check_replaceable, current_manifest
from mtkit.data.prepare import input_files, prepare
from mtkit.data.selection import Selector, check_selection
from mtkit.data.sources import hf_paths, open_sources
from mtkit.data.teacher_vocab import check_vocabulary
from mtkit.errors import MtkitError
from mtkit.files import atomic_open
from mtkit.manifest import read_manifest

JOB = chunkwork.JOB
JOB_FORMAT = "mtkit-distill-1"
CHUNK_SIZE = 2000  # sentences per chunk: the most an interrupt loses


class Teacher(Protocol):
    """What the stage needs of a teacher (``inference.teacher.Teacher``)."""

    members: list  # [{"path": str, "fingerprint": str}] per model
    fingerprint: str  # of all members together
    tokenizer: object  # a ``tokenizer.Tokenizer``
    languages: tuple  # (source, target) codes, "" where unknown
    targets: tuple  # a multilingual teacher's target languages, else ()
    search: dict  # what changes its translations: beam_size, length_penalty, max_len_a, max_len_b
    engine: str  # torch or ctranslate2

    def translate(self, lines: list[str], nbest: int) -> list[list[str]]:
        """Up to ``nbest`` translations of each line, best first."""
        ...


def work_dir(data_dir: Path) -> Path:
    """Where ``distill`` keeps the chunks of a data dir.

    Args:
        data_dir: the student's data dir (``data.dir``).

    Returns:
        ``NAME.distill`` beside it.
    """
    return data_dir.with_name(f"{data_dir.name}.distill")


def distill(
    cfg, teacher: Teacher, *, select: str = "chrf", chunk_size: Optional[int] = None, keep_original: bool = False
) -> dict:
    """Distil the training split of ``cfg.data`` with ``teacher`` into the data dir ``cfg.data.dir``.

    Args:
        cfg: the student's config (its ``data`` section; ``model.init_from``, where set, must share the teacher's
            vocabulary).
        teacher: the loaded teacher.
        select: ``chrf``, ``bleu`` or ``top`` (``selection``).
        chunk_size: sentences per chunk (default ``CHUNK_SIZE``, or the work folder's own).
        keep_original: train on the references too: each source once with the kept hypothesis, once with its
            reference.

    Returns:
        The data dir's manifest.

    Raises:
        MtkitError: a bad data section, a teacher whose vocabulary or languages the config contradicts, a data dir
            that is not a distilled one, a work folder of another distillation (or in use), or no training pair.
    """
    check_selection(select)
    data = cfg.data
    if data.multilingual:
        raise MtkitError("data.directions: mtkit distill translates one direction; give data.splits or data.hf")
    if data.hf is None and "train" not in data.splits:
        raise MtkitError("data: needs splits.train (src and tgt files) or an hf section")
    if data.mix:
        raise MtkitError("data.mix: mtkit distill translates the train split alone; drop data.mix from the config")
    input_files(data)  # every split's files exist before any translation
    check_vocabulary(cfg, teacher)
    out_dir, work = Path(data.dir), work_dir(Path(data.dir))
    nbest = 1 if select == "top" else teacher.search["beam_size"]
    job = {
        "format": JOB_FORMAT,
        "teachers": teacher.members,
        "teacher_fingerprint": teacher.fingerprint,
        "select": select,
        "search": {**teacher.search, "nbest": nbest},
        "source": _source_fingerprint(data),
    }
    done = _digest({**job, "keep_original": keep_original, "data": _data_without_dir(data)})
    finished = _finished(out_dir, done)
    if finished is not None:
        print(f"{out_dir}: already distilled by {_names(teacher.members)} (select {select}); nothing to do")
        return finished
    check_replaceable(out_dir)
    if (out_dir / "manifest.json").is_file() and "distillation" not in read_manifest(out_dir):
        raise MtkitError(
            f"data.dir: {out_dir} holds data mtkit prepare wrote, which mtkit distill would replace; give the "
            "student a data.dir of its own"
        )
    job["chunk_size"] = _open_work(work, job, chunk_size)
    with _locked(work):
        stats = _translate(data, teacher, job, work)
        entry = {
            **{k: job[k] for k in ("teachers", "teacher_fingerprint", "select", "search")},
            "engine": teacher.engine,
            "keep_original": keep_original,
            **stats,
            "work": str(work),
            "fingerprint": done,
        }
        manifest = _build(cfg, teacher, work, keep_original, entry)
    print(
        f"{out_dir}: {stats['sentences']} training sentences distilled by {_names(teacher.members)} (select "
        f"{select}, beam {teacher.search['beam_size']}; {stats['not_best']} kept another than the best); "
        f"the translations stay in {work}"
    )
    return manifest


# ---------------------------------------------------------------------------------------- the job
_digest = chunkwork.digest


def _names(members: list) -> str:
    return " + ".join(m["path"] for m in members)


def _data_without_dir(data) -> dict:
    tree = data.model_dump(mode="json")
    tree.pop("dir", None)
    return tree


def _source_fingerprint(data) -> str:
    """What the translated sentences depend on: the training files (path, size, mtime) and the keys that choose or
    change them before translation."""
    if "train" in data.splits:
        files = [Path(data.splits["train"].src), Path(data.splits["train"].tgt)]
    else:
        paths = hf_paths(data.hf)
        files = [f for p in paths for f in (sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else [p])]
    stamp = [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files]
    keys = {k: getattr(data, k) for k in ("src_lang", "tgt_lang", "max_chars", "skip_bad_lines")}
    return _digest({"files": stamp, "keys": keys, "hf": data.hf.model_dump(mode="json") if data.hf else None})


def _finished(out_dir: Path, done: str) -> Optional[dict]:
    """The data dir's manifest if this very distillation wrote it and all its files are there."""
    try:
        manifest = read_manifest(out_dir)
    except MtkitError:
        return None
    if manifest.get("distillation", {}).get("fingerprint") != done:
        return None
    return current_manifest(out_dir, manifest.get("inputs_fingerprint", ""))


DIFFERENCES = (  # job key -> how a refusal names it
    ("teacher_fingerprint", "the teacher"),
    ("select", "--select"),
    ("search", "the search (--beam-size, the teacher's decoding section)"),
    ("source", "the training corpus (its files or data.max_chars, skip_bad_lines)"),
    ("chunk_size", "--chunk-size"),
)
WORK = chunkwork.Kind(
    command="mtkit distill",
    job_name="distillation",
    lock="distill.lock",
    differences=DIFFERENCES,
    shown={"teacher_fingerprint": lambda job: _names(job.get("teachers", []))},
)


def _open_work(work: Path, job: dict, chunk_size: Optional[int]) -> int:
    """Create the work folder with ``job`` (plus the chunk size), or check that the one there is this job's.

    Returns:
        The chunk size: the folder's own, ``chunk_size`` or ``CHUNK_SIZE`` for a new folder.
    """
    return chunkwork.open_work(work, job, chunk_size, WORK, CHUNK_SIZE)


def _locked(work: Path):
    """Hold an exclusive lock on the work folder (released by the OS when the process dies)."""
    return chunkwork.locked(work, WORK)


# ------------------------------------------------------------------------------------- translating
def _kept_pairs(data, work: Path, skipped: Optional[dict] = None) -> Iterator[tuple[str, str]]:
    """The training pairs worth translating, whitespace normalised as prepare does: without those prepare drops
    whatever the target (invalid UTF-8 when skipped, an empty side, a side over data.max_chars)."""
    sources, _ = open_sources(data, work / ".hf_cache")
    for pair in sources["train"]:
        reason = None
        if pair is None:
            reason = "bad_lines"
        else:
            src, ref = " ".join(pair[0].split()), " ".join(pair[1].split())
            if not src or not ref:
                reason = "empty"
            elif len(src) > data.max_chars or len(ref) > data.max_chars:
                reason = "max_chars"
        if reason:
            if skipped is not None:
                skipped[reason] = skipped.get(reason, 0) + 1
            continue
        yield src, ref


_chunks = chunkwork.chunks
_chunk_path = chunkwork.chunk_path


def read_chunk(path: Path) -> list[tuple[str, str, str, int]]:
    """The rows of a finished chunk of a work folder.

    Args:
        path: a ``chunk-NNNNNN.tsv``.

    Returns:
        (source, reference, kept hypothesis, its rank in the n-best list, -1 for none) per sentence, in order.

    Raises:
        MtkitError: a row that is not four tab-separated fields.
    """
    return [(src, ref, hyp, int(rank)) for src, ref, hyp, rank in chunkwork.read_rows(path, 4, "distilled")]


def _translate(data, teacher: Teacher, job: dict, work: Path) -> dict:
    """Translate every chunk the work folder lacks; the counts for the manifest."""
    skipped: dict = {}
    total = sum(1 for _ in _kept_pairs(data, work, skipped))
    if total == 0:
        raise MtkitError(f"data.splits.train: no training pairs left to translate ({skipped or 'no lines'})")
    size, selector, nbest = job["chunk_size"], Selector(job["select"]), job["search"]["nbest"]

    def rows_of(index: int, chunk: list) -> list[str]:
        found = teacher.translate([src for src, _ in chunk], nbest)
        rows = []
        for (src, ref), hyps in zip(chunk, found):
            hyps = [" ".join(h.split()) for h in hyps]  # one line, no tab, as the corpus text
            pick = selector.pick(hyps, ref)
            rows.append(f"{src}\t{ref}\t{hyps[pick] if pick >= 0 else ''}\t{pick}\n")
        return rows

    not_best = 0
    label = f"distill ({teacher.engine}): sentences"
    for _, chunk, path in chunkwork.fill(work, _kept_pairs(data, work), total, size, rows_of, label):
        done = read_chunk(path)
        if [(r[0], r[1]) for r in done] != chunk:
            raise MtkitError(f"{path}: holds other sentences than the corpus; remove {work} to start over")
        not_best += sum(r[3] > 0 for r in done)
    return {"sentences": total, "skipped": skipped, "not_best": not_best}


# ------------------------------------------------------------------------------------ the data dir
def _build(cfg, teacher: Teacher, work: Path, keep_original: bool, entry: dict) -> dict:
    """The student's data dir from the chunks, built by ``prepare`` with the teacher's tokenizer."""
    data = cfg.data
    src_file, tgt_file = work / f"train.{data.src_lang}", work / f"train.{data.tgt_lang}"
    chunks = sorted(work.glob("chunk-*.tsv"))
    with (
        atomic_open(src_file, "w", encoding="utf-8", newline="\n") as fs,
        atomic_open(tgt_file, "w", encoding="utf-8", newline="\n") as ft,
    ):
        for path in chunks:
            for src, ref, hyp, _ in read_chunk(path):
                fs.write(f"{src}\n")
                ft.write(f"{hyp}\n")
                if keep_original:
                    fs.write(f"{src}\n")
                    ft.write(f"{ref}\n")
    train = ParallelFiles(src=str(src_file), tgt=str(tgt_file))
    derived = data.model_copy(update={"splits": {**data.splits, "train": train}})
    try:
        return prepare(derived, force=True, tokenizer=teacher.tokenizer, extra={"distillation": entry})
    finally:
        for path in (src_file, tgt_file):
            path.unlink(missing_ok=True)
        shutil.rmtree(work / ".hf_cache", ignore_errors=True)
