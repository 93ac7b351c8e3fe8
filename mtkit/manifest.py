"""The data dir's ``manifest.json`` (written last by ``mtkit prepare``): its format version and the one reader."""

from __future__ import annotations

import json
from pathlib import Path

from mtkit.errors import MtkitError

FORMAT_VERSION = 1
MANIFEST = "manifest.json"


def read_manifest(data_dir) -> dict:
    """The manifest of ``data_dir``; a missing, unreadable or outdated one is one line saying what to run."""
    path = Path(data_dir) / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise MtkitError(f"{path}: not found; run `mtkit prepare CONFIG` first") from None
    except (OSError, ValueError):  # ValueError: bad JSON or bad UTF-8
        raise MtkitError(f"{path}: unreadable manifest; rerun `mtkit prepare CONFIG --force`") from None
    version = manifest.get("version") if isinstance(manifest, dict) else None
    if version != FORMAT_VERSION:
        raise MtkitError(
            f"{path}: data format version {version} (expected {FORMAT_VERSION}); rerun `mtkit prepare CONFIG --force`"
        )
    return manifest
