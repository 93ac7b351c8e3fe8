"""A work folder of chunks: what ``mtkit distill`` and ``mtkit backtranslate`` share to translate a corpus a chunk at
a time and resume after any interrupt.

    WORK/job.json            what is translated (the model's fingerprint, the search, the corpus) and the chunk size
    WORK/chunk-NNNNNN.tsv    a finished chunk, one row per sentence (the command decides the columns)
    WORK/LOCK                held by the process writing the folder (``Kind.lock``)

A chunk is written whole or not at all (``files.atomic_open``), so a rerun translates from the first missing chunk
on; a rerun whose job differs in a key the kind names (``Kind.differences``) is refused rather than mixed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import sys
from itertools import islice
from pathlib import Path
from typing import Callable, Iterable, Iterator, Optional

from mtkit.errors import MtkitError
from mtkit.files import atomic_open, atomic_write_text, remove_stale_temps

JOB = "job.json"


@dataclasses.dataclass(frozen=True)
class Kind:
    """What a command's work folder is.

    Attributes:
        command: how messages name the command (``mtkit distill``).
        job_name: how messages name its job (``distillation``).
        lock: the lock file's name.
        differences: (job key, how a refusal names it) per key a rerun must keep.
        shown: job key -> how a refusal shows a job's value of it (default: the value itself).
    """

    command: str
    job_name: str
    lock: str
    differences: tuple
    shown: dict = dataclasses.field(default_factory=dict)


def digest(value) -> str:
    """The sha256 of ``value`` as sorted JSON."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode("utf-8")).hexdigest()


def open_work(work: Path, job: dict, chunk_size: Optional[int], kind: Kind, default_size: int) -> int:
    """Create the work folder with ``job`` (plus the chunk size), or check that the one there is this job's.

    Args:
        work: the folder.
        job: what is translated (JSON-able).
        chunk_size: ``--chunk-size``, None for the folder's own (or ``default_size`` for a new folder).
        kind: the command's work folder.
        default_size: the chunk size of a new folder without ``chunk_size``.

    Returns:
        The chunk size: the folder's own, ``chunk_size`` or ``default_size`` for a new folder.

    Raises:
        MtkitError: a folder that is not a work folder, an unreadable job.json, a job that differs, a bad size.
    """
    record = work / JOB
    if work.is_dir():
        remove_stale_temps(work)  # a job.json whose write was cut short, say
    if not record.is_file():
        if work.exists() and (not work.is_dir() or any(p.name != kind.lock for p in work.iterdir())):
            raise MtkitError(f"{work}: exists and is not an {kind.command} work folder (no {JOB}); remove it")
        if chunk_size is not None and chunk_size < 1:
            raise MtkitError(f"--chunk-size {chunk_size}: give 1 or more sentences")
        work.mkdir(parents=True, exist_ok=True)
        size = chunk_size or default_size
        atomic_write_text(record, json.dumps({**job, "chunk_size": size}, indent=2) + "\n")
        return size
    try:
        old = json.loads(record.read_text(encoding="utf-8"))
        old_size = int(old["chunk_size"])
    except (OSError, ValueError, KeyError, TypeError):
        raise MtkitError(f"{record}: unreadable; remove {work} to start over") from None
    new = {**job, "chunk_size": old_size if chunk_size is None else chunk_size}
    for key, what in kind.differences:
        if old.get(key) != new.get(key):
            show = kind.shown.get(key)
            was, asked = (show(old), show(new)) if show else (old.get(key), new.get(key))
            raise MtkitError(
                f"{work}: holds the translations of another {kind.job_name}: {what} was {was}, "
                f"now {asked}; rerun with the same, or remove {work} to start over"
            )
    return old_size


@contextlib.contextmanager
def locked(work: Path, kind: Kind) -> Iterator[None]:
    """Hold an exclusive lock on the work folder (released by the OS when the process dies)."""
    fd = os.open(work / kind.lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise MtkitError(f"{work}: another {kind.command} is writing this folder; wait for it to finish") from None
    try:
        yield
    finally:
        os.close(fd)


def chunks(items: Iterable, size: int) -> Iterator[list]:
    """``items`` in lists of ``size`` (the last one shorter)."""
    items = iter(items)
    while chunk := list(islice(items, size)):
        yield chunk


def chunk_path(work: Path, index: int) -> Path:
    return work / f"chunk-{index:06d}.tsv"


def read_rows(path: Path, width: int, what: str) -> list[list[str]]:
    """The rows of a finished chunk, each ``width`` tab-separated fields, in order.

    Raises:
        MtkitError: a row of another width, naming the file, the line and ``what`` a row should be.
    """
    rows = []
    with open(path, encoding="utf-8", newline="\n") as f:
        for n, line in enumerate(f, 1):
            fields = line.rstrip("\n").split("\t")
            if len(fields) != width:
                raise MtkitError(f"{path}:{n}: not a {what} row; remove {path.parent} to start over")
            rows.append(fields)
    return rows


def fill(
    work: Path,
    items: Iterable,
    total: int,
    size: int,
    rows_of: Callable[[int, list], list[str]],
    description: str,
) -> Iterator[tuple[int, list, Path]]:
    """Write every chunk of ``items`` the work folder lacks, with a progress bar on stderr.

    Args:
        work: the folder (locked by the caller).
        items: what is translated, in order; ``total`` of them.
        total: their count (the bar's end, and how many chunks there are).
        size: items per chunk.
        rows_of: (chunk index, chunk) -> the chunk file's lines, each ending in a newline.
        description: the bar's label.

    Yields:
        (index, chunk, its file) for every chunk in order, once its file is there; the bar advances after each.
    """
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    count = (total + size - 1) // size
    first = next((i for i in range(count) if not chunk_path(work, i).is_file()), count)
    if first:
        print(f"{work}: resuming at chunk {first + 1} of {count} ({min(first * size, total)} sentences done)")
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, TimeRemainingColumn(), console=Console(file=sys.stderr), transient=False) as bar:
        task = bar.add_task(description, total=total)
        for index, chunk in enumerate(chunks(items, size)):
            path = chunk_path(work, index)
            if not path.is_file():
                rows = rows_of(index, chunk)
                with atomic_open(path, "w", encoding="utf-8", newline="\n") as f:
                    f.writelines(rows)
            yield index, chunk, path
            bar.advance(task, len(chunk))
