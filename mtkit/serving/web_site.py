"""`mtkit serve --web DIR`: an exported web page (`mtkit export --format web`) served as static files, with the two
headers that make the page cross-origin isolated (``Cross-Origin-Opener-Policy: same-origin``,
``Cross-Origin-Embedder-Policy: require-corp``), which onnxruntime-web needs to run its WebAssembly on several
threads. Any static host serves the folder too; without those headers the page translates on one thread.

Only the standard library: no model is loaded here, the browser runs it.
"""

from __future__ import annotations

import functools
import http.server
import json
from pathlib import Path

from mtkit.errors import MtkitError

SITE_META = "mtkit-web.json"  # interop.web_export's marker of an exported site
ISOLATION = {"Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp"}
TYPES = {  # what the site holds; the browser compiles WebAssembly as it streams only when served as application/wasm
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".wasm": "application/wasm",
    ".onnx": "application/octet-stream",
}


class _Handler(http.server.SimpleHTTPRequestHandler):
    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, **TYPES}

    def end_headers(self) -> None:
        for name, value in ISOLATION.items():
            self.send_header(name, value)
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        self.send_header("X-Content-Type-Options", "nosniff")
        super().end_headers()

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        pass


def check_site(folder: Path) -> dict:
    """The site's ``mtkit-web.json``.

    Raises:
        MtkitError: ``folder`` is not a folder written by ``mtkit export --format web``.
    """
    meta = Path(folder) / SITE_META
    if not meta.is_file():
        raise MtkitError(
            f"--web {folder}: not a web export (no {SITE_META}); write one with mtkit export RUN --format web "
            f"--output {folder}"
        )
    try:
        return json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise MtkitError(f"{meta}: unreadable; export the site again") from None


def make_server(folder: Path, host: str, port: int) -> http.server.ThreadingHTTPServer:
    """A threading HTTP server of ``folder``'s files with the isolation headers (port 0: any free port)."""
    check_site(folder)
    handler = functools.partial(_Handler, directory=str(Path(folder).resolve()))
    try:
        return http.server.ThreadingHTTPServer((host, port), handler)
    except OSError as err:
        raise MtkitError(f"cannot listen on {host}:{port} ({err.strerror or err}); choose another --port") from None


def serve_site(folder: Path, host: str, port: int) -> None:
    """Serve the site until Ctrl-C."""
    server = make_server(folder, host, port)
    meta = check_site(folder)
    shown = f"[{host}]" if ":" in host else host
    print(
        f"serving the web page of {folder} ({meta.get('source')} -> {meta.get('target')}) at "
        f"http://{shown}:{server.server_address[1]}/ (cross-origin isolated: several threads); Ctrl-C stops",
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
