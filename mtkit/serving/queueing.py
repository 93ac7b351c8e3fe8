"""What the batcher's queue holds and counts: a queued sentence with the future of its result (``Item``), a lane's
arrivals, the workers' counts (``Stats``), and ``QueueFull``."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Optional

# (lines, key) -> one result per line, in order; a line is a str or a segments.Segment
TranslateFn = Callable[[list, Hashable], list]
# (condition, timeout or None) -> None: the worker's wait, called with the condition held; it may return early
WaitFn = Callable[[threading.Condition, Optional[float]], Any]


KEYS_KEPT = 256  # the keys whose expected batch the worker remembers (a key not among them expects one sentence)


NO_LANE = object()  # a worker that holds no lane


class QueueFull(Exception):
    """The queue has no room for a request's sentences, or the batcher is stopping."""


@dataclass(eq=False)
class Item:
    """One queued sentence and the future of its result."""

    text: Any  # a str, or a segments.Segment with its instructions
    key: Hashable  # sentences are batched only with others of an equal key; the key goes to the translate call
    future: Future = field(default_factory=Future)
    arrived: float = 0.0  # the batcher's clock when it was queued
    number: int = 0  # the sentences submitted before it


@dataclass
class Lane:
    """The arrivals of one lane's sentences."""

    arrived: int = 0  # sentences submitted so far
    last: float = 0.0  # clock() at the latest submit
    by_end: int = 0  # ``arrived`` when the lane's last batch ended


@dataclass
class Stats:
    """What the worker has done so far."""

    batches: int = 0
    sentences: int = 0
    largest_batch: int = 0
    dropped: int = 0  # sentences taken out of the queue when their request timed out or its client left
    busy: float = 0.0  # seconds spent in translate calls (of all workers together)
