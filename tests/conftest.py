"""Shared fixtures: a tiny deterministic en/de-like parallel corpus, YAML configs, and a CLI runner.

Everything is written under pytest's ``tmp_path``; nothing depends on files outside the repository or on the network.

    def test_x(toy_corpus, toy_config, run_cli):
        result = run_cli("prepare", str(toy_config()))
        assert result.code == 0
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import random
import sys
from pathlib import Path
from typing import Optional

import pytest
import yaml

# A word-for-word "translation" table: the target side is learnable from the source side.
EN_DE = {
    "a": "ein", "the": "der", "man": "Mann", "woman": "Frau", "child": "Kind", "dog": "Hund", "cat": "Katze",
    "is": "ist", "runs": "läuft", "sits": "sitzt", "plays": "spielt", "eats": "isst", "sees": "sieht",
    "in": "in", "on": "auf", "with": "mit", "near": "neben", "under": "unter", "park": "Park", "street": "Straße",
    "house": "Haus", "garden": "Garten", "ball": "Ball", "red": "rot", "big": "groß", "small": "klein",
    "green": "grün", "old": "alt", "young": "jung", "happy": "fröhlich", "water": "Wasser", "bread": "Brot",
    "and": "und", "two": "zwei", "three": "drei", "white": "weiß", "black": "schwarz", "blue": "blau",
    "bike": "Fahrrad", "tree": "Baum",
}
EN_WORDS = sorted(EN_DE)


def toy_pairs(n: int, seed: int = 0, min_words: int = 2, max_words: int = 10) -> list[tuple[str, str]]:
    """n deterministic (english-like, german-like) sentence pairs ending in a full stop."""
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        words = [rng.choice(EN_WORDS) for _ in range(rng.randint(min_words, max_words))]
        src = " ".join(words)
        tgt = " ".join(EN_DE[w] for w in words)
        pairs.append((src[0].upper() + src[1:] + " .", tgt[0].upper() + tgt[1:] + " ."))
    return pairs


def write_lines(path: Path, lines, gz: bool = False) -> Path:
    """Write lines (str, or bytes written verbatim) one per line, UTF-8, optionally gzip-compressed."""
    data = b"".join((line if isinstance(line, bytes) else line.encode("utf-8")) + b"\n" for line in lines)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


def write_toy_splits(root: Path, sizes=(("train", 300, 0), ("valid", 30, 1), ("test", 30, 2))) -> dict:
    """Write toy en/de files for each (split, pairs, seed) under root/corpus; return a ``data.splits`` mapping."""
    splits = {}
    for name, n, seed in sizes:
        pairs = toy_pairs(n, seed)
        src = write_lines(root / "corpus" / f"{name}.en", [p[0] for p in pairs])
        tgt = write_lines(root / "corpus" / f"{name}.de", [p[1] for p in pairs])
        splits[name] = {"src": str(src), "tgt": str(tgt)}
    return splits


@pytest.fixture(scope="module")
def one_thread():
    """Tiny models: intra-op threads only add contention (100x slower on a busy 2-core machine)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def write_parallel(tmp_path):
    """write_parallel(name, pairs=None, n=200, seed=0, gz=False, langs=("en", "de")) -> (src_path, tgt_path)."""

    def write(name: str, pairs=None, n: int = 200, seed: int = 0, gz: bool = False, langs=("en", "de")):
        pairs = toy_pairs(n, seed) if pairs is None else pairs
        suffix = ".gz" if gz else ""
        src = write_lines(tmp_path / "corpus" / f"{name}.{langs[0]}{suffix}", [p[0] for p in pairs], gz)
        tgt = write_lines(tmp_path / "corpus" / f"{name}.{langs[1]}{suffix}", [p[1] for p in pairs], gz)
        return src, tgt

    return write


@pytest.fixture
def toy_corpus(write_parallel) -> dict[str, dict[str, str]]:
    """train (300 pairs), valid (30) and test (30) files; a ``data.splits`` mapping."""
    splits = {}
    for name, n, seed in (("train", 300, 0), ("valid", 30, 1), ("test", 30, 2)):
        src, tgt = write_parallel(name, n=n, seed=seed)
        splits[name] = {"src": str(src), "tgt": str(tgt)}
    return splits


@pytest.fixture
def write_config(tmp_path):
    """write_config(tree, name="config.yaml") -> path of a YAML file holding ``tree``."""

    def write(tree: dict, name: str = "config.yaml") -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(tree, sort_keys=False), encoding="utf-8")
        return path

    return write


@pytest.fixture
def toy_data(tmp_path, toy_corpus):
    """toy_data(**overrides) -> a ``data:`` section for the toy corpus (small vocabulary, dir tmp_path/data)."""

    def section(**overrides) -> dict:
        return {"dir": str(tmp_path / "data"), "vocab_size": 100, "splits": toy_corpus, **overrides}

    return section


@pytest.fixture
def toy_config(toy_data, write_config):
    """toy_config(extra_sections=None, **data_overrides) -> path of a config with the toy data section."""

    def config(extra_sections: Optional[dict] = None, name: str = "config.yaml", **data_overrides) -> Path:
        return write_config({"data": toy_data(**data_overrides), **(extra_sections or {})}, name)

    return config


@dataclasses.dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def run_cli(capsys, monkeypatch):
    """run_cli(*args, stdin=None) -> CliResult(code, out, err) from ``mtkit.cli.main`` (errors exit 2)."""
    from mtkit.cli import main

    def run(*args, stdin: Optional[str] = None) -> CliResult:
        if stdin is not None:
            monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8")), encoding="utf-8"))
        capsys.readouterr()  # drop anything printed before
        code = main([str(a) for a in args])
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run
