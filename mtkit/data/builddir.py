"""The folders ``mtkit prepare`` builds in: who owns a build, which leftovers are stale, and when the existing
data dir is current or may be replaced.

A build happens in ``.NAME.tmp-PID@HOST-*`` beside the data dir ``NAME``: the folder's name says which process
owns it from the moment it exists until ``files.replace_dir`` swaps it into place (moving the old dir aside as
``.NAME.old-*`` for a moment), so a kill at any point leaves nothing a later prepare cannot judge.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import Optional

from mtkit.errors import MtkitError
from mtkit.files import process_alive
from mtkit.manifest import MANIFEST, read_manifest

STALE_UNOWNED_SECONDS = 600  # for build folders whose name does not say their owner


def _prefix(out_dir: Path) -> str:
    return f".{out_dir.name}.tmp-"


def new_build(out_dir: Path) -> Path:
    """Make a fresh build folder beside ``out_dir`` whose name names this process and host.

    Args:
        out_dir: the data dir the build will become.

    Returns:
        The new, empty folder (private, as ``tempfile.mkdtemp`` makes it).
    """
    prefix = f"{_prefix(out_dir)}{os.getpid()}@{socket.gethostname()}-"
    return Path(tempfile.mkdtemp(prefix=prefix, dir=out_dir.parent))


def _owner(build: Path, out_dir: Path) -> Optional[tuple[str, int]]:
    """(host, pid) from a build folder's name, or None when the name does not carry them."""
    rest = build.name[len(_prefix(out_dir)) :]
    pid, at, host_and_random = rest.partition("@")
    if not at or not pid.isdigit() or "-" not in host_and_random:
        return None
    return host_and_random.rpartition("-")[0], int(pid)  # mkdtemp's random part has no "-"


def remove_stale_builds(out_dir: Path) -> None:
    """Delete the build folders a killed ``prepare`` left beside ``out_dir`` (``.NAME.tmp-*``, ``.NAME.old-*``).

    A build is stale when its owner process (named in the folder's name), on this host, is gone. A folder whose
    name names no owner is stale once untouched for ``STALE_UNOWNED_SECONDS``. Builds of live processes and of
    other hosts stay.

    Args:
        out_dir: the data dir; its siblings are examined.
    """
    host = socket.gethostname()
    for build in out_dir.parent.glob(f"{glob.escape(_prefix(out_dir))}*"):
        if not build.is_dir() or build.is_symlink():
            continue
        owner = _owner(build, out_dir)
        if owner is not None:
            stale = owner[0] == host and not process_alive(owner[1])
        else:
            try:
                stale = time.time() - build.stat().st_mtime > STALE_UNOWNED_SECONDS
            except FileNotFoundError:  # removed meanwhile
                continue
        if stale:
            shutil.rmtree(build, ignore_errors=True)
            print(f"{build}: removed the unfinished build of an interrupted prepare")
    if out_dir.is_dir():  # the swap finished: any copy moved aside before it (``replace_dir``) is garbage
        for old in out_dir.parent.glob(f".{glob.escape(out_dir.name)}.old-*"):
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old, ignore_errors=True)


def current_manifest(out_dir: Path, fingerprint: str) -> Optional[dict]:
    """The manifest of ``out_dir`` if that dir is up to date.

    Args:
        out_dir: the data dir.
        fingerprint: the inputs fingerprint of the build asked for.

    Returns:
        The manifest when it was built from exactly these inputs and all its files are there, else None.
    """
    try:
        manifest = read_manifest(out_dir)
    except MtkitError:
        return None
    if manifest.get("inputs_fingerprint") != fingerprint:
        return None
    names = list(manifest.get("tokenizer", {}).values())
    for entry in manifest.get("splits", {}).values():
        files = entry.get("files", {})
        for copy in [files, *files.get("samples", [])]:  # the split's own files, then its sampled copies
            names.extend(copy[side][kind] for side in ("src", "tgt") for kind in ("bin", "idx"))
        names.extend(files.get("text", {}).values())
    return manifest if all((out_dir / n).is_file() for n in names) else None


def check_replaceable(out_dir: Path) -> None:
    """Refuse to replace anything at ``out_dir`` but a missing dir, an empty one or an mtkit data dir.

    Args:
        out_dir: the data dir.

    Raises:
        MtkitError: ``out_dir`` is a file, or a non-empty folder without a manifest.
    """
    if out_dir.exists() and not out_dir.is_dir():
        raise MtkitError(f"data.dir: {out_dir} is a file; choose a directory path")
    if out_dir.is_dir() and any(out_dir.iterdir()) and not (out_dir / MANIFEST).is_file():
        raise MtkitError(
            f"data.dir: {out_dir} exists and is not an mtkit data dir (no manifest.json); "
            "choose another data.dir or remove it"
        )


def check_not_distilled(out_dir: Path) -> None:
    """Refuse to replace a data dir that ``mtkit distill`` wrote (its manifest has ``distillation``) with the
    corpus's own references: ``mtkit prepare --force`` does that on purpose.

    Args:
        out_dir: the data dir.

    Raises:
        MtkitError: ``out_dir`` holds a distilled training set.
    """
    try:
        distilled = "distillation" in read_manifest(out_dir)
    except MtkitError:  # none, or unreadable: check_replaceable judges it
        return
    if distilled:
        raise MtkitError(
            f"data.dir: {out_dir} holds a training set distilled by mtkit distill; rerun mtkit distill TEACHER "
            "--config CONFIG to update it, or pass --force to replace it with the corpus's own references"
        )
