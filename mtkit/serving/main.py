"""``mtkit serve``: read the models (loading them now with ``--preload``), then serve them with uvicorn until
Ctrl-C or SIGTERM."""

from __future__ import annotations

import math
import signal
from pathlib import Path
from typing import Optional, Sequence

from mtkit.errors import MtkitError
from mtkit.flags import ServeLimits
from mtkit.serving.app import create_models_app
from mtkit.serving.models import model_specs
from mtkit.serving.pool import ModelPool
from mtkit.serving.threads import model_threads, share_cores
from mtkit.tokenizer import usable_cores


def serve_main(
    runs: Sequence[Path],
    *,
    models_file: Optional[Path] = None,
    host: str,
    port: int,
    api_key: Optional[str],
    cors_origins: list[str],
    limits: ServeLimits,
    engine: str,
    overrides: dict,
    max_models: Optional[int] = None,
    preload: bool = False,
    access_log: bool = False,
    parallel: int = 1,
    glossary_dir: Optional[Path] = None,
) -> None:
    """Read the models, then serve them until Ctrl-C or SIGTERM.

    On either signal uvicorn stops accepting, finishes the requests in flight (for at most the request timeout),
    and the function returns.

    Args:
        runs: run directories, checkpoints or CTranslate2 export directories.
        models_file: a models file (``models.read_models_file``), or None.
        host: the address to listen on.
        port: the port to listen on.
        api_key: the key translate requests must give; None or empty for none.
        cors_origins: the origins browsers may call from.
        limits: the server's bounds.
        engine: the engine to load the models with (a models file's entry may name its own).
        overrides: decoding options for ``mtkit.load`` (a models file's entry's own win).
        max_models: the most models in memory at once; None for all.
        preload: load the models now (the first ``max_models``) rather than on first use.
        access_log: log each request.
        parallel: how many models may translate at once, each on a model thread of its own (``share_cores``: with
            every model in memory only); without ``threads`` in ``overrides`` each then computes on its share of
            the cores.
        glossary_dir: the folder glossaries are kept in, or None for memory only.

    Raises:
        MtkitError: a model that does not read (or, with ``preload``, does not load), a bad models file, two unnamed
            models serving one pair, a damaged glossary file.
    """
    import uvicorn

    specs, parallel = share_cores(
        model_specs(runs, models_file, engine=engine, options=overrides), parallel, max_models, usable_cores()
    )
    pool = ModelPool(specs, max_models=max_models)
    executors = model_threads(parallel)  # the models are loaded and run on these threads
    try:
        app = create_models_app(
            pool,
            limits=limits,
            api_key=api_key or None,
            cors_origins=tuple(cors_origins),
            executor=executors,
            glossary_dir=glossary_dir,
        )
    except MtkitError:
        for executor in executors:
            executor.shutdown(wait=False)
        raise
    if preload:
        failures = executors[0].submit(pool.preload).result()
        if failures:
            for executor in executors:
                executor.shutdown(wait=False)
            raise MtkitError(str(failures[0]))
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
        for executor in executors:
            executor.shutdown(wait=False)
