"""The model threads of ``mtkit serve``: the threads its batcher translates on (``batcher.Batcher``), and how many
models translate at once, each on its share of the cores (``--parallel-models``, docs/serving.md)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Optional

from mtkit.errors import MtkitError
from mtkit.serving.models import ModelSpec


def model_thread() -> ThreadPoolExecutor:
    """One thread for everything a model does, loading included.

    Returns:
        An executor with a single worker thread.
    """
    # PyTorch's OpenMP threads belong to the thread that starts them: a model loaded on one thread and run on
    # another has two teams on the same cores (docs/benchmarks.md, Serving)
    return ThreadPoolExecutor(max_workers=1, thread_name_prefix="mtkit-model")


def model_threads(count: int) -> list[ThreadPoolExecutor]:
    """``count`` model threads (``model_thread``): a batcher given them translates as many models at once."""
    return [model_thread() for _ in range(max(1, count))]


def share_cores(
    specs: list[ModelSpec], parallel: int, max_models: Optional[int], cores: int
) -> tuple[list[ModelSpec], int]:
    """How many models translate at once, and each spec with its threads for that.

    At most one per model, and more than one only where every model stays in memory (``MtkitError`` for a
    ``max_models`` below their number: a model unloaded to make room could be one another thread translates with). With more than one, a spec whose
    threads are not given computes on its share of the cores.

    Returns:
        The specs (those without threads given the share) and the number of model threads.
    """
    asked, parallel = parallel, max(1, min(parallel, len(specs)))
    if parallel == 1:
        return specs, 1
    if max_models is not None and max_models < len(specs):
        raise MtkitError(
            f"--parallel-models {asked} needs every model in memory, and --max-models {max_models} keeps fewer "
            f"than the {len(specs)} models: raise --max-models to {len(specs)} or drop --parallel-models"
        )
    share = max(1, cores // parallel)
    given = [
        spec if spec.options.get("threads") else replace(spec, options={**spec.options, "threads": share})
        for spec in specs
    ]
    return given, parallel
