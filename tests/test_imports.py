"""The package's import graph: no cycle among mtkit modules (imports inside functions included), layers that
import only downward, and a lean CLI start-up that leaves torch (and the other heavy libraries, sacreBLEU among
them) unimported."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "mtkit"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The mtkit modules ``name`` imports anywhere in its source: at top level, in functions, under conditions."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from . import x, from .base import y
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # `from mtkit.data import batches` imports the module mtkit.data.batches; `from mtkit.data.batches import collate` mtkit.data.batches
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # `import mtkit.models.base` -> mtkit.models.base
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: imported(name, path, known) for name, path in found.items()}


def find_cycle(graph: dict[str, set[str]]):
    """One cycle of ``graph`` as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str):
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                cycle = visit(nxt)
                if cycle:
                    return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            cycle = visit(node)
            if cycle:
                return cycle
    return None


# The layers, lowest first: a module may import its own layer and those below it, never one above. A name
# stands for the module and, for a package, everything in it.
LAYERS = (
    ("mtkit.errors", "mtkit.version", "mtkit.languages"),
    # the registry of decoding algorithms is plain data: the config's decoding section is made from it
    ("mtkit.decoding.algorithms",),
    ("mtkit.files", "mtkit.manifest", "mtkit.config", "mtkit.flags"),
    ("mtkit.scoring",),  # sacreBLEU only: no torch, no model
    ("mtkit.tokenizer", "mtkit.devices", "mtkit.memory", "mtkit.plots", "mtkit.text"),
    ("mtkit.models", "mtkit.lora"),  # LoRA adapters on a model's layers (PEFT), no checkpoint
    ("mtkit.checkpoint",),
    ("mtkit.data",),
    ("mtkit.decoding",),
    ("mtkit.training",),
    ("mtkit.interop",),
    ("mtkit.documents",),  # document formats: they call a model they are given, import none
    ("mtkit.inference",),
    ("mtkit.serving",),
    ("mtkit.cli", "mtkit.exits", "mtkit.__main__", "mtkit"),
)


def layer_of(module: str) -> int:
    """The index in LAYERS of the longest name that is ``module`` or a package holding it."""
    matches = [
        (len(name), index)
        for index, names in enumerate(LAYERS)
        for name in names
        if module == name or module.startswith(name + ".")
    ]
    assert matches, f"{module} is in no layer: add it to LAYERS"
    return max(matches)[1]


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return [
        f"{module} (layer {layer_of(module)}) imports {target} (layer {layer_of(target)})"
        for module, targets in sorted(graph.items())
        for target in sorted(targets)
        if layer_of(target) > layer_of(module)
    ]


def test_the_graph_sees_every_kind_of_import():
    graph = import_graph()
    assert "mtkit.cli" in graph and "mtkit.models.base" in graph and "mtkit" in graph
    assert "mtkit.training.launch" in graph["mtkit.cli.data_and_training"]  # inside a command function
    assert "mtkit.models.base" in graph["mtkit.models.transformer"]  # from mtkit.models.base import ...
    assert "mtkit.errors" in graph["mtkit.config.reading"]
    assert "mtkit.config.schema" in graph["mtkit.config"]  # from mtkit.config.schema import ...


def test_find_cycle_names_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_upward_imports_are_found():
    assert upward_imports({"mtkit.models.base": {"mtkit.decoding.search"}, "mtkit.decoding.search": set()}) == [
        "mtkit.models.base (layer 5) imports mtkit.decoding.search (layer 8)"
    ]
    assert upward_imports({"mtkit.serving.app": {"mtkit.inference.api", "mtkit.errors"}}) == []


def test_layers_import_only_downward():
    assert upward_imports(import_graph()) == []


def test_no_import_cycle_in_the_package():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_importing_the_cli_leaves_torch_unimported():
    code = (
        "import sys, mtkit.cli; "
        "heavy = [m for m in ('torch', 'datasets', 'ctranslate2', 'matplotlib', 'sacrebleu') if m in sys.modules]; "
        "assert not heavy, f'mtkit.cli imported {heavy}'"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
