"""The web page ``mtkit serve`` answers ``GET /`` with: one HTML file, its style sheet and one plain script, shipped
in this package and read once. The page calls the server's own API (docs/serving.md#the-web-page)."""

from __future__ import annotations

from importlib import resources

from fastapi import FastAPI
from fastapi.responses import Response

FILES = {  # the page's files and what they are
    "index.html": "text/html; charset=utf-8",
    "page.css": "text/css; charset=utf-8",
    "page.js": "text/javascript; charset=utf-8",
}
HEADERS = {"Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}  # no-cache: revalidated, never stale


def add_routes(app: FastAPI) -> None:
    """Add ``GET /`` (the page) and ``GET /page/{name}`` (its style sheet and script) to ``app``."""
    folder = resources.files(__name__)
    content = {name: (folder / name).read_bytes() for name in FILES}

    def answer(name: str) -> Response:
        return Response(content[name], media_type=FILES[name], headers=HEADERS)

    @app.get("/", include_in_schema=False)
    async def page() -> Response:
        return answer("index.html")

    @app.get("/page/page.css", include_in_schema=False)
    async def style() -> Response:
        return answer("page.css")

    @app.get("/page/page.js", include_in_schema=False)
    async def script() -> Response:
        return answer("page.js")
