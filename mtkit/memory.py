"""Keeping freed memory for reuse, so decoding and training do not page-fault their way through every step.

A decoding step allocates and frees tensors of megabytes: the logits and log-probabilities of every hypothesis
over the vocabulary (1,000 hypotheses x 8,000 subwords are 32 MB each), the self-attention caches the beams
reorder. glibc's ``malloc`` maps blocks that large straight from the kernel and unmaps them when they are freed,
so the next step's block is fresh memory that faults in page by page; its adaptive threshold helps only for sizes
it has already seen freed, and it trims the heap whenever the free top exceeds a few hundred kilobytes.
docs/benchmarks.md (section 2) has the decoding speed with and without this module; a training update allocates
and frees tens of such blocks too (activations and their gradients), and on CPU the trainer calls it as well.

``keep_freed_memory`` sets four glibc parameters once per process: no block is mapped on its own (every one
comes from the heap, whatever its size: a model with a 32,000-subword vocabulary decodes 1,000 hypotheses over
128 MB of logits a step, past the 32 MiB that glibc's largest mmap threshold would keep), the heap is trimmed only
when more than 1 GiB at its top is free, and it grows 64 MiB at a time. docs/benchmarks.md (section 17) has the
output layer's step with and without it. The cost: the process keeps the memory of its largest batch resident
after the batch (RSS stays at its peak instead of falling back between batches), and with blocks of hundreds of
megabytes some more, as a freed block is not always where the next large request fits (docs/benchmarks.md,
section 17, has how much). ``MTKIT_MALLOC=default`` leaves glibc's defaults; on other C libraries (macOS,
Windows, musl) nothing is changed.
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys

M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD, M_MMAP_MAX = -1, -2, -3, -4  # glibc's malloc.h
MMAP_THRESHOLD = 32 << 20  # glibc refuses more (HEAP_MAX_SIZE / 2 on 64-bit)
TRIM_THRESHOLD = 1 << 30
TOP_PAD = 64 << 20

_state: dict[str, bool] = {}


def keep_freed_memory() -> bool:
    """Tune glibc's malloc as the module docstring says, once per process.

    Returns:
        True when the parameters were set; False where they do not apply or ``MTKIT_MALLOC=default`` leaves them.
        Later calls return the first call's answer.
    """
    if "set" not in _state:
        _state["set"] = _tune()
    return _state["set"]


def _tune() -> bool:
    if os.environ.get("MTKIT_MALLOC", "").strip().lower() == "default":
        return False
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # mallopt returns 1 on success; setting the thresholds also turns glibc's adaptive threshold off
    return all(
        mallopt(param, value) == 1
        for param, value in (
            (M_MMAP_THRESHOLD, MMAP_THRESHOLD),
            (M_TRIM_THRESHOLD, TRIM_THRESHOLD),
            (M_TOP_PAD, TOP_PAD),
            (M_MMAP_MAX, 0),  # no block mapped on its own: freed memory of any size is reused
        )
    )
