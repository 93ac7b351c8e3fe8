"""Nothing half-written: atomic file writes and directory swaps, fsync, the run lock and writer-pid checks.

Every file a command writes appears whole or not at all: it is written to ``.NAME.PID.tmp`` beside its target,
flushed and fsynced, then renamed over the target, and the folder is fsynced. A process killed midway leaves
only its temp file, which ``remove_stale_temps`` deletes once the writer is gone. Directories are built
under a temp name and swapped in by ``replace_dir``.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import time
from pathlib import Path
from typing import IO, Iterator

from mtkit.errors import MtkitError

TMP_RE = re.compile(r"^\..+\.(\d+)\.tmp$")  # what atomic_open leaves behind when killed mid-write


def temp_path(path: Path) -> Path:
    """Where ``atomic_open`` writes ``path`` before renaming it into place."""
    return path.with_name(f".{path.name}.{os.getpid()}.tmp")


@contextlib.contextmanager
def atomic_open(path: Path, mode: str = "w", **kwargs) -> Iterator[IO]:
    """A file opened for writing that appears at ``path`` only when the block ends without an error: temp file,
    flush, fsync, rename, fsync of the folder. On an error the temp file is removed and ``path`` is untouched."""
    path = Path(path)
    tmp = temp_path(path)
    try:
        with open(tmp, mode, **kwargs) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole or not at all (``atomic_open``); a failure is one line naming ``path``."""
    try:
        with atomic_open(path, "wb") as f:
            f.write(data)
    except OSError as err:
        raise MtkitError(
            f"{path}: cannot write ({err.strerror or err}); free some disk space or fix permissions, "
            "the previous files are intact"
        ) from None


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def fsync_dir(path: Path) -> None:
    """fsync a folder, so the names renamed into it survive a crash (best effort: not every file system can)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    """fsync every file under ``root``, then ``root`` itself: a directory about to be renamed into place."""
    for path in root.rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
    fsync_dir(root)


def replace_dir(new: Path, target: Path) -> None:
    """Move the finished ``new`` dir to ``target``; an old ``target`` is moved aside first, then deleted."""
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}-{time.time_ns()}")
        os.rename(target, old)
    try:
        os.rename(new, target)
    except BaseException:
        if old is not None:
            os.rename(old, target)  # put the previous one back
        raise
    fsync_dir(target.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine (owned by anyone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by another user
        return True
    return True


def remove_stale_temps(folder: Path) -> None:
    """Delete the temp files of writes killed midway: those whose writer (the pid in the name) is gone."""
    if not Path(folder).is_dir():
        return
    for p in Path(folder).iterdir():
        m = TMP_RE.match(p.name)
        if m and p.is_file():
            pid = int(m.group(1))
            # this process has no write in flight while it cleans up
            if pid == os.getpid() or not process_alive(pid):
                p.unlink(missing_ok=True)


class RunLock:
    """An exclusive flock on RUN/train.lock: a second trainer on the same run dir is refused; the OS
    releases the lock when the process dies, so a crash never leaves the run dir locked."""

    def __init__(self, run_dir: Path):
        self.path = run_dir / "train.lock"
        self.fd = None

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(self.fd, 64).decode(errors="replace").strip() or "another process"
            os.close(self.fd)
            raise MtkitError(
                f"{self.path.parent}: another mtkit train (pid {holder}) is using this run dir; "
                "wait for it to finish or choose another training.run_dir"
            ) from None
        os.ftruncate(self.fd, 0)
        os.write(self.fd, str(os.getpid()).encode())
        return self

    def __exit__(self, *exc):
        with contextlib.suppress(OSError):
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)


def current_umask() -> int:
    """The process's file-creation mask (reading it means setting it, so it is set back at once)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_new_run_dir(out: Path, force: bool) -> None:
    """``out`` may become a run directory: it does not exist, is an empty folder, or (with ``force``) is a run
    directory to replace.

    Raises:
        MtkitError: it exists otherwise, in one line saying what to do.
    """
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not force:
            raise MtkitError(f"{out}: already exists; pass --force to replace it")
        if not (out / "config.yaml").is_file():
            raise MtkitError(
                f"{out}: exists and is not a run directory; --force only replaces one (choose another --output)"
            )
