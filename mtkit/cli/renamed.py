"""The flags that changed their name for one spelling across the commands (docs/cli.md), with their old spellings.

An old spelling works for one release more: it is read as the current one and says so on stderr, in one line
(``mtkit: warning: --out is deprecated; use --output``); --help shows only the current one. Plain data, read by
the Typer commands (``base.py``) and by the quick parser of ``mtkit translate`` (``quick.py``) alike.
"""

from __future__ import annotations

# command -> {old spelling: the arguments it stands for}
RENAMED: dict[str, dict[str, tuple[str, ...]]] = {
    "clean": {"--out": ("--output",), "--src-lang": ("--source",), "--tgt-lang": ("--target",)},
    "backtranslate": {"--out": ("--output",)},
    "translate": {"--sampling": ("--algorithm", "sampling")},
    "translate-file": {"--out": ("--output",)},
    "score": {"--hyps": ("--input",)},
    "merge-lora": {"--out": ("--output",)},
    "export": {"--out": ("--output",)},
    "import-hf": {"--out": ("--output",), "--src-lang": ("--source",), "--tgt-lang": ("--target",)},
    "extend-vocab": {"--out": ("--output",)},
}


def warning(old: str, new: tuple[str, ...]) -> str:
    return f"mtkit: warning: {old} is deprecated; use {' '.join(new)}"


def current(command: str, args: list[str]) -> tuple[list[str], list[str]]:
    """``args`` (those after the command's name) with each old spelling of ``command``'s renamed flags replaced by
    what it stands for (``--out=x`` by ``--output=x``), none after ``--``; and a warning for each old spelling
    given (once, however often it is given)."""
    renamed = RENAMED.get(command, {})
    found: list[str] = []
    warnings: dict[str, None] = {}
    rest = iter(args)
    for arg in rest:
        if arg == "--":
            found += [arg, *rest]
            break
        flag, equals, value = arg.partition("=")
        new = renamed.get(flag)
        if new is None or (equals and len(new) > 1):
            found.append(arg)
            continue
        warnings[warning(flag, new)] = None
        found += [new[0] + equals + value] if equals else list(new)
    return found, list(warnings)
