"""The dynamic batcher (mtkit/serving/batcher.py) on a clock that moves only when a test advances it.

- Sentences of equal keys share a batch, and the translate call gets their key.
- The worker waits for as many sentences as its last batch had plus those that came meanwhile: while they come
  within ``max_wait`` of each other, for ``max_delay`` at most; a lone client never waits.
- Dropped sentences are never translated; stopping fails the queued ones.
- Sentences of ready keys (a model in memory) go before older ones of other keys, for a while at most.
- Several workers translate batches of different lanes (models) at once, never two of one lane.
No test sleeps or measures time: each waits until the worker has acted on what it was just given.
"""

from __future__ import annotations

import threading
from typing import Callable

import pytest

from mtkit.serving.batcher import Batcher, QueueFull
from mtkit.serving.threads import model_threads

DEADLINE = 60.0  # seconds any wait in these tests may take before it fails


class FakeClock:
    """Monotonic seconds that move only in ``advance``, and the batcher's waits on them.

    A wait blocks until something wakes the batcher's condition: a submit, a drop, a stop or ``advance``. The
    batcher then reads the time again itself. ``moves`` counts what the worker has done: each wait it begins and
    each batch it begins (``Model`` counts those).
    """

    def __init__(self):
        self.now = 0.0
        self.moves = 0
        self.waiting = False  # the worker waits (True) or translates, or is between the two
        self.until = None  # the time the worker's latest wait lasts until; None: until a sentence comes
        self.seen = threading.Condition()
        self._cond = None  # the batcher's condition, known from the worker's first wait

    def __call__(self) -> float:
        return self.now

    def wait(self, cond: threading.Condition, timeout) -> None:
        self._cond = cond
        self.moved(None if timeout is None else self.now + timeout, waiting=True)
        cond.wait(DEADLINE)  # a bound for a broken test only: the batcher loops and waits again
        with self.seen:
            self.waiting = False

    def moved(self, until=None, waiting: bool = False) -> None:
        with self.seen:
            self.moves, self.until, self.waiting = self.moves + 1, until, waiting
            self.seen.notify_all()

    def advance(self, seconds: float) -> None:
        with self._cond:  # under the batcher's lock: the worker reads the time before it waits, or is woken
            self.now += seconds
            self._cond.notify_all()

    def settle(self, action: Callable[[], object]):
        """Run ``action``, which wakes the idle worker; return its result once the worker has acted on it."""
        with self.seen:
            before = self.moves
        result = action()
        self.wait_for(lambda: self.moves > before, "the worker to act")
        return result

    def wait_for(self, condition: Callable[[], bool], what: str) -> None:
        with self.seen:
            assert self.seen.wait_for(condition, DEADLINE), f"gave up waiting for {what}"

    def wait_idle(self) -> None:
        """Return once the worker waits for a sentence to come."""
        self.wait_for(lambda: self.waiting and self.until is None, "the worker to wait for sentences")


class Model:
    """A translate function that upper-cases its lines and records each call as (time, key, lines).

    Each call waits for ``gate``, open unless a test closes it.
    """

    def __init__(self, clock: FakeClock):
        self.clock, self.calls, self.gate = clock, [], threading.Event()
        self.gate.set()

    def __call__(self, lines: list, key) -> list:
        self.calls.append((self.clock.now, key, list(lines)))
        self.clock.moved()
        assert self.gate.wait(DEADLINE)
        return [x.upper() for x in lines]

    @property
    def batches(self) -> list[list[str]]:
        return [lines for _time, _key, lines in self.calls]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def model(clock) -> Model:
    return Model(clock)


@pytest.fixture
def make(clock, model):
    """Start a batcher on the fake clock (stopped after the test); returns it once its worker waits."""
    started = []

    def make(**kwargs) -> Batcher:
        batcher = Batcher(model, clock=clock, wait=clock.wait, **kwargs)
        clock.settle(batcher.start)
        started.append(batcher)
        return batcher

    yield make
    for batcher in started:
        batcher.stop()


def submit(clock: FakeClock, batcher: Batcher, lines: list, key=()) -> list:
    """``batcher.submit``, returning once the worker has acted on the lines."""
    return clock.settle(lambda: batcher.submit(lines, key))


def results(items: list) -> list:
    return [item.future.result(DEADLINE) for item in items]


def test_batches_never_mix_keys_and_the_translate_call_gets_the_key(make, clock, model):
    batcher = make(batch_size=8, max_wait=0, queue_size=16)
    model.gate.clear()
    first = submit(clock, batcher, ["a"])
    items = batcher.submit(["b", "c"], ("nbest", 2)) + batcher.submit(["d"]) + batcher.submit(["e"], ("nbest", 2))
    items += batcher.submit(["f"], ("alignments",))
    model.gate.set()
    assert results(first + items) == ["A", "B", "C", "D", "E", "F"]
    assert [(key, lines) for _time, key, lines in model.calls] == [
        ((), ["a"]),
        (("nbest", 2), ["b", "c", "e"]),
        ((), ["d"]),
        (("alignments",), ["f"]),
    ]
    assert batcher.stats.largest_batch == 3 and batcher.stats.batches == 4


def test_the_batcher_waits_for_its_last_batch_and_the_sentences_that_waited_meanwhile(make, clock, model):
    batcher = make(batch_size=8, max_wait=1.0, queue_size=16)
    assert results(submit(clock, batcher, ["a"])) == ["A"]
    assert model.batches == [["a"]]  # a batch of one after none: no wait
    assert results(submit(clock, batcher, ["b"])) == ["B"]
    assert model.batches == [["a"], ["b"]]  # a batch of one after a batch of one: no wait either
    model.gate.clear()
    first = submit(clock, batcher, ["c", "d", "e"])
    second = batcher.submit(["f"])  # while "c", "d", "e" translate
    clock.settle(model.gate.set)
    assert results(first) == ["C", "D", "E"]
    # it waits for 3 + 1 sentences: "c", "d", "e"'s clients and "f"; none came after the batch: up to max_wait
    assert len(model.calls) == 3 and not second[0].future.done() and clock.until == 1.0
    clock.settle(lambda: clock.advance(0.5))
    assert len(model.calls) == 3
    third = submit(clock, batcher, ["g", "h"])
    assert len(model.calls) == 3 and clock.until == 1.0
    fourth = submit(clock, batcher, ["i"])  # the fourth sentence: the batch starts at once
    assert results(second + third + fourth) == ["F", "G", "H", "I"]
    assert model.calls[3] == (0.5, (), ["f", "g", "h", "i"])


def _expecting(clock: FakeClock, batcher: Batcher, model: Model, running: int, meanwhile: int) -> None:
    """Leave ``batcher`` expecting ``running + meanwhile`` sentences, ``meanwhile`` of them queued.

    A batch of ``running`` translates while ``meanwhile`` more arrive; returns once the worker waits for more.
    """
    model.gate.clear()
    submit(clock, batcher, [f"r{i}" for i in range(running)])
    batcher.submit([f"m{i}" for i in range(meanwhile)])
    clock.settle(model.gate.set)


def test_the_batcher_waits_while_sentences_keep_coming_and_stops_at_a_pause(make, clock, model):
    batcher = make(batch_size=16, max_wait=1.0, queue_size=16, max_delay=100.0)
    _expecting(clock, batcher, model, running=3, meanwhile=2)  # expects 5: "m0", "m1" queued
    clock.settle(lambda: clock.advance(1.5))  # longer than max_wait: it still waits for the running batch's clients
    assert len(model.calls) == 1 and clock.until == 100.0
    submit(clock, batcher, ["a"])
    assert clock.until == 2.5  # now max_wait after each sentence
    clock.settle(lambda: clock.advance(0.25))
    submit(clock, batcher, ["b"])  # 4 of 5
    clock.settle(lambda: clock.advance(0.75))
    assert len(model.calls) == 1 and clock.until == 2.75
    clock.settle(lambda: clock.advance(0.25))  # a pause of max_wait: the batch starts without the fifth
    assert model.calls[1] == (2.75, (), ["m0", "m1", "a", "b"])
    clock.wait_idle()
    submit(clock, batcher, ["c"])  # after a batch of 4 the worker expects 4, and waits max_wait for them
    assert len(model.calls) == 2 and clock.until == 3.75
    clock.settle(lambda: clock.advance(1.0))
    assert model.calls[2] == (3.75, (), ["c"])


def test_the_batcher_holds_a_batch_back_for_max_delay_at_most(make, clock, model):
    batcher = make(batch_size=64, max_wait=1.0, queue_size=64, max_delay=1.5)
    _expecting(clock, batcher, model, running=8, meanwhile=8)  # expects 16
    for i in range(12):  # one sentence each 0.25 s: never a pause as long as max_wait, never 16 sentences
        submit(clock, batcher, [f"s{i}"])
        if len(model.calls) == 1:
            clock.settle(lambda: clock.advance(0.25))
        if len(model.calls) > 1:
            break
    held = [f"m{i}" for i in range(8)] + [f"s{i}" for i in range(6)]
    assert model.calls[1] == (1.5, (), held), "held past max_delay, or not as long, while sentences kept coming"


def test_a_lone_clients_next_sentence_does_not_wait_even_when_it_comes_back_at_once(make, clock, model):
    batcher = make(batch_size=8, max_wait=1.0, queue_size=8, max_delay=100.0)
    model.gate.clear()
    (first,) = submit(clock, batcher, ["a"])
    follow: list = []
    # runs on the worker as it answers "a", before it looks for its next batch: the quickest possible client
    first.future.add_done_callback(lambda _: follow.extend(batcher.submit(["b"])))
    clock.settle(model.gate.set)
    assert model.calls == [(0.0, (), ["a"]), (0.0, (), ["b"])]  # not held for a second sentence that never comes
    assert results([first] + follow) == ["A", "B"]


def test_each_keys_batch_waits_for_its_own_clients_only(clock):
    """Two models' clients taking turns: while B's batch translates, A's clients come back; A's next batch expects
    its own two clients (not those two plus B's batch) and starts at once."""
    calls, gates = [], [threading.Event() for _ in range(3)]

    def translate(lines: list, key) -> list:
        calls.append((clock.now, key, list(lines)))
        clock.moved()
        assert gates[len(calls) - 1].wait(DEADLINE)
        return [x.upper() for x in lines]

    batcher = Batcher(translate, 8, 1.0, 16, max_delay=100.0, clock=clock, wait=clock.wait)
    clock.settle(batcher.start)
    try:
        first = submit(clock, batcher, ["a1", "a2"], "A")  # A's batch translates
        other = batcher.submit(["b1", "b2"], "B")  # B's clients wait meanwhile
        clock.settle(gates[0].set)  # A's answers go out; B's batch translates
        assert results(first) == ["A1", "A2"] and [key for _, key, _ in calls] == ["A", "B"]
        again = batcher.submit(["a3", "a4"], "A")  # A's clients are back while B translates
        gates[2].set()
        clock.settle(gates[1].set)
        assert len(calls) == 3 and calls[2] == (0.0, "A", ["a3", "a4"]), "held for sentences of another key"
        assert results(other + again) == ["B1", "B2", "A3", "A4"]
    finally:
        batcher.stop()


def test_several_workers_translate_different_lanes_at_once_and_one_lane_one_batch_at_a_time():
    """Three workers (real threads, real time, no waiting for more sentences): "a"'s batch holds its lane while
    it translates, "b"'s starts beside it, and the idle third worker leaves "a2" (lane a, another key) queued."""
    lock, gate = threading.Lock(), threading.Event()
    running: dict[str, int] = {}
    most: dict[str, int] = {}
    started = {key: threading.Event() for key in (("a", 1), ("a", 2), ("b", 1))}

    def translate(lines: list, key) -> list:
        with lock:
            running[key[0]] = running.get(key[0], 0) + 1
            most[key[0]] = max(most.get(key[0], 0), running[key[0]])
        started[key].set()
        assert gate.wait(DEADLINE)
        with lock:
            running[key[0]] -= 1
        return [x.upper() for x in lines]

    idle_with_queued = threading.Event()

    def wait(cond: threading.Condition, timeout) -> None:
        if batcher.depth:  # a worker goes idle while a sentence waits (the condition's lock is re-entrant)
            idle_with_queued.set()
        cond.wait(DEADLINE if timeout is None else timeout)

    executors = model_threads(3)
    batcher = Batcher(translate, 8, 0.0, 16, executor=executors, lane=lambda key: key[0], wait=wait)
    batcher.start()
    try:
        first = batcher.submit(["x"], ("a", 1))
        assert started[("a", 1)].wait(DEADLINE)
        other = batcher.submit(["y"], ("b", 1))
        assert started[("b", 1)].wait(DEADLINE), "the other lane waited for the first lane's batch"
        same_lane = batcher.submit(["z"], ("a", 2))
        assert idle_with_queued.wait(DEADLINE)  # the third worker saw "z" and left it
        assert not started[("a", 2)].is_set() and batcher.depth == 1
        gate.set()
        assert results(first + other + same_lane) == ["X", "Y", "Z"]
        assert most == {"a": 1, "b": 1}
        assert batcher.stats.batches == 3
    finally:
        batcher.stop()
        for executor in executors:
            executor.shutdown()


def test_dropped_sentences_are_never_translated(make, clock, model):
    batcher = make(batch_size=1, max_wait=0, queue_size=8)
    model.gate.clear()
    first = submit(clock, batcher, ["a"])
    gone = batcher.submit(["b", "c"])
    batcher.drop(gone)
    assert batcher.stats.dropped == 2 and batcher.depth == 0
    assert all(item.future.cancelled() for item in gone)
    model.gate.set()
    assert results(first) == ["A"]
    clock.wait_idle()
    assert results(submit(clock, batcher, ["d"])) == ["D"]
    assert model.batches == [["a"], ["d"]]


def test_stopping_fails_the_queued_sentences_and_refuses_more(make, clock, model):
    batcher = make(batch_size=1, max_wait=0, queue_size=2)
    model.gate.clear()
    first = submit(clock, batcher, ["a"])
    queued = batcher.submit(["b"])
    with pytest.raises(QueueFull, match="queue is full"):
        batcher.submit(["c", "d"])  # all or nothing: two do not fit beside "b"
    stopping = threading.Thread(target=batcher.stop)
    stopping.start()
    with pytest.raises(QueueFull, match="shutting down"):
        queued[0].future.result(DEADLINE)
    model.gate.set()
    stopping.join(DEADLINE)
    assert results(first) == ["A"] and model.batches == [["a"]]
    with pytest.raises(QueueFull, match="shutting down"):
        batcher.submit(["e"])


def test_sentences_of_ready_keys_go_first_for_patience_seconds_at_most(make, clock, model):
    loaded = {"a"}  # the keys whose model is in memory
    batcher = make(batch_size=8, max_wait=0, queue_size=16, ready=lambda key: key in loaded, patience=10.0)
    model.gate.clear()
    running = submit(clock, batcher, ["x"], "a")
    items = running + batcher.submit(["b1"], "b") + batcher.submit(["a1"], "a")  # "b1" is older, but not ready
    model.gate.set()
    assert results(items) == ["X", "B1", "A1"]
    assert [(key, lines) for _time, key, lines in model.calls] == [("a", ["x"]), ("a", ["a1"]), ("b", ["b1"])]
    model.gate.clear()
    running = submit(clock, batcher, ["y"], "a")
    items = running + batcher.submit(["b2"], "b") + batcher.submit(["a2"], "a")
    clock.advance(10.0)  # "b2" has waited its patience: it goes first after all
    model.gate.set()
    assert results(items) == ["Y", "B2", "A2"]
    assert [(key, lines) for _time, key, lines in model.calls[3:]] == [("a", ["y"]), ("b", ["b2"]), ("a", ["a2"])]
