"""The folders ``mtkit prepare`` builds in: who owns a build, which leftovers are stale, and when the existing
data dir is current or may be replaced.

A build happens in ``.NAME.tmp-*`` beside the data dir ``NAME`` and holds an owner file naming its process;
``files.replace_dir`` swaps it into place, moving the old dir aside as ``.NAME.old-*`` for a moment.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import time
from pathlib import Path
from typing import Optional

from mtkit.errors import MtkitError
from mtkit.files import process_alive
from mtkit.manifest import MANIFEST, read_manifest

BUILD_OWNER = ".owner"  # "host pid" of the prepare process building a folder
STALE_UNOWNED_SECONDS = 600


def claim_build(build_dir: Path) -> None:
    """Mark ``build_dir`` as this process's build.

    Args:
        build_dir: a fresh build folder.
    """
    (build_dir / BUILD_OWNER).write_text(f"{socket.gethostname()} {os.getpid()}\n", encoding="utf-8")


def release_build(build_dir: Path) -> None:
    """Remove the owner file from a finished build, before it becomes the data dir.

    Args:
        build_dir: a build folder this process claimed.
    """
    (build_dir / BUILD_OWNER).unlink()


def remove_stale_builds(out_dir: Path) -> None:
    """Delete the build folders a killed ``prepare`` left beside ``out_dir`` (``.NAME.tmp-*``, ``.NAME.old-*``).

    A build is stale when its owner process, on this host, is gone. A build without an owner file is stale once
    untouched for ``STALE_UNOWNED_SECONDS``. Builds of live processes and of other hosts stay.

    Args:
        out_dir: the data dir; its siblings are examined.
    """
    host = socket.gethostname()
    for build in out_dir.parent.glob(f".{glob.escape(out_dir.name)}.tmp-*"):
        if not build.is_dir() or build.is_symlink():
            continue
        try:
            owner_host, pid = (build / BUILD_OWNER).read_text(encoding="utf-8").split()
            stale = owner_host == host and not process_alive(int(pid))
        except FileNotFoundError:  # killed between creating the folder and writing its owner
            try:
                stale = time.time() - build.stat().st_mtime > STALE_UNOWNED_SECONDS
            except FileNotFoundError:  # removed meanwhile
                continue
        except (OSError, ValueError, UnicodeDecodeError):
            continue  # unreadable: not ours to judge
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
