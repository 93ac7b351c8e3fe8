"""The Typer app every command module registers its commands on, and what those modules share: the command
decorator, the options several commands take, the defaults of the flags and the lists of choices their help
gives, each made from what is registered (``mtkit.decoding.algorithms``, the schema's plain fields)."""

from __future__ import annotations

import functools
import sys
from typing import Iterable, Optional

import typer
from typer.core import TyperCommand

from mtkit import __version__
from mtkit.cli import renamed
from mtkit.decoding import algorithms
from mtkit.exits import plain_exits
from mtkit.flags import OutputOptions, ServeLimits
from mtkit.inference import plain_fields
from mtkit.interop.ct2_export import QUANTIZATIONS

_OUTPUT, _LIMITS = OutputOptions(), ServeLimits()  # the defaults of the commands' flags
ENGINES = plain_fields.OUTPUT["engine"]["choices"]

app = typer.Typer(
    add_completion=True,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    rich_markup_mode="rich",
    help="mtkit: prepare data, train, translate and score neural machine translation models.\n\n"
    "Example: [bold]mtkit prepare configs/multi30k-transformer.yaml && mtkit train configs/multi30k-transformer.yaml[/bold]",
)


def choices(names: Iterable[str], notes: Optional[dict[str, str]] = None) -> str:
    """``a, b or c`` as help text lists choices; ``notes`` adds a few words after some: ``first (OpenNMT-py)``."""
    shown = [f"{n} ({notes[n]})" if notes and n in notes else str(n) for n in names]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"


def algorithm_option(default: str = "the run's decoding.algorithm"):
    """``--algorithm``, its help listing the algorithms registered when the command is defined."""
    return typer.Option(
        None,
        "--algorithm",
        help=f"{choices(algorithms.REGISTRY)}; default: {default} (docs/decoding.md).",
        show_default=False,
    )


def engine_option(default: str = _OUTPUT.engine, auto: str = ""):
    """``--engine``; ``auto``: what the choice auto picks, for a command that offers it."""
    if auto:
        return typer.Option(default, "--engine", help=f"{choices(('auto', *ENGINES), {'auto': auto})}.")
    return typer.Option(
        default, "--engine", help=f"{choices(ENGINES)} (a dir written by mtkit export: ctranslate2 always)."
    )


SetOption = typer.Option(None, "--set", help="Override a config value before validation: --set training.lr=3e-4")
DeviceOption = typer.Option(
    None, "--device", help=f"{choices(plain_fields.DECODING['device']['choices'])} (decoding.device)."
)
DtypeOption = typer.Option(
    None,
    "--dtype",
    help=f"{choices(plain_fields.DECODING['dtype']['choices'])} (decoding.dtype); --engine ctranslate2: "
    f"{choices(QUANTIZATIONS)} (default: the export's).",
)


class _Command(TyperCommand):
    """A command that reads the old spellings of its renamed flags as the current ones (``renamed.py``)."""

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        args, warnings = renamed.current(self.name or "", list(args))
        if not ctx.resilient_parsing:
            for line in warnings:
                print(line, file=sys.stderr)
        return super().parse_args(ctx, args)


def _command(fn):
    """Register a command; its Ctrl-C and closed stdout reach main() as themselves, not as Typer's own exits."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        with plain_exits():
            return fn(*args, **kwargs)

    return app.command(cls=_Command)(run)


def with_algorithm_flags(fn):
    """Give command ``fn`` (which takes ``**algorithm_options``) a flag for every option of every registered
    decoding algorithm (``mtkit.decoding.algorithms``): ``--top-p``, ``--temperature``..., None when not given.
    The flags come from the registry when the command is defined: an algorithm registered before that gets its
    flags without a change here."""
    import inspect

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
