"""The server's ASGI middlewares: request metrics and the body size limit.

Both are plain ASGI wrappers because Starlette's ``BaseHTTPMiddleware`` costs each request more.
"""

from __future__ import annotations

import time

from mtkit.serving.errors import error_for
from mtkit.serving.metrics import Metrics


class Observe:
    """Counts requests by path, responses by status and latency by path.

    Args:
        app: the ASGI app it wraps.
        metrics: where the counts go.
    """

    def __init__(self, app, metrics: Metrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        self.metrics.request(scope["path"])
        start, status = time.perf_counter(), 500  # 500 unless a response starts

        async def sending(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self.metrics.response(scope["path"], status, time.perf_counter() - start)


class BodyLimit:
    """Answers a request body over ``limit`` bytes with a 413 before any route reads it.

    Args:
        app: the ASGI app it wraps.
        limit: the most bytes a body may have.
        larger: paths whose bodies may have more (documents), and how many.
    """

    def __init__(self, app, limit: int, larger: dict[str, int] | None = None):
        self.app, self.default, self.larger = app, limit, dict(larger or {})

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        limit = self.larger.get(scope["path"], self.default)
        declared = dict(scope.get("headers", ())).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            return await self._too_large(limit, scope, receive, send)
        chunks, size = [], 0
        while True:  # read it all here: a chunked body declares no length
            message = await receive()
            if message["type"] != "http.request":
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > limit:
                return await self._too_large(limit, scope, receive, send)
            if not message.get("more_body"):
                break
        body, given = b"".join(chunks), False

        async def replay():
            nonlocal given
            if not given:
                given = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # what follows the body: the client's disconnect

        await self.app(scope, replay, send)

    async def _too_large(self, limit: int, scope, receive, send):
        response = error_for(scope["path"], 413, f"the request body is larger than {limit} bytes")
        await response(scope, receive, send)
