"""What the scripts in this folder share: the line saying which machine a benchmark ran on (the CPU's model name,
its widest vector extension, the kernels PyTorch picked and the threads used), and reading the shipped splits."""

from __future__ import annotations

import gzip
from pathlib import Path


def read_gz(path: Path) -> list[str]:
    """The lines of a gzipped UTF-8 text file (e.g. data/multi30k/test_2016_flickr.en.gz)."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def cpu_name_and_flags() -> tuple[str, set[str]]:
    name, flags = "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and name == "unknown CPU":
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return name, flags


def describe() -> str:
    """e.g. ``AMD EPYC, AVX-512, 2 cores; torch kernels avx512, 2 thread(s)``."""
    import os

    import torch

    name, flags = cpu_name_and_flags()
    vector = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2" if flags else "?"
    return (
        f"{name}, {vector}, {os.cpu_count()} cores; torch kernels {torch.backends.cpu.get_cpu_capability()}, "
        f"{torch.get_num_threads()} thread(s)"
    )
