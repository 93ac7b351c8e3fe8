"""The environment in which tests/test_argos.py and scripts/bench_argos.py run Argos Translate and LibreTranslate:
folders of their own (HOME, XDG, the package folder), an empty local package index, and the HTTP(S) proxy on a
closed local port, so that any download fails at once instead of reaching out."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping, Optional

CLOSED = "http://127.0.0.1:9"  # the discard port: nothing listens there


def offline_env(home: Path, threads: int = 1, base: Optional[Mapping[str, str]] = None) -> dict:
    """``base`` (default: this process's environment) less its proxy settings, with the tool's folders under
    ``home`` (created), ``threads`` CPU threads for CTranslate2, and no way out."""
    env = {k: v for k, v in (os.environ if base is None else base).items() if not k.lower().endswith("_proxy")}
    env.update(
        HOME=str(home),
        XDG_DATA_HOME=str(home / "data"),
        XDG_CACHE_HOME=str(home / "cache"),
        XDG_CONFIG_HOME=str(home / "config"),
        ARGOS_PACKAGES_DIR=str(home / "packages"),
        ARGOS_PACKAGE_INDEX=(home / "index").as_uri() + "/",
        ARGOS_DEVICE_TYPE="cpu",
        ARGOS_INTRA_THREADS=str(threads),
        http_proxy=CLOSED,
        https_proxy=CLOSED,
        HTTP_PROXY=CLOSED,
        HTTPS_PROXY=CLOSED,
        no_proxy="",
        NO_PROXY="",
        PYTHONWARNINGS="ignore",
    )
    (home / "index").mkdir(parents=True, exist_ok=True)
    (home / "index" / "index.json").write_text("[]\n", encoding="utf-8")  # a package index with nothing in it
    return env
