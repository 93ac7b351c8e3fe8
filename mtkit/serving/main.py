"""``mtkit serve``: load a model, then serve it with uvicorn until Ctrl-C or SIGTERM."""

from __future__ import annotations

import math
import signal
from pathlib import Path
from typing import Optional

from mtkit.flags import ServeLimits
from mtkit.serving.app import create_app
from mtkit.serving.batcher import model_thread
from mtkit.serving.languages import run_languages


def serve_main(
    run: Path,
    *,
    host: str,
    port: int,
    api_key: Optional[str],
    cors_origins: list[str],
    limits: ServeLimits,
    engine: str,
    overrides: dict,
    access_log: bool = False,
) -> None:
    """Load the model, then serve it until Ctrl-C or SIGTERM.

    On either signal uvicorn stops accepting, finishes the requests in flight (for at most the request timeout),
    and the function returns.

    Args:
        run: a run directory, a checkpoint or a CTranslate2 export directory.
        host: the address to listen on.
        port: the port to listen on.
        api_key: the key translate requests must give; None or empty for none.
        cors_origins: the origins browsers may call from.
        limits: the server's bounds.
        engine: the engine to load the model with.
        overrides: decoding options for ``mtkit.load``.
        access_log: log each request.

    Raises:
        MtkitError: the model does not load.
    """
    import uvicorn

    from mtkit.inference.api import load

    executor = model_thread()  # the model is loaded and run on this one thread
    model = executor.submit(load, run, engine=engine, **overrides).result()
    app = create_app(
        model,
        run_languages(run),
        limits=limits,
        api_key=api_key or None,
        cors_origins=tuple(cors_origins),
        executor=executor,
    )
    # uvicorn handles both signals while it runs, then raises the one it stopped on again for the handlers it
    # found; with these, a stop it has completed ends the process normally instead of killing it by that signal
    stops = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in stops}
    try:
        uvicorn.run(
            app,
            host=host,
            port=port,
            log_level="info",
            access_log=access_log,
            timeout_graceful_shutdown=math.ceil(limits.timeout),
        )
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        executor.shutdown(wait=False)
