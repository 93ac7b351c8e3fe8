"""The translation service behind every route: admission, queueing into the batcher, and the wait for results."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Hashable, Optional

from mtkit.errors import MtkitError
from mtkit.flags import ServeLimits
from mtkit.inference.segments import Segment
from mtkit.serving.batcher import Batcher, Item, QueueFull
from mtkit.serving.errors import ApiError
from mtkit.serving.schemas import RequestOptions

if TYPE_CHECKING:
    from starlette.requests import Request

Disconnected = Callable[[], Awaitable[Any]]  # returns once the client has gone


class TranslationService:
    """Translates the sentences of requests with ``model``, batched across requests.

    Only the batcher's worker calls the model. A request's sentences leave the queue when it times out or its client
    disconnects.

    Args:
        model: anything with ``translate_batch``, ``check`` and ``options.batch_size``.
        limits: the server's bounds.
        executor: the one-thread executor the model was loaded on (``batcher.model_thread``), or None.
        on_batch: called with each batch's size.
        sleep: the request timeout's wait, like ``asyncio.sleep``.
    """

    def __init__(
        self,
        model,
        limits: ServeLimits = ServeLimits(),
        *,
        executor=None,
        on_batch: Optional[Callable[[int], None]] = None,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ):
        self.model, self.limits, self._sleep = model, limits, sleep
        self.batcher = Batcher(
            self._call_model,
            model.options.batch_size,
            limits.max_wait,
            limits.queue_size,
            on_batch=on_batch,
            executor=executor,
            max_delay=limits.max_delay,
        )

    def start(self) -> None:
        """Start the batcher's worker."""
        self.batcher.start()

    def stop(self) -> None:
        """Stop the worker; requests still queued get a 503."""
        self.batcher.stop()

    def model_arguments(self, options: RequestOptions) -> tuple[tuple[str, Any], ...]:
        """``translate_batch``'s keyword arguments for a request's ``options``.

        Returns:
            (name, value) pairs: hashable, so that they are the batcher's key too.

        Raises:
            ApiError: 422 for options the model refuses (``TranslationModel.options_for``: more hypotheses than
                the beam holds, alignments from CTranslate2), with the message the CLI and the API give.
        """
        nbest = options.nbest
        try:
            found = self.model.options_for(nbest=nbest, scores=options.scores, alignments=options.alignments)
            self.model.check_format(options.format, found)
        except MtkitError as err:
            raise ApiError(422, str(err)) from None
        return (
            ("nbest", nbest),
            ("scores", options.scores),
            ("alignments", options.alignments),
            ("format", options.format),
            ("split_sentences", options.split_sentences),
        )

    def _call_model(self, lines: list, key: Hashable) -> list:
        return self.model.translate_batch(lines, **dict(key))  # key: model_arguments'

    def admit(self, lines: list) -> None:
        """Accept ``lines`` within the request bounds, each segment's instructions checked by the model.

        Raises:
            ApiError: 413 for too many sentences or characters, 422 for a segment the model cannot follow.
        """
        most = min(self.limits.max_sentences, self.limits.queue_size)  # more could never fit in the queue
        if len(lines) > most:
            raise ApiError(413, f"{len(lines)} sentences in one request; at most {most}")
        chars = sum(_chars(line) for line in lines)
        if chars > self.limits.max_chars:
            raise ApiError(413, f"{chars} characters in one request; at most {self.limits.max_chars}")
        check_target = getattr(self.model, "check_target", None)
        for i, line in enumerate(lines):
            if check_target is not None:
                try:
                    check_target(line.target if isinstance(line, Segment) else None)
                except MtkitError as err:
                    raise ApiError(400, f"text item {i + 1}: {err}") from None
            if isinstance(line, Segment):
                try:
                    self.model.check(line)
                except MtkitError as err:
                    raise ApiError(422, f"text item {i + 1}: {err}") from None

    async def translate(
        self,
        lines: list,
        options: Optional[RequestOptions] = None,
        disconnected: Optional[Disconnected] = None,
        *,
        whole_document: bool = False,
    ) -> list:
        """The model's results for ``lines``, translated in batches with other requests' sentences.

        Args:
            lines: the sentences, each a str or a ``segments.Segment`` with its instructions.
            options: what each translation gives besides its text; None for the text alone.
            disconnected: returns once the client has gone; None for a client that stays.
            whole_document: the lines are a slice of an uploaded document, whose size was bounded as a file's
                (``max_file_bytes``): the per-request bounds on sentences and characters do not apply.

        Returns:
            One ``results.Translation`` per line, in order.

        Raises:
            ApiError: 413 or 422 from ``admit`` and ``model_arguments``; 503 with Retry-After when the queue is full
                or the server stops; 504 on timeout and 499 when the client disconnects, their sentences dropped;
                422 when the model rejects a line.
        """
        if not whole_document:
            self.admit(lines)
        options = options or RequestOptions()
        if options.format == "html" and any(isinstance(line, Segment) and not line.plain for line in lines):
            raise ApiError(422, "format html takes plain texts: prefix, constraints and avoid apply to plain text")
        key = self.model_arguments(options)
        try:
            items = self.batcher.submit(lines, key)
        except QueueFull as err:
            raise ApiError(503, str(err), {"Retry-After": "1"}) from None
        results = await self._wait(items, disconnected)
        try:
            return results.result()
        except QueueFull as err:
            raise ApiError(503, str(err), {"Retry-After": "1"}) from None
        except (MtkitError, ValueError, TypeError) as err:
            raise ApiError(422, str(err)) from None

    async def _wait(self, items: list[Item], disconnected: Optional[Disconnected]) -> asyncio.Future:
        """The items' results as one done future, once they are ready.

        Raises:
            ApiError: 504 when the timeout comes first, 499 when the client goes first; the items are dropped.
        """
        results = asyncio.gather(*[asyncio.wrap_future(item.future) for item in items])
        gone = asyncio.ensure_future(disconnected() if disconnected else asyncio.get_running_loop().create_future())
        expired = asyncio.ensure_future(self._sleep(self.limits.timeout))
        try:
            done, _ = await asyncio.wait({results, gone, expired}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            expired.cancel()
        if results in done:  # ready in time, even if the client left or the timeout came at the same moment
            return results
        self.batcher.drop(items)
        results.cancel()
        if gone in done:  # nobody reads the answer; the status is for the logs and /metrics
            raise ApiError(499, "the client closed the connection before its translations were ready")
        raise ApiError(504, f"no translation within {self.limits.timeout:g} s; retry later or send fewer sentences")


def _chars(line) -> int:
    """A line's characters: a segment's instructions count too."""
    if isinstance(line, Segment):
        return len(line.text) + len(line.prefix or "") + sum(map(len, line.constraints + line.avoid))
    return len(line)


async def client_gone(request: Request) -> None:
    """Return once the client of ``request`` has disconnected.

    Call it after the body has been read: all that is left to receive then is the disconnect.
    """
    while (await request.receive())["type"] != "http.disconnect":
        pass
