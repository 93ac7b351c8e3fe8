"""The environment the tests run in is the locked one: every installed package at requirements.lock's version."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

LOCK = Path(__file__).resolve().parent.parent / "requirements.lock"


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(lines) -> dict[str, str]:
    pins = {}
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[_canonical(name)] = version.split(";", 1)[0].strip()  # without an environment marker
    return pins


def test_lock_pins_every_requirement_exactly():
    text = LOCK.read_text(encoding="utf-8")
    pins = _pins(text.splitlines())
    requirements = [x for x in text.splitlines() if x and not x.startswith(("#", " "))]
    assert requirements and all("==" in x for x in requirements), [x for x in requirements if "==" not in x]
    for needed in ("torch", "typer", "sentencepiece", "sacrebleu", "pytest", "ctranslate2"):
        assert needed in pins, needed
    assert pins["torch"].endswith("+cpu"), "the lock must hold PyTorch's CPU build"


def test_installed_packages_match_the_lock():
    frozen = subprocess.run([sys.executable, "-m", "pip", "freeze"], capture_output=True, text=True, check=True)
    installed = _pins(x for x in frozen.stdout.splitlines() if not x.startswith("-e"))
    installed.pop("mtkit", None)
    assert installed == _pins(LOCK.read_text(encoding="utf-8").splitlines())
