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


REUSE = """
import resource, torch
from mtkit.memory import keep_freed_memory
keep_freed_memory()
x, w = torch.randn(1000, 64), torch.randn(64, 16000)
for _ in range(30):  # a decoding step's output layer: 64 MB logits, then 64 MB log-probs, both freed
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    (x @ w).log_softmax(dim=-1).amax()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only"
)
def test_blocks_larger_than_any_mmap_threshold_are_reused_without_page_faults():
    env = {k: v for k, v in os.environ.items() if k != "MTKIT_MALLOC"}
    done = subprocess.run([sys.executable, "-c", REUSE], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    faults = [int(n) for n in done.stdout.split()]
    # fresh memory faults ~31,000 pages of 4 KiB in at every step (glibc's defaults map blocks past 32 MiB). Kept
    # memory is reused once the heap holds both blocks where they fit among the small allocations made meanwhile;
    # until then the heap grows by one or two blocks a step, for 1 to 5 steps in 30-odd runs with AVX-512 kernels and
    # as many with AVX2 ones (it varies from run to run, and with the kernels' own allocations). So nothing faults in
    # over the last 10 of 30 steps, and the heap grew by a few blocks of 15,625 pages in all, not by two every step
    assert max(faults[-10:]) < 1000, faults
    assert sum(faults[1:]) < 12 * 15625, faults
