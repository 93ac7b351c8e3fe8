"""The Typer app every command module registers its commands on, and what those modules share: the command
decorator, the --set option and the defaults of the flags."""

from __future__ import annotations

import functools

import typer

from mtkit import __version__
from mtkit.exits import plain_exits
from mtkit.flags import OutputOptions, ServeLimits

_OUTPUT, _LIMITS = OutputOptions(), ServeLimits()  # the defaults of the commands' flags

app = typer.Typer(
    add_completion=True,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    rich_markup_mode="rich",
    help="mtkit: prepare data, train, translate and score neural machine translation models.\n\n"
    "Example: [bold]mtkit prepare configs/multi30k-transformer.yaml && mtkit train configs/multi30k-transformer.yaml[/bold]",
)

SetOption = typer.Option(None, "--set", help="Override a config value before validation: --set training.lr=3e-4")


def _command(fn):
    """Register a command; its Ctrl-C and closed stdout reach main() as themselves, not as Typer's own exits."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        with plain_exits():
            return fn(*args, **kwargs)

    return app.command()(run)


def with_algorithm_flags(fn):
    """Give command ``fn`` (which takes ``**algorithm_options``) a flag for every option of every registered
    decoding algorithm (``mtkit.decoding.algorithms``): ``--top-p``, ``--temperature``..., None when not given.
    The flags come from the registry when the command is defined: an algorithm registered before that gets its
    flags without a change here."""
    import inspect
    from typing import Optional

    from mtkit.decoding import algorithms

    signature = inspect.signature(fn)
    kept = [p for p in signature.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    added = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=typer.Option(
                None, param.cli_flag, help=f"--algorithm {algorithm.name}: {param.help} (default {param.default})."
            ),
            annotation=Optional[param.kind],
        )
        for name, (algorithm, param) in algorithms.params().items()
        if name not in signature.parameters
    ]
    fn.__signature__ = signature.replace(parameters=kept + added)
    return fn


def _version(value: bool):
    if value:
        typer.echo(f"mtkit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
):
    pass
