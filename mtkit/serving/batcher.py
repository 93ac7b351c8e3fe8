"""Dynamic batching: sentences of concurrent requests share one translate call.

Requests put their sentences in one bounded queue. A worker thread takes up to ``batch_size`` sentences of one
key, translates them with one call and hands each result to its sentence's future; with several executors, the
workers translate batches of different lanes (models) at once, never two of one lane. Before a batch the worker
waits for as many sentences as there were clients last time (its previous batch's, which send again once
answered, and those that came while it ran), while they come within ``max_wait`` of each other and ``max_delay``
at most, so a lone client never waits: the model decodes while the clients wait and the event loop works while
the model waits, instead of both sharing the cores (docs/benchmarks.md, Serving). A model is touched by one
worker at a time (``TranslationModel`` is not thread-safe), and the event loop never waits on it.
"""

from __future__ import annotations

import collections
import threading
import time
from concurrent.futures import Executor, Future
from concurrent.futures import wait as futures_wait
from typing import Callable, Hashable, Optional, Sequence, Union

from mtkit.serving.queueing import KEYS_KEPT, NO_LANE, Item, Lane, QueueFull, Stats, TranslateFn, WaitFn

__all__ = ["Batcher", "Item", "QueueFull", "Stats"]


class Batcher:
    """A bounded sentence queue and the workers that translate it in batches (one unless given more executors).

    Args:
        translate: called on the worker with a batch's lines and their common key.
        batch_size: the most sentences in one call.
        max_wait: the longest pause between two arriving sentences the worker waits through while it expects more.
        queue_size: the most sentences waiting, all requests together.
        on_batch: called with each batch's size once it is translated.
        executor: the one-thread executor the model was loaded on (``threads.model_thread``), to translate on that
            thread too; or several, one worker on each. Without one the batcher starts a thread of its own.
        max_delay: the longest the worker waits for the first expected sentence and holds a batch back in all
            (at least ``max_wait``).
        ready: whether a key's batch can start at once (its model is in memory); None: every key can. The worker
            takes the oldest sentence of a ready key before older ones of keys that are not, for ``patience``
            seconds at most, so that a few models taking turns in memory are not loaded for every batch.
        patience: the longest the oldest sentence waits behind sentences of ready keys.
        lane: a key's lane (its model), with several workers: two never translate batches of one lane at once,
            and each lane counts its own arrivals. None (or one worker): every key is of one lane.
        clock: monotonic seconds.
        wait: how the worker waits on its condition for at most a timeout measured on ``clock``.
    """

    def __init__(
        self,
        translate: TranslateFn,
        batch_size: int,
        max_wait: float,
        queue_size: int,
        on_batch: Optional[Callable[[int], None]] = None,
        executor: Union[Executor, Sequence[Executor], None] = None,
        max_delay: float = 0.0,
        *,
        ready: Optional[Callable[[Hashable], bool]] = None,
        patience: float = 0.0,
        lane: Optional[Callable[[Hashable], Hashable]] = None,
        clock: Callable[[], float] = time.monotonic,
        wait: WaitFn = threading.Condition.wait,
    ):
        self.translate = translate
        self.batch_size = max(1, batch_size)
        self.max_wait = max(0.0, max_wait)
        self.max_delay = max(0.0, max_delay)
        self.queue_size = max(1, queue_size)
        self.on_batch = on_batch
        self.ready, self.patience = ready, max(0.0, patience)
        self.stats = Stats()
        self._clock, self._wait = clock, wait
        self._pending: collections.deque[Item] = collections.deque()
        self._cond = threading.Condition()
        self._stopped = False
        self._executors: list[Executor] = (
            [] if executor is None else [executor] if isinstance(executor, Executor) else list(executor)
        )
        self.workers = max(1, len(self._executors))
        # one worker: every key in one lane, whose arrivals it counts all together (a client answered by one
        # model's batch may send next to the other model, and its answer still goes out while the worker waits)
        self.lane = lane if lane is not None and self.workers > 1 else (lambda key: None)
        self._workers: list[Union[threading.Thread, Future]] = []
        self._busy: set = set()  # the lanes a worker holds: translating, or waiting for its batch
        self._arrived = 0  # sentences submitted so far
        self._lanes: collections.defaultdict[Hashable, Lane] = collections.defaultdict(Lane)
        # per key, the sentences to wait for: its previous batch's and those of its key that arrived while it ran
        # (the clients of another model's batch come back after that batch, not this one's)
        self._expected: dict[Hashable, int] = {}

    @property
    def depth(self) -> int:
        """Sentences waiting in the queue (not those being translated)."""
        with self._cond:
            return len(self._pending)

    def start(self) -> None:
        """Start the workers: one on each executor, or one on a thread of its own."""
        with self._cond:
            self._stopped = False
        if self._executors:
            self._workers = [executor.submit(self._run) for executor in self._executors]
        else:
            thread = threading.Thread(target=self._run, name="mtkit-batcher", daemon=True)
            thread.start()
            self._workers = [thread]

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the workers after their current batches; sentences still queued fail with ``QueueFull``.

        Args:
            timeout: seconds to wait for each worker to end.
        """
        with self._cond:
            self._stopped = True
            left, self._pending = list(self._pending), collections.deque()
            self._cond.notify_all()
        for item in left:
            if item.future.set_running_or_notify_cancel():
                item.future.set_exception(QueueFull("the server is shutting down"))
        for worker in self._workers:
            if isinstance(worker, threading.Thread):
                worker.join(timeout)
            else:
                futures_wait([worker], timeout)
        self._workers = []

    def submit(self, lines: list, key: Hashable = ()) -> list[Item]:
        """Queue all of ``lines`` or none of them.

        Args:
            lines: the sentences, each a str or a ``segments.Segment``.
            key: what the translate call gets with them; only sentences of equal keys share a batch.

        Returns:
            One item per line, in order; each future gets its line's result.

        Raises:
            QueueFull: the lines do not fit in the queue, or the batcher is stopped.
        """
        now = self._clock()
        with self._cond:
            items = [Item(text, key, arrived=now, number=self._arrived + i) for i, text in enumerate(lines)]
            if self._stopped:
                raise QueueFull("the server is shutting down")
            if len(self._pending) + len(items) > self.queue_size:
                raise QueueFull(f"the translation queue is full ({self.queue_size} sentences); retry shortly")
            self._pending.extend(items)
            self._arrived += len(items)
            lane = self._lanes[self.lane(key)]
            lane.arrived, lane.last = lane.arrived + len(items), now
            self._cond.notify_all()
        return items

    def drop(self, items: list[Item]) -> None:
        """Take a request's sentences out of the queue (those not yet translating) and cancel their futures."""
        ids = {id(item) for item in items}
        with self._cond:
            kept = collections.deque(x for x in self._pending if id(x) not in ids)
            self.stats.dropped += len(self._pending) - len(kept)
            self._pending = kept
        for item in items:
            item.future.cancel()

    def _take(self) -> Optional[list[Item]]:
        """The next batch: the oldest sentence of a lane no other worker holds (``_next_key``) and up to
        batch_size - 1 more of its key; the worker holds that lane until ``_release``.

        Waits first for as many as its key's previous batch had plus those of its key that arrived while it ran
        (one for a key not seen lately), while each next sentence of its lane comes within max_wait, for max_delay
        at most. Returns None once stopped, [] when every sentence it could take was dropped or cancelled.
        """
        with self._cond:
            while not self._stopped and self._next_key(NO_LANE) is None:
                self._wait(self._cond, None)
            if self._stopped:
                return None
            cap = self._clock() + max(self.max_wait, self.max_delay)
            held = NO_LANE
            while True:
                key = self._next_key(held)
                if key is None:  # every sentence it could take dropped while waiting
                    self._release(held)
                    return []
                lane = self.lane(key)
                if lane != held:
                    self._release(held)
                    self._busy.add(lane)
                    held = lane
                expected = self._expected.get(key, 1)
                same = sum(1 for x in self._pending if x.key == key)
                # until a sentence of its lane comes after the lane's last batch, its answers may still be going
                # out: up to the cap; then max_wait after the latest one
                state = self._lanes[lane]
                left = (min(state.last + self.max_wait, cap) if state.arrived > state.by_end else cap) - self._clock()
                if same >= expected or left <= 0 or self._stopped:
                    break
                self._wait(self._cond, left)
            batch, rest = [], collections.deque()
            for item in self._pending:
                (batch if item.key == key and len(batch) < self.batch_size else rest).append(item)
            self._pending = rest
            batch = [item for item in batch if item.future.set_running_or_notify_cancel()]  # not those cancelled
            if not batch:
                self._release(held)
            return batch

    def _release(self, lane: Hashable) -> None:
        """Let other workers take ``lane``'s sentences again. Called with the lock held."""
        if lane is not NO_LANE:
            self._busy.discard(lane)
            self._cond.notify_all()

    def _next_key(self, held: Hashable) -> Optional[Hashable]:
        """The key of the next batch among the sentences of lanes no other worker holds (``held``: this worker's):
        the oldest one's, unless it is not ready, has waited less than ``patience``, and a sentence of a ready key
        waits too (then that sentence's). None if there is no such sentence. Called with the lock held."""
        free = self._pending
        if self._busy:
            free = [x for x in self._pending if self.lane(x.key) == held or self.lane(x.key) not in self._busy]
        if not free:
            return None
        first = free[0]
        if self.ready is None or self._clock() - first.arrived >= self.patience or self.ready(first.key):
            return first.key
        return next((x.key for x in free if self.ready(x.key)), first.key)

    def _run(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                return
            if not batch:
                continue
            key = batch[0].key
            lane = self.lane(key)
            with self._cond:
                arrived = self._arrived
            started, failed = self._clock(), None
            try:
                results = self.translate([item.text for item in batch], key)
            except Exception as err:  # handed to each request, which answers with its own error
                failed = err
            # counted before any answer goes out: a client's next request must not look like another's
            with self._cond:
                self.stats.busy += self._clock() - started
                meanwhile = sum(1 for x in self._pending if x.key == key and x.number >= arrived)
                self._expected.pop(key, None)  # the most recent last: the oldest go first past KEYS_KEPT
                self._expected[key] = min(self.batch_size, len(batch) + meanwhile)
                while len(self._expected) > KEYS_KEPT:
                    del self._expected[next(iter(self._expected))]
                self._lanes[lane].by_end = self._lanes[lane].arrived
                self._release(lane)
                if failed is None:
                    self.stats.batches, self.stats.sentences = self.stats.batches + 1, self.stats.sentences + len(batch)
                    self.stats.largest_batch = max(self.stats.largest_batch, len(batch))
            if failed is not None:
                for item in batch:
                    item.future.set_exception(failed)
                continue
            if self.on_batch is not None:
                self.on_batch(len(batch))
            for item, result in zip(batch, results):
                item.future.set_result(result)
