"""`mtkit backtranslate RUN MONO --output DIR`: back-translation (Sennrich et al. 2016) of monolingual text into a
synthetic parallel corpus.

RUN translates the language of MONO into another: for more en->de training data, RUN is a de->en model and MONO
German text. DIR then holds the corpus a en->de config trains on (``data.splits.train`` or ``data.mix``):

    DIR/bt.en          RUN's translations (the synthetic sources), one per kept line of MONO
    DIR/bt.de          the lines of MONO (the real targets), line-aligned with bt.en
    DIR/report.json    what was translated, by what, how, and the counts

The file names carry RUN's target language (the synthetic side) and its source language (MONO's). With ``tag``
(tagged back-translation, Caswell et al. 2019) every synthetic line starts with the tag token and a space; the
config that trains on it must declare the token in ``data.user_symbols`` so that SentencePiece keeps it whole.

MONO's lines are whitespace-normalised as ``prepare`` does, and an empty line is dropped (prepare would drop its
pair anyway): the corpus holds MONO's non-empty lines in order, and the report counts the dropped ones.

The translations go to a work folder beside DIR a chunk at a time (``chunkwork``, as ``mtkit distill``):

    DIR.work/job.json              the model's fingerprint, the decoding options, MONO's path, size and time
    DIR.work/chunk-NNNNNN.tsv      a finished chunk: the MONO line TAB its translation
    DIR.work/backtranslate.lock    held by the process writing the folder

A rerun after an interrupt translates from the first missing chunk on, and gives the bytes of an uninterrupted run:
chunk k of an algorithm that draws (sampling) is drawn with seed + k, whichever process translates it. DIR itself
is written whole, at the end (built beside it and renamed into place). The tag is not in the chunks: a rerun with
another tag rewrites DIR without translating again.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Iterator, Optional

from mtkit.data import chunkwork
from mtkit.data.builddir import new_build, remove_stale_builds
from mtkit.data.sources import text_lines
from mtkit.errors import MtkitError
from mtkit.files import current_umask, fsync_tree, replace_dir

JOB_FORMAT = "mtkit-backtranslate-1"
REPORT = "report.json"
CHUNK_SIZE = 2000  # sentences per chunk: the most an interrupt loses
DEFAULT_TAG = "<BT>"
SKIP_HINT = "give --skip-bad-lines"


def _names(members: list) -> str:
    return " + ".join(m["path"] for m in members)


WORK = chunkwork.Kind(
    command="mtkit backtranslate",
    job_name="back-translation",
    lock="backtranslate.lock",
    differences=(
        ("model_fingerprint", "the model"),
        ("search", "the decoding options (--algorithm, --beam-size and the algorithm's own)"),
        ("source", "MONO (its path, size or modification time, or --skip-bad-lines)"),
        ("chunk_size", "--chunk-size"),
    ),
    shown={"model_fingerprint": lambda job: _names(job.get("models", []))},
)


def work_dir(out: Path) -> Path:
    """Where ``backtranslate`` keeps the chunks of ``out``: ``NAME.work`` beside it."""
    return out.with_name(f"{out.name}.work")


def check_inputs(mono: Path, out: Path, tag: Optional[str]) -> None:
    """Refuse, in one line, a MONO that is not a file, an --output that is not a folder back-translate may replace,
    or a tag with whitespace in it.

    Raises:
        MtkitError: naming the argument and what to do.
    """
    if not mono.is_file():
        what = "is a directory" if mono.is_dir() else "not found"
        raise MtkitError(f"MONO: {mono}: file {what}; give a file of monolingual text (plain or .gz)")
    if out.exists() and not out.is_dir():
        raise MtkitError(f"--output {out}: is a file; give a folder path")
    if out.is_dir() and any(out.iterdir()) and not (out / REPORT).is_file():
        raise MtkitError(
            f"--output {out}: a folder with other files in it (no {REPORT}); give a new or empty folder, or remove it"
        )
    if tag is not None and (not tag or len(tag.split()) != 1 or tag != tag.strip()):
        raise MtkitError(f"--tag-token {tag!r}: give one token without spaces, e.g. {DEFAULT_TAG}")


def mono_lines(mono: Path, skip_bad: bool, counts: Optional[dict] = None) -> Iterator[str]:
    """MONO's lines worth translating, whitespace-normalised: not empty, valid UTF-8 (or skipped, ``skip_bad``).

    Args:
        mono: the file.
        skip_bad: drop lines of invalid UTF-8 instead of failing.
        counts: filled with lines_read, empty and bad_lines.

    Raises:
        MtkitError: invalid UTF-8 (without ``skip_bad``), naming the file and line.
    """
    for text in text_lines(mono, skip_bad, SKIP_HINT):
        line = None if text is None else " ".join(text.split())
        if counts is not None:
            counts["lines_read"] = counts.get("lines_read", 0) + 1
            if text is None:
                counts["bad_lines"] = counts.get("bad_lines", 0) + 1
            elif not line:
                counts["empty"] = counts.get("empty", 0) + 1
        if line:
            yield line


def search_of(options) -> dict:
    """What changes a model's translations under ``options`` (``inference.options.Options``): the algorithm, the
    search's limits and the algorithm's own options."""
    own = {p.name: options.param(p.name) for p in options.chosen.params}
    keys = ("beam_size", "length_penalty", "max_len_a", "max_len_b")
    return {"algorithm": options.algorithm, **{k: getattr(options, k) for k in keys}, **own}


def backtranslate(
    model,
    mono: Path,
    out: Path,
    *,
    search: dict,
    seed_option: str = "",
    tag: Optional[str] = None,
    chunk_size: Optional[int] = None,
    skip_bad_lines: bool = False,
) -> dict:
    """Translate MONO with ``model`` into the corpus folder ``out``.

    Args:
        model: a loaded model as ``inference.teacher.Teacher`` (members, fingerprint, languages, engine,
            ``translate(lines, nbest, **decoding)``).
        mono: the monolingual text (the model's source language), plain or gzip.
        out: the corpus folder.
        search: what changes the translations (``search_of``): the job's key.
        seed_option: the decoding option that seeds the algorithm's draws ("" for one that does not draw): chunk
            k is translated with it set to its value + k.
        tag: the token each synthetic line starts with (tagged back-translation), None for none.
        chunk_size: sentences per chunk (default ``CHUNK_SIZE``, or the work folder's own).
        skip_bad_lines: drop MONO's lines of invalid UTF-8.

    Returns:
        The report written to ``out/report.json``.

    Raises:
        MtkitError: a bad MONO, --output or tag, a model without languages, a work folder of another job (or in use),
            MONO without a line to translate.
    """
    started = time.perf_counter()
    mono, out = Path(mono), Path(out)
    check_inputs(mono, out, tag)
    source_lang, target_lang = model.languages
    if not source_lang or not target_lang or getattr(model, "targets", ()):
        raise MtkitError(
            f"{_names(model.members)}: its config names no single source and target language; back-translate with "
            "a model of one direction (data.src_lang, data.tgt_lang)"
        )
    counts: dict = {"lines_read": 0, "empty": 0, "bad_lines": 0}
    total = sum(1 for _ in mono_lines(mono, skip_bad_lines, counts))  # invalid UTF-8 fails here, before any work
    if total == 0:
        raise MtkitError(f"MONO: {mono}: no line to translate ({counts['lines_read']} lines, all empty or skipped)")
    stat = mono.stat()
    job = {
        "format": JOB_FORMAT,
        "models": model.members,
        "model_fingerprint": model.fingerprint,
        "search": search,
        "source": {
            "path": str(mono.resolve()),
            "size": stat.st_size,
            "mtime_ns": stat.st_mtime_ns,
            "skip_bad_lines": skip_bad_lines,
        },
    }
    work = work_dir(out)
    size = chunkwork.open_work(work, job, chunk_size, WORK, CHUNK_SIZE)
    base_seed = search.get(seed_option, 0) if seed_option else 0

    def rows_of(index: int, chunk: list) -> list[str]:
        decoding = {seed_option: base_seed + index} if seed_option else {}
        found = model.translate(chunk, 1, **decoding)
        return [f"{line}\t{' '.join(hyps[0].split()) if hyps else ''}\n" for line, hyps in zip(chunk, found)]

    with chunkwork.locked(work, WORK):
        paths = []
        label = f"backtranslate ({model.engine}): sentences"
        for _, chunk, path in chunkwork.fill(work, mono_lines(mono, skip_bad_lines), total, size, rows_of, label):
            if [row[0] for row in read_chunk(path)] != chunk:
                raise MtkitError(f"{path}: holds other lines than MONO; remove {work} to start over")
            paths.append(path)
        report = _write(out, paths, (target_lang, source_lang), tag, job, size, counts, total, model.engine, work)
    print(
        f"{out}: {total} lines of {mono} back-translated by {_names(model.members)} ({search['algorithm']}"
        f"{', tagged ' + tag if tag else ''}): {report['files']['synthetic']} + {report['files']['original']}; "
        f"{time.perf_counter() - started:.1f} s; the translations stay in {work}"
    )
    return report


def read_chunk(path: Path) -> list[tuple[str, str]]:
    """The rows of a finished chunk: (MONO's line, its translation) per line, in order.

    Raises:
        MtkitError: a row that is not two tab-separated fields.
    """
    return [(line, hyp) for line, hyp in chunkwork.read_rows(path, 2, "back-translated")]


def _write(
    out: Path,
    chunks: list[Path],
    langs: tuple[str, str],
    tag: Optional[str],
    job: dict,
    size: int,
    counts: dict,
    total: int,
    engine: str,
    work: Path,
) -> dict:
    """The corpus folder from the chunks, built beside ``out`` and renamed into place."""
    synthetic, original = (f"bt.{lang}" for lang in langs)
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_builds(out)
    build = new_build(out)
    empty = 0
    try:
        with (
            open(build / synthetic, "w", encoding="utf-8", newline="\n") as fs,
            open(build / original, "w", encoding="utf-8", newline="\n") as fo,
        ):
            for path in chunks:
                for line, hyp in read_chunk(path):
                    empty += not hyp
                    fs.write(" ".join(filter(None, (tag, hyp))) + "\n")
                    fo.write(line + "\n")
        report = {
            "format": JOB_FORMAT,
            "models": job["models"],
            "model_fingerprint": job["model_fingerprint"],
            "engine": engine,
            "languages": {"synthetic": langs[0], "original": langs[1]},
            "files": {"synthetic": synthetic, "original": original},
            "mono": job["source"]["path"],
            "search": job["search"],
            "tag": tag,
            "chunk_size": size,
            "lines_read": counts["lines_read"],
            "pairs": total,
            "dropped": {"empty": counts["empty"], "bad_lines": counts["bad_lines"]},
            "empty_translations": empty,
            "work": str(work),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        (build / REPORT).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        build.chmod(0o777 & ~current_umask())  # mkdtemp makes it private; the corpus should not be
        fsync_tree(build)
        replace_dir(build, out)
    except BaseException:
        shutil.rmtree(build, ignore_errors=True)
        raise
    return report
