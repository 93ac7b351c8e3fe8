"""How the command line ends when it does not finish: Ctrl-C and a reader of stdout that went away, carried past
Typer as themselves and turned into one line (or none) and their exit codes by ``cli.main``."""

from __future__ import annotations

import contextlib
import os
import sys


class Interrupted(Exception):
    """Ctrl-C inside a command, carried past click/typer (which would turn it into a silent exit 130)."""


class OutputClosed(Exception):
    """The reader of stdout went away (`| head -1`), carried past typer (which would exit 1)."""


@contextlib.contextmanager
def plain_exits():
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted() from None
    except BrokenPipeError:
        raise OutputClosed() from None


def interrupted():
    """The one line a Ctrl-C leaves (after a line break on a terminal, where ^C was echoed)."""
    try:
        print(("\n" if sys.stderr.isatty() else "") + "mtkit: interrupted", file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass


def quiet_broken_pipe():
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass
