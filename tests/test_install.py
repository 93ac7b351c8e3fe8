"""The environment the tests run in holds what requirements.lock installs: each locked package at its locked
version."""

from __future__ import annotations

import re
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


def _missing_or_other_version(lock_lines) -> list[str]:
    """The locked packages (for this platform) that this interpreter lacks or has at another version."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import Requirement
    from packaging.version import Version

    wrong = []
    for line in lock_lines:
        line = line.split("#", 1)[0].strip()
        if "==" not in line:
            continue
        requirement = Requirement(line)
        if requirement.marker is not None and not requirement.marker.evaluate():
            continue  # locked for another platform
        (pin,) = requirement.specifier
        try:
            installed = version(requirement.name)
        except PackageNotFoundError:
            wrong.append(f"{requirement.name}: not installed, locked {pin.version}")
            continue
        if Version(installed) != Version(pin.version):
            wrong.append(f"{requirement.name}: {installed} installed, locked {pin.version}")
    return wrong


def test_every_locked_package_is_installed_at_its_locked_version():
    """Packages the lock does not name (a tool someone added) may be there too: only the locked ones are held."""
    assert _missing_or_other_version(LOCK.read_text(encoding="utf-8").splitlines()) == []


def test_a_missing_package_or_another_version_is_reported():
    from importlib.metadata import version

    lines = [
        f"typer=={version('typer')}",
        "sacrebleu==0.0.1",
        "no-such-package==1.0",
        'torch==0.1 ; os_name == "no-such-os"',
    ]
    assert _missing_or_other_version(lines) == [
        f"sacrebleu: {version('sacrebleu')} installed, locked 0.0.1",
        "no-such-package: not installed, locked 1.0",
    ]
