"""mtkit/memory.py: glibc's malloc is told once to keep freed memory; MTKIT_MALLOC=default leaves it alone."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

CODE = "from mtkit.memory import keep_freed_memory as k; print(k(), k())"


def run(env_value):
    env = {k: v for k, v in os.environ.items() if k != "MTKIT_MALLOC"}
    if env_value is not None:
        env["MTKIT_MALLOC"] = env_value
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only"
)
def test_glibc_is_tuned_once_unless_told_not_to():
    assert run(None) == ["True", "True"]  # every mallopt call succeeded; the second call answers the first's result
    assert run("default") == ["False", "False"]
    assert run(" Default ") == ["False", "False"]
