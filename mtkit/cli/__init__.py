"""The `mtkit` command line: thin Typer commands that parse arguments and call one typed function.

torch is imported lazily (inside commands that need it), so `mtkit --help` and `mtkit score` stay fast, and
`mtkit translate` with its common flags does not import Typer at all (``quick.py``). ``base.py`` holds the Typer
app and what the commands share; the commands are in ``data_and_training.py`` (prepare, clean, train, distill),
``translating.py`` (translate, translate-file, score) and ``runs.py`` (average, plot, export, import-hf,
extend-vocab, serve); ``renamed.py`` holds the old spellings of renamed flags (docs/cli.md: every option's one
name); ``main`` here runs one and turns its outcome into an exit code.
"""

from __future__ import annotations

import sys
from typing import Optional

from mtkit.errors import MtkitError
from mtkit.exits import Interrupted, OutputClosed, interrupted, plain_exits, quiet_broken_pipe

__all__ = ["app", "main"]


def __getattr__(name: str):
    if name == "app":  # the Typer app, with every command registered: imported when asked for
        return typer_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def typer_app():
    from mtkit.cli.base import app

    # the command modules register their commands on import, in the order `mtkit --help` lists them
    from mtkit.cli import data_and_training, translating, runs  # noqa: F401  # isort: skip

    return app


def main(argv: Optional[list[str]] = None) -> int:
    """The console script: run one command and turn every outcome into an exit code.

    Typer runs in its standalone mode, so a usage error (unknown command or option, missing argument, bad value)
    is a short usage message from Typer itself with exit code 2, whatever click Typer ships with.
    """
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        call = None
        if args[:1] == ["translate"]:
            from mtkit.cli.quick import translate_call

            call = translate_call(args[1:])
        if call is not None:
            from mtkit.inference.translate import translate_main

            with plain_exits():
                translate_main(**call)
        else:
            typer_app()(args=args, prog_name="mtkit")
    except SystemExit as exc:  # a finished command, --help, --version and usage errors all exit here
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except MtkitError as err:
        print(f"mtkit: error: {err}", file=sys.stderr)
        return err.exit_code
    except (KeyboardInterrupt, Interrupted):
        interrupted()
        return 130
    except (BrokenPipeError, OutputClosed):
        quiet_broken_pipe()
        return 0
    return 0
