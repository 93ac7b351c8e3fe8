"""The server's models in memory: each loaded on first use (or all at start), at most ``max_models`` at once, the
least recently used unloaded first to make room.

Only the model thread (the batcher's worker, ``threads.model_thread``) loads, unloads and translates: ``get`` runs
there, between batches, so a model is never unloaded while it translates, and PyTorch's threads stay those of that
one thread. Several model threads (``threads.share_cores``) are only given a pool that unloads nothing. The event
loop only looks at which models are loaded (``resident``) to check requests against them; a model object it holds
stays whole until it lets go of it.
"""

from __future__ import annotations

import collections
import ctypes
import gc
import sys
import threading
import time
from typing import Any, Callable, Optional, Sequence

from mtkit.serving.models import ModelSpec

Listener = Callable[[str, str], None]  # (event, model name); events: load, unload, failure
RETRY_AFTER = 30.0  # seconds a model that failed to load is refused before the next try


class ModelUnavailable(Exception):
    """A model could not be loaded; ``reason`` says why."""

    def __init__(self, name: str, reason: str, retry_after: float = RETRY_AFTER):
        super().__init__(f"model {name} is not available: {reason}")
        self.name, self.reason, self.retry_after = name, reason, retry_after


def load_spec(spec: ModelSpec):
    """The ``TranslationModel`` of ``spec`` (``mtkit.load`` with its engine and options)."""
    from mtkit.inference.api import load

    if spec.path is None:
        raise ModelUnavailable(spec.name, "it was given loaded and cannot be loaded again")
    return load(spec.path, engine=spec.engine, **spec.options)


class ModelPool:
    """The models a server may translate with, and those of them in memory.

    Args:
        specs: the models, in order; the first is the default.
        max_models: the most models in memory at once; None for all of them.
        load: loads a spec's model (default ``load_spec``); called on the model thread only.
        retry_after: seconds a model that failed to load is refused before it is tried again.
        clock: monotonic seconds.
    """

    def __init__(
        self,
        specs: Sequence[ModelSpec],
        *,
        max_models: Optional[int] = None,
        load: Callable[[ModelSpec], Any] = load_spec,
        retry_after: float = RETRY_AFTER,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.specs = {spec.name: spec for spec in specs}
        self.max_models = max(1, max_models or len(self.specs))
        self.listeners: list[Listener] = []
        self._load, self.retry_after, self._clock = load, retry_after, clock
        self._loaded: collections.OrderedDict[str, Any] = collections.OrderedDict()  # least recently used first
        self._failed: dict[str, tuple[str, float]] = {}  # name -> (reason, clock() when it failed)
        self._lock = threading.Lock()

    @classmethod
    def single(cls, model, languages: tuple[str, str], name: str = "default") -> ModelPool:
        """A pool of one model already loaded: it translates ``languages`` (a multilingual model: into each of
        its targets) and is never unloaded."""
        source, target = languages
        targets = tuple(getattr(getattr(model, "engine", None), "targets", ()) or ())
        directions = tuple((source, t) for t in targets) if targets else ((source, target),)
        options = model.options
        spec = ModelSpec(
            name,
            None,
            directions,
            multilingual=bool(targets),
            engine=getattr(options, "engine", "torch"),
            named=True,
            batch_size=options.batch_size,
        )
        pool = cls([spec])
        pool._loaded[name] = model
        return pool

    @property
    def default(self) -> str:
        """The first model's name."""
        return next(iter(self.specs))

    def resident(self, name: str):
        """The model ``name`` if it is in memory, else None; its place in the LRU order stays."""
        with self._lock:
            return self._loaded.get(name)

    def resident_count(self) -> int:
        """How many models are in memory."""
        with self._lock:
            return len(self._loaded)

    def refused(self, name: str) -> Optional[ModelUnavailable]:
        """Why ``name`` is refused for now: it failed to load less than ``retry_after`` seconds ago; else None."""
        with self._lock:
            failed = None if name in self._loaded else self._failed.get(name)
        if failed is None:
            return None
        left = failed[1] + self.retry_after - self._clock()
        return ModelUnavailable(name, failed[0], left) if left > 0 else None

    def get(self, name: str):
        """The model ``name``, loaded first if it is not in memory (unloading the least recently used ones to make
        room). Call it on the model thread only.

        Raises:
            ModelUnavailable: it failed to load, now or less than ``retry_after`` seconds ago.
        """
        with self._lock:
            model = self._loaded.get(name)
            if model is not None:
                self._loaded.move_to_end(name)
                return model
        refused = self.refused(name)
        if refused is not None:
            raise refused
        self._make_room()
        try:
            model = self._load(self.specs[name])
        except Exception as err:  # any failure of one model's load leaves the others serving
            reason = err.reason if isinstance(err, ModelUnavailable) else str(err) or type(err).__name__
            with self._lock:
                self._failed[name] = (" ".join(reason.split()), self._clock())
            self._tell("failure", name)
            raise ModelUnavailable(name, reason, self.retry_after) from None
        with self._lock:
            self._loaded[name] = model
            self._failed.pop(name, None)
        self._tell("load", name)
        return model

    def _make_room(self) -> None:
        """Unload the least recently used models until one more fits."""
        unloaded = False
        while True:
            with self._lock:
                if len(self._loaded) < self.max_models:
                    break
                name, _ = self._loaded.popitem(last=False)
            self._tell("unload", name)
            unloaded = True
        if unloaded:
            release_memory()

    def preload(self) -> list[ModelUnavailable]:
        """Load the first ``max_models`` models now (on the model thread).

        Returns:
            The failures, one per model that did not load.
        """
        failures = []
        for name in list(self.specs)[: self.max_models]:
            try:
                self.get(name)
            except ModelUnavailable as err:
                failures.append(err)
        return failures

    def status(self) -> list[dict]:
        """``GET /v1/models``: each model's name, path, engine, directions, whether it is in memory and why it
        last failed to load (None if its last load succeeded or none was tried)."""
        with self._lock:
            loaded, failed = set(self._loaded), dict(self._failed)
        return [
            {
                "name": spec.name,
                "path": None if spec.path is None else str(spec.path),
                "engine": spec.engine,
                "directions": ["-".join(d) for d in spec.directions],
                "loaded": spec.name in loaded,
                "error": failed[spec.name][0] if spec.name in failed else None,
            }
            for spec in self.specs.values()
        ]

    def close(self) -> None:
        """Let go of every model."""
        with self._lock:
            self._loaded.clear()

    def _tell(self, event: str, name: str) -> None:
        for listener in self.listeners:
            listener(event, name)


def release_memory() -> None:
    """Give the memory of unloaded models back: Python's garbage, PyTorch's CUDA cache and glibc's free heap."""
    gc.collect()
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # another C library: its own policy
            pass
