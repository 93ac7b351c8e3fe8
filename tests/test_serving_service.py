"""The translation service behind ``mtkit serve``'s routes (mtkit/serving/service.py), without HTTP.

- Admission: too many sentences or characters are a 413, a segment the model cannot follow a 422 naming it.
- Request options: they reach the model's call; n-best beyond the beam and alignments without attention are a 422.
- Queueing: a full queue and a stopping server are a 503 with Retry-After.
- The wait: a timeout is a 504 and a client that leaves a 499, their sentences dropped untranslated; the model's
  errors are a 422, anything else goes up as it is.
Timeouts end when a test says (the service's injected ``sleep``), and no test sleeps or measures time.
"""

from __future__ import annotations

import asyncio
import threading

import pytest

from mtkit.errors import MtkitError
from mtkit.flags import ServeLimits
from mtkit.inference.options import Options as DecodingOptions
from mtkit.inference.segments import Segment
from mtkit.serving.errors import ApiError
from mtkit.serving.schemas import RequestOptions
from mtkit.serving.service import TranslationService

DEADLINE = 60.0  # seconds any wait in these tests may take before it fails


class Model:
    """Upper-cases its lines and records each call as (lines, nbest, scores, alignments).

    Each call waits for ``gate``, open unless a test closes it, then raises ``fail`` if it is set. A segment with
    the prefix "bad" fails the model's check.
    """

    def __init__(self, batch_size: int = 16, beam_size: int = 4, sampling: bool = False, attention: bool = True):
        engine = "torch" if attention else "ctranslate2"
        self.options = DecodingOptions(batch_size=batch_size, beam_size=beam_size, sampling=sampling, engine=engine)
        self.calls: list = []
        self.gate, self.started = threading.Event(), threading.Event()
        self.gate.set()
        self.fail = None

    def options_for(self, **call) -> DecodingOptions:
        return self.options.replace(**call)

    def check(self, segment: Segment) -> None:
        if segment.prefix == "bad":
            raise MtkitError("the prefix does not fit")

    def check_format(self, fmt: str, options=None) -> None:
        if fmt != "text":
            raise MtkitError(f"format {fmt!r} is not for this model")

    def translate_batch(self, lines, nbest=None, scores=False, alignments=False, format="text", split_sentences=None):
        self.calls.append((list(lines), nbest, scores, alignments))
        self.started.set()
        assert self.gate.wait(DEADLINE)
        if self.fail is not None:
            raise self.fail
        return [getattr(line, "text", line).upper() for line in lines]


class Timeouts:
    """The service's ``sleep``: a request's timeout ends when ``expired`` is set, never by itself."""

    def __init__(self):
        self.seconds: list = []  # one per request that waits for its results: the timeout it was given
        self.expired = asyncio.Event()
        self._changed = asyncio.Condition()

    async def __call__(self, seconds: float) -> None:
        async with self._changed:
            self.seconds.append(seconds)
            self._changed.notify_all()
        await self.expired.wait()

    async def waiting(self, requests: int) -> None:
        """Return once ``requests`` requests in all have queued their sentences and wait for results."""
        async with self._changed:
            await asyncio.wait_for(self._changed.wait_for(lambda: len(self.seconds) >= requests), DEADLINE)


def limits(**values) -> ServeLimits:
    """The server's bounds, with a batcher that never waits for more sentences."""
    return ServeLimits(**{"max_wait": 0, "max_delay": 0, **values})


def serve(model: Model, bounds: ServeLimits, test) -> None:
    """Run ``test(service, timeouts)``, a coroutine function, with the service started."""

    async def main():
        timeouts = Timeouts()
        service = TranslationService(model, bounds, sleep=timeouts)
        service.start()
        try:
            await test(service, timeouts)
        finally:
            model.gate.set()
            service.stop()

    asyncio.run(main())


async def api_error(awaitable) -> ApiError:
    with pytest.raises(ApiError) as err:
        await awaitable
    return err.value


async def translating(model: Model) -> None:
    """Return once the worker has begun a batch."""
    assert await asyncio.to_thread(model.started.wait, DEADLINE)


def test_translates_in_order_and_the_options_reach_the_model():
    model = Model()

    async def test(service, _timeouts):
        assert await service.translate(["a", Segment("b", prefix="B")], RequestOptions(nbest=2, scores=True)) == [
            "A",
            "B",
        ]
        assert await service.translate(["c"]) == ["C"]
        assert await service.translate([]) == []

    serve(model, limits(), test)
    assert model.calls == [(["a", Segment("b", prefix="B")], 2, True, False), (["c"], None, False, False)]


def test_too_many_sentences_or_characters_are_413():
    model = Model()
    long = Segment("abc", prefix="defg", constraints=("hij",), avoid=("k",))  # 11 characters with its instructions

    async def test(service, _timeouts):
        err = await api_error(service.translate(["a", "b", "c"]))
        assert err.status == 413 and err.message == "3 sentences in one request; at most 2"  # the queue's size
        err = await api_error(service.translate([long]))
        assert err.status == 413 and err.message == "11 characters in one request; at most 10"
        assert await service.translate(["a", "abcdefghi"]) == ["A", "ABCDEFGHI"]

    serve(model, limits(max_sentences=5, queue_size=2, max_chars=10), test)
    assert len(model.calls) == 1


def test_a_segment_the_model_cannot_follow_is_422_naming_it():
    model = Model()

    async def test(service, _timeouts):
        err = await api_error(service.translate(["a", Segment("b", prefix="bad")]))
        assert err.status == 422 and err.message == "text item 2: the prefix does not fit"

    serve(model, limits(), test)
    assert model.calls == []


@pytest.mark.parametrize("sampling", [False, True])
def test_more_hypotheses_than_the_beam_are_422_unless_sampling(sampling):
    model = Model(beam_size=4, sampling=sampling)

    async def test(service, _timeouts):
        assert await service.translate(["a"], RequestOptions(nbest=4)) == ["A"]
        if sampling:
            assert await service.translate(["a"], RequestOptions(nbest=5)) == ["A"]
        else:
            err = await api_error(service.translate(["a"], RequestOptions(nbest=5)))
            assert err.status == 422 and err.message.startswith("nbest 5 is larger than beam_size 4")

    serve(model, limits(), test)
    assert [nbest for _lines, nbest, _scores, _alignments in model.calls] == ([4, 5] if sampling else [4])


@pytest.mark.parametrize("attention", [False, True])
def test_alignments_need_an_engine_with_attention(attention):
    model = Model(attention=attention)

    async def test(service, _timeouts):
        if attention:
            assert await service.translate(["a"], RequestOptions(alignments=True)) == ["A"]
        else:
            err = await api_error(service.translate(["a"], RequestOptions(alignments=True)))
            assert err.status == 422 and "need the torch engine" in err.message

    serve(model, limits(), test)
    assert model.calls == ([(["a"], None, False, True)] if attention else [])


def test_a_full_queue_is_503_with_retry_after():
    model = Model(batch_size=1)
    model.gate.clear()

    async def test(service, timeouts):
        first = asyncio.create_task(service.translate(["a"]))
        await translating(model)  # the worker holds "a": the queue is empty again
        second = asyncio.create_task(service.translate(["b"]))
        await timeouts.waiting(2)
        assert service.batcher.depth == 1
        err = await api_error(service.translate(["c"]))
        assert (err.status, err.headers) == (503, {"Retry-After": "1"}) and "queue is full" in err.message
        model.gate.set()
        assert await first == ["A"] and await second == ["B"]

    serve(model, limits(queue_size=1), test)


def test_a_timeout_is_504_and_drops_the_queued_sentences():
    model = Model(batch_size=1)
    model.gate.clear()

    async def test(service, timeouts):
        request = asyncio.create_task(service.translate(["a", "b"]))
        await timeouts.waiting(1)
        await translating(model)  # "a" translates, "b" waits in the queue
        timeouts.expired.set()
        err = await api_error(request)
        assert err.status == 504 and err.message.startswith("no translation within 30 s")
        assert timeouts.seconds == [30.0]
        assert service.batcher.stats.dropped == 1 and service.batcher.depth == 0
        timeouts.expired.clear()
        model.gate.set()
        assert await service.translate(["c"]) == ["C"]

    serve(model, limits(timeout=30.0), test)
    assert [lines for lines, *_ in model.calls] == [["a"], ["c"]]  # "b" was never translated


def test_a_client_that_leaves_is_499_and_its_sentences_are_dropped():
    model = Model(batch_size=1)
    model.gate.clear()

    async def test(service, timeouts):
        left = asyncio.Event()
        request = asyncio.create_task(service.translate(["a", "b", "c"], disconnected=left.wait))
        await timeouts.waiting(1)
        await translating(model)
        left.set()
        err = await api_error(request)
        assert err.status == 499 and "closed the connection" in err.message
        assert service.batcher.stats.dropped == 2 and service.batcher.depth == 0
        model.gate.set()
        assert await service.translate(["d"], disconnected=asyncio.Event().wait) == ["D"]

    serve(model, limits(), test)
    assert [lines for lines, *_ in model.calls] == [["a"], ["d"]]


def test_the_models_errors_are_422_and_anything_else_goes_up():
    model = Model()

    async def test(service, _timeouts):
        model.fail = ValueError("the line is too long")
        err = await api_error(service.translate(["a"]))
        assert (err.status, err.message) == (422, "the line is too long")
        model.fail = MtkitError("no such word")
        assert (await api_error(service.translate(["a"]))).status == 422
        model.fail = RuntimeError("out of memory")
        with pytest.raises(RuntimeError, match="out of memory"):
            await service.translate(["a"])

    serve(model, limits(), test)


def test_stopping_is_503_for_the_queued_sentences_and_those_that_come_after():
    model = Model(batch_size=1)
    model.gate.clear()

    async def test(service, timeouts):
        first = asyncio.create_task(service.translate(["a"]))
        await translating(model)
        second = asyncio.create_task(service.translate(["b"]))
        await timeouts.waiting(2)
        stopping = asyncio.create_task(asyncio.to_thread(service.stop))  # it waits for the worker's batch
        err = await api_error(second)
        assert (err.status, err.headers) == (503, {"Retry-After": "1"}) and "shutting down" in err.message
        model.gate.set()
        await stopping
        assert await first == ["A"]
        assert (await api_error(service.translate(["c"]))).status == 503

    serve(model, limits(), test)
