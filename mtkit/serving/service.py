"""The translation service behind every route: admission, loading a model when it is not in memory, queueing into
the batcher, and the wait for results."""

from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Hashable, Optional

from mtkit.errors import MtkitError
from mtkit.flags import ServeLimits
from mtkit.inference.segments import Segment
from mtkit.serving.admission import check_bounds, check_lines
from mtkit.serving.batcher import Batcher, Item, QueueFull
from mtkit.serving.errors import ApiError
from mtkit.serving.pool import ModelPool, ModelUnavailable
from mtkit.serving.schemas import RequestOptions

if TYPE_CHECKING:
    from starlette.requests import Request

Disconnected = Callable[[], Awaitable[Any]]  # returns once the client has gone
PATIENCE = 0.25  # the share of the request timeout a model's sentences wait while loaded models' go first


class TranslationService:
    """Translates the sentences of requests with the models of a pool, batched across requests.

    One batcher serves every model: its key is (model name, call arguments), so a batch holds one model's
    sentences, and its worker gets the model from the pool (loading it first if need be) on the model thread. With
    several model threads (one executor each), different models translate at once, each model on one thread at a
    time. A request's sentences leave the queue when it times out or its client disconnects.

    Args:
        model: a ``pool.ModelPool``, or one loaded model (anything with ``translate_batch``, ``check`` and
            ``options.batch_size``), served as a pool of one.
        limits: the server's bounds.
        executor: the one-thread executor the models are loaded and run on (``threads.model_thread``), several
            of them (``model_threads``), or None.
        on_batch: called on the model thread with each batch's model name and size.
        on_request: called with the model name of each translate call (a pivot's legs count one each).
        sleep: the request timeout's wait, like ``asyncio.sleep``.
    """

    def __init__(
        self,
        model,
        limits: ServeLimits = ServeLimits(),
        *,
        executor=None,
        on_batch: Optional[Callable[[str, int], None]] = None,
        on_request: Optional[Callable[[str], None]] = None,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ):
        self.pool = model if isinstance(model, ModelPool) else ModelPool.single(model, ("", ""))
        self.limits, self._sleep, self.on_batch, self.on_request = limits, sleep, on_batch, on_request
        self.batcher = Batcher(
            self._call_model,
            max(spec.batch_size for spec in self.pool.specs.values()),
            limits.max_wait,
            limits.queue_size,
            executor=executor,
            max_delay=limits.max_delay,
            ready=lambda key: self.pool.resident(key[0]) is not None,  # a loaded model's sentences go first...
            patience=limits.timeout * PATIENCE,  # ...for a while: a model that must be loaded waits at most this
            lane=lambda key: key[0],  # with several model threads, one model's batches one at a time
        )

    @property
    def model(self):
        """The default model if it is in memory, else None."""
        return self.pool.resident(self.pool.default)

    def start(self) -> None:
        """Start the batcher's worker."""
        self.batcher.start()

    def stop(self) -> None:
        """Stop the worker; requests still queued get a 503."""
        self.batcher.stop()

    def model_arguments(
        self, options: RequestOptions, model=None, target: Optional[str] = None, source: Optional[str] = None
    ) -> tuple[tuple[str, Any], ...]:
        """``translate_batch``'s keyword arguments for a request's ``options``.

        Args:
            options: the request's options.
            model: the loaded model that translates it (default: the default model).
            target: the target language to pass (a multilingual model's), or None.
            source: the source language to pass (a multilingual model's, which may read it as a token), or None.

        Returns:
            (name, value) pairs: hashable, so that they are the batcher's key too.

        Raises:
            ApiError: 422 for options the model refuses (``TranslationModel.options_for``: more hypotheses than
                the beam holds, alignments from CTranslate2), with the message the CLI and the API give.
        """
        model = self.model if model is None else model
        nbest, decoding = options.nbest, options.decoding()
        try:
            found = model.options_for(
                nbest=nbest, scores=options.scores, alignments=options.alignments, **dict(decoding)
            )
            model.check_format(options.format, found)
        except MtkitError as err:
            raise ApiError(422, str(err)) from None
        arguments = (
            ("nbest", nbest),
            ("scores", options.scores),
            ("alignments", options.alignments),
            ("format", options.format),
            ("split_sentences", options.split_sentences),
            *decoding,  # the algorithm and its options: a request's own batches
        )
        languages = (("target", target),) if target is not None else ()
        return arguments + languages + ((("source", source),) if source is not None else ())

    def _call_model(self, lines: list, key: Hashable) -> list:
        name, arguments = key  # arguments: model_arguments', or None to load the model
        model = self.pool.get(name)
        if arguments is None:
            return [model] * len(lines)
        results = model.translate_batch(lines, **dict(arguments))
        if self.on_batch is not None:
            self.on_batch(name, len(lines))
        return results

    def check_bounds(self, lines: list) -> None:
        """``admission.check_bounds`` with this server's limits."""
        check_bounds(lines, self.limits)

    def check_lines(self, model, lines: list, target: Optional[str] = None, *, name=None, numbers=None) -> None:
        """``admission.check_lines`` for the model ``name`` of the pool (default: the default model)."""
        check_lines(model, lines, target, self.pool.specs[name or self.pool.default].multilingual, numbers)

    async def resident(self, name: str, disconnected: Optional[Disconnected] = None):
        """The model ``name``, loaded on the model thread first if it is not in memory: the load queues as a
        batch does, and a request for a model that is loading waits for it (with no timeout).

        Raises:
            ApiError: 503 when it failed to load (the reason and a Retry-After), the queue is full or the server
                stops; 499 when the client leaves first.
        """
        found = self.pool.resident(name)
        if found is not None:
            return found
        refused = self.pool.refused(name)
        if refused is not None:
            raise _unavailable(refused)
        return (await self._queue([None], (name, None), disconnected, None))[0]

    async def translate(
        self,
        lines: list,
        options: Optional[RequestOptions] = None,
        disconnected: Optional[Disconnected] = None,
        *,
        bounded: bool = True,
        model: Optional[str] = None,
        target: Optional[str] = None,
        timeout: Optional[float] = None,
        numbers=None,
        source: Optional[str] = None,
        glossary=None,
    ) -> list:
        """A model's results for ``lines``, translated in batches with other requests' sentences.

        Args:
            lines: the sentences, each a str or a ``segments.Segment`` with its instructions.
            options: what each translation gives besides its text; None for the text alone.
            disconnected: returns once the client has gone; None for a client that stays.
            bounded: check the per-request bounds on sentences and characters; False for what was bounded already
                (the slices of an uploaded document, bounded as a file by ``max_file_bytes``; a request's groups).
            model: the pool's model to translate with (default: its default model).
            target: the target language to pass to the model (a multilingual model's), or None.
            source: the source language to pass to the model (a multilingual model's), or None.
            timeout: the seconds to wait for the translations (default: the server's request timeout).
            numbers: each line's number in its request, for the messages (default: 1, 2, ...).
            glossary: a ``text.glossary.Glossary`` whose terms the sentences holding them must carry, or None.

        Returns:
            One ``results.Translation`` per line, in order.

        Raises:
            ApiError: 413 from ``check_bounds``; 400 or 422 from ``check_lines`` and ``model_arguments``; 503 with
                Retry-After when the model failed to load, the queue is full or the server stops; 504 on timeout and
                499 when the client disconnects, their sentences dropped; 422 when the model rejects a line.
        """
        if bounded:
            self.check_bounds(lines)
        options = options or RequestOptions()
        if options.format == "html" and any(isinstance(line, Segment) and not line.plain for line in lines):
            raise ApiError(422, "format html takes plain texts: prefix, constraints and avoid apply to plain text")
        name = model or self.pool.default
        loaded = await self.resident(name, disconnected)
        self.check_lines(loaded, lines, target, name=name, numbers=numbers)
        if source is not None and hasattr(loaded, "check_source"):
            try:
                loaded.check_source(source)
            except MtkitError as err:
                raise ApiError(400, str(err)) from None
        key = (
            name,
            self.model_arguments(options, loaded, target, source) + ((("glossary", glossary),) if glossary else ()),
        )
        if self.on_request is not None:
            self.on_request(name)
        return await self._queue(lines, key, disconnected, self.limits.timeout if timeout is None else timeout)

    async def _queue(self, lines: list, key: Hashable, disconnected: Optional[Disconnected], timeout) -> list:
        """Submit ``lines`` under ``key`` and wait for their results (``timeout`` None: with no timeout)."""
        try:
            items = self.batcher.submit(lines, key)
        except QueueFull as err:
            raise ApiError(503, str(err), {"Retry-After": "1"}) from None
        results = await self._wait(items, disconnected, timeout)
        try:
            return results.result()
        except QueueFull as err:
            raise ApiError(503, str(err), {"Retry-After": "1"}) from None
        except ModelUnavailable as err:
            raise _unavailable(err) from None
        except (MtkitError, ValueError, TypeError) as err:
            raise ApiError(422, str(err)) from None

    async def _wait(
        self, items: list[Item], disconnected: Optional[Disconnected], timeout: Optional[float]
    ) -> asyncio.Future:
        """The items' results as one done future, once they are ready.

        Raises:
            ApiError: 504 when the timeout comes first, 499 when the client goes first; the items are dropped, as
                they are when the caller is cancelled.
        """
        loop = asyncio.get_running_loop()
        results = asyncio.gather(*[asyncio.wrap_future(item.future) for item in items])
        results.add_done_callback(_read)  # a cancelled gather holds its CancelledError: read, it is not logged
        gone = asyncio.ensure_future(disconnected() if disconnected else loop.create_future())
        expired = asyncio.ensure_future(self._sleep(timeout) if timeout is not None else loop.create_future())
        try:
            done, _ = await asyncio.wait({results, gone, expired}, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:  # the request's other part failed: nobody waits for these any more
            self.batcher.drop(items)
            results.cancel()
            raise
        finally:
            gone.cancel()
            expired.cancel()
        if results in done:  # ready in time, even if the client left or the timeout came at the same moment
            return results
        self.batcher.drop(items)
        results.cancel()
        if gone in done:  # nobody reads the answer; the status is for the logs and /metrics
            raise ApiError(499, "the client closed the connection before its translations were ready")
        raise ApiError(504, f"no translation within {timeout:g} s; retry later or send fewer sentences")


def _read(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()


def _unavailable(err: ModelUnavailable) -> ApiError:
    """A model that failed to load: 503, its reason, and when to retry."""
    return ApiError(503, str(err), {"Retry-After": str(max(1, math.ceil(err.retry_after)))})


async def client_gone(request: Request) -> None:
    """Return once the client of ``request`` has disconnected.

    Call it after the body has been read: all that is left to receive then is the disconnect.
    """
    while (await request.receive())["type"] != "http.disconnect":
        pass
