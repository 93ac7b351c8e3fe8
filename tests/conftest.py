"""Shared fixtures: a tiny deterministic en/de-like parallel corpus, YAML configs, and a CLI runner.

Everything is written under pytest's ``tmp_path``; nothing depends on files outside the repository or on the network.

    def test_x(toy_corpus, toy_config, run_cli):
        result = run_cli("prepare", str(toy_config()))
        assert result.code == 0
"""

from __future__ import annotations

import dataclasses
import gzip
import inspect
import io
import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import pytest
import yaml

# dtype auto: the same answer on every machine (int8 where the x86 kernels exist), nothing cached in the home
# directory; tests/test_kernels.py measures for real
os.environ.setdefault("MTKIT_AUTO_DTYPE", "int8")
os.environ.setdefault("MTKIT_CACHE_DIR", "off")

# Under pytest-xdist (pyproject's addopts: -n auto), each worker computes on its share of the cores, it and the
# processes it starts: torch's default of one thread per core in every worker puts more busy threads than cores on
# the machine, and OpenMP's spinning threads then run tiny models many times slower. Set before torch is imported.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _share = str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
    os.environ.setdefault("OMP_NUM_THREADS", _share)
    os.environ.setdefault("MKL_NUM_THREADS", _share)


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(config, items):
    """Every test that uses the comparison helpers gets the marker ``compares`` (``_compares``). Under xdist, the
    modules whose every test is slow go first (in file order, as the others after them): with --dist loadfile and
    --no-loadscope-reorder, workers take whole modules in collection order, and a long module taken last would keep
    one worker busy while the others have nothing left to do."""
    seen: dict = {}
    for item in items:
        function = getattr(item, "function", None)
        if function is not None and not item.get_closest_marker("compares") and _compares(function, seen):
            item.add_marker(pytest.mark.compares)
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    slow: dict[str, bool] = {}
    for item in items:
        path = item.nodeid.split("::")[0]
        slow[path] = slow.get(path, True) and item.get_closest_marker("slow") is not None
    items.sort(key=lambda item: not slow[item.nodeid.split("::")[0]])  # stable: file order within each part


# Tests that hold two computations of one model to each other carry the marker ``compares`` (pyproject.toml), and
# .ci/run runs them again under the kernels of an AVX2-only CPU. A test that names one of these helpers (below), in
# its own code or in a function or class of the tests that it calls, is such a test and is marked at collection, so
# none is left out of that run; a comparison written without them carries the marker itself.
COMPARISON_HELPERS = ("LOG_PROB_TOL", "NEAR_TIE", "first_divergence", "search_margin", "diverged_at_near_ties")


def _compares(obj, seen: dict) -> bool:
    """Whether the test function or class ``obj`` names a comparison helper, or calls something of tests/ that
    does (``seen``: the answers so far)."""
    if obj in seen:
        return seen[obj]
    seen[obj] = False  # a cycle adds nothing
    if inspect.isclass(obj):
        parts = [getattr(m, "__func__", m) for m in vars(obj).values()]
        found = any(_compares(m, seen) for m in parts if _in_tests(m))
    else:
        inner = getattr(getattr(obj, "hypothesis", None), "inner_test", None)  # under @given
        function = inspect.unwrap(inner or obj)
        codes, names = [function.__code__], set()
        while codes:  # the function's code and what is nested in it: inner functions, lambdas, comprehensions
            code = codes.pop()
            names.update(code.co_names)
            codes += [c for c in code.co_consts if inspect.iscode(c)]
        scope = function.__globals__
        found = any(
            name in COMPARISON_HELPERS or (_in_tests(scope.get(name)) and _compares(scope[name], seen))
            for name in sorted(names)
        )
    seen[obj] = found
    return found


def _in_tests(obj) -> bool:
    """A function or class written in tests/."""
    if not (inspect.isfunction(obj) or inspect.isclass(obj)):
        return False
    try:
        return Path(inspect.getfile(obj)).resolve().parent == Path(__file__).resolve().parent
    except TypeError:  # a built-in class
        return False


# A word-for-word "translation" table: the target side is learnable from the source side.
EN_DE = {
    "a": "ein",
    "the": "der",
    "man": "Mann",
    "woman": "Frau",
    "child": "Kind",
    "dog": "Hund",
    "cat": "Katze",
    "is": "ist",
    "runs": "läuft",
    "sits": "sitzt",
    "plays": "spielt",
    "eats": "isst",
    "sees": "sieht",
    "in": "in",
    "on": "auf",
    "with": "mit",
    "near": "neben",
    "under": "unter",
    "park": "Park",
    "street": "Straße",
    "house": "Haus",
    "garden": "Garten",
    "ball": "Ball",
    "red": "rot",
    "big": "groß",
    "small": "klein",
    "green": "grün",
    "old": "alt",
    "young": "jung",
    "happy": "fröhlich",
    "water": "Wasser",
    "bread": "Brot",
    "and": "und",
    "two": "zwei",
    "three": "drei",
    "white": "weiß",
    "black": "schwarz",
    "blue": "blau",
    "bike": "Fahrrad",
    "tree": "Baum",
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


def free_port() -> int:
    """A TCP port of 127.0.0.1 free at the time of asking."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_toy_splits(root: Path, sizes=(("train", 300, 0), ("valid", 30, 1), ("test", 30, 2))) -> dict:
    """Write toy en/de files for each (split, pairs, seed) under root/corpus; return a ``data.splits`` mapping."""
    splits = {}
    for name, n, seed in sizes:
        pairs = toy_pairs(n, seed)
        src = write_lines(root / "corpus" / f"{name}.en", [p[0] for p in pairs])
        tgt = write_lines(root / "corpus" / f"{name}.de", [p[1] for p in pairs])
        splits[name] = {"src": str(src), "tgt": str(tgt)}
    return splits


def prepared_toy_data(root: Path, sizes=(("train", 300, 0), ("valid", 30, 1))) -> dict:
    """The toy corpus's splits (name, pairs, seed) written under ``root`` and prepared (vocabulary 100, joint)
    into ``root/data``; returns the config's data section."""
    from mtkit import config as cfgmod
    from mtkit.data.prepare import prepare

    splits = {}
    for name, n, seed in sizes:
        pairs = toy_pairs(n, seed)
        src = write_lines(root / "corpus" / f"{name}.en", [p[0] for p in pairs])
        tgt = write_lines(root / "corpus" / f"{name}.de", [p[1] for p in pairs])
        splits[name] = {"src": str(src), "tgt": str(tgt)}
    section = {"dir": str(root / "data"), "vocab_size": 100, "splits": splits}
    prepare(cfgmod.from_dict({"data": section}).data)
    return section


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


def without_curves(tree: dict) -> dict:
    """``tree`` with ``training.curves: false`` where it has a training section that does not say: the tests'
    runs draw no curves.png (0.2 s a run, and 1 s of imports a process) unless a test asks for it."""
    if isinstance(tree.get("training"), dict):
        tree = {**tree, "training": {"curves": False, **tree["training"]}}
    return tree


@pytest.fixture
def write_config(tmp_path):
    """write_config(tree, name="config.yaml") -> path of a YAML file holding ``tree`` (``without_curves``)."""

    def write(tree: dict, name: str = "config.yaml") -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(without_curves(tree), sort_keys=False), encoding="utf-8")
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


# ------------------------------------------------------------------------------- a small trained run
TOY_RUN_MAX_POSITIONS = 128
TOY_RUN_CHUNK_SIZE = 50  # the run's decoding.chunk_size
SUBPROCESS_ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}

# The tiny Transformer of the toy runs (the model section of a config; tests add max_positions or dropout).
TINY_TRANSFORMER = {
    "arch": "transformer",
    "d_model": 32,
    "heads": 2,
    "encoder_layers": 1,
    "decoder_layers": 1,
    "ffn_dim": 64,
    "dropout": 0.0,
}


@pytest.fixture(scope="session")
def toy_run_workdir(tmp_path_factory) -> Path:
    """Toy corpus, prepared data and a run dir (``run``) holding a tiny Transformer trained for 150 updates, once
    per test session for the modules that only read it (test_translate.py, test_api.py)."""
    root = tmp_path_factory.mktemp("translate")
    splits = write_toy_splits(root)
    config = {
        "data": {"dir": str(root / "data"), "vocab_size": 100, "splits": splits},
        "model": {**TINY_TRANSFORMER, "max_positions": TOY_RUN_MAX_POSITIONS},
        "training": {
            "run_dir": str(root / "run"),
            "max_updates": 150,
            "batch_tokens": 400,
            "lr": 3e-3,
            "warmup_updates": 20,
            "validate_every": 150,
            "log_every": 50,
            "threads": 1,
            "valid_max_sentences": 10,
        },
        "decoding": {"beam_size": 4, "batch_size": 16, "chunk_size": TOY_RUN_CHUNK_SIZE, "threads": 1, "device": "cpu"},
    }
    prepare_and_train(root, config)
    return root


# The modules that read the toy run (test_api.py, test_serve*.py, test_deepl.py, ...) take its directory and its
# model from these two, built once per module (a module may define its own to mean something else)
@pytest.fixture(scope="module")
def run_dir(toy_run_workdir) -> Path:
    return toy_run_workdir / "run"


@pytest.fixture(scope="module")
def model(run_dir):
    import mtkit

    return mtkit.load(run_dir)


def prepare_and_train(root: Path, config: dict) -> None:
    """Write ``config`` (``without_curves``) to root/config.yaml, then ``mtkit prepare`` and ``mtkit train`` it in
    this process (a process of its own would add about 2 s of imports to each)."""
    (root / "config.yaml").write_text(yaml.safe_dump(without_curves(config), sort_keys=False), encoding="utf-8")
    for command in ("prepare", "train"):
        assert cli(command, root / "config.yaml") == 0, f"mtkit {command} {root / 'config.yaml'} failed"


# --------------------------------------------------------------- two computations of one model's search
# Two float32 computations of one model's log-probs (another engine, another batch shape, a KV cache, an ensemble
# of the model with itself, a shortlist) agree to rounding, not bit for bit, and how they round depends on the CPU's
# kernels (AVX-512, AVX2 or none, in PyTorch, oneDNN, MKL and CTranslate2): on the toy models here they differ by a
# few 1e-6 over the whole vocabulary. LOG_PROB_TOL is what the comparisons allow per log-prob. Where a search meets
# two candidates closer than that, the two computations may rank them either way and then part ways, so their
# outputs for that sentence cannot be held to each other token for token. A sentence whose outputs differ is
# therefore accepted only where the search, replayed on the reference model, really meets such a near-tie: two
# candidates whose order decides what the search does, closer than NEAR_TIE per log-prob that is not common to
# both (each computation is within LOG_PROB_TOL of the reference per log-prob, so their order can flip only
# there). Every other sentence, and every score, is still compared as before; a bug that changes outputs changes
# them where no near-tie is, and fails.
LOG_PROB_TOL = 1e-4
NEAR_TIE = 2 * LOG_PROB_TOL


def _source(src):
    """(1, len) source ids as the search sees them: ``src`` holds the ids with EOS; PAD is dropped."""
    import torch

    from mtkit.models.base import PAD

    src = torch.as_tensor(src, dtype=torch.long).flatten()
    return src[src.ne(PAD)].unsqueeze(0)


def first_divergence(model, src, a: list[int], b: list[int]) -> Optional[tuple[int, float]]:
    """Where two greedy outputs for ``src`` part ways, and how far there the two tokens are from the best one.

    None if ``a == b``. Otherwise (t, shortfall): t is the first position where the token lists (each ending in
    EOS) differ, and shortfall the larger gap between the model's best log-prob after the common prefix and the
    log-prob of either token. A greedy search picks the best token, so two computations each within LOG_PROB_TOL
    of ``model`` can only pick differently where that shortfall is within NEAR_TIE.
    """
    import torch

    from mtkit.models.base import BOS, EOS, PAD

    if a == b:
        return None
    a, b = a + [EOS], b + [EOS]
    t = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    src = _source(src)
    with torch.inference_mode():
        state = model.init_state(model.encode(src, src.ne(PAD)), src.ne(PAD))
        for token in [BOS] + a[:t]:
            log_probs, state, _ = model.step(torch.tensor([token]), state)
    log_probs = log_probs[0].float().clone()
    log_probs[[PAD, BOS]] = float("-inf")
    return t, float(log_probs.max() - torch.minimum(log_probs[a[t]], log_probs[b[t]]))


def search_margin(
    model,
    src,
    *,
    beam_size: int,
    length_penalty: float,
    max_len_a: float,
    max_len_b: float,
    nbest: int = 1,
    stopping: str = "beam_full",
    max_len_cap: Optional[int] = None,
) -> float:
    """The closest call ``search.beam_search`` makes on one sentence, per log-prob the two sides do not share.

    A plain replay of the search's rules on ``src`` alone (the 2k best (beam, token) candidates by cumulative
    log-prob; EOS among the first k finishes, the first k others continue; the ``stopping`` rule; the n-best
    ranked by score). At each decision, every pair of the 2k + 1 best candidates whose swap would change what the
    search does (which hypotheses finish, which continue, whether it stops) is a call; its gap is divided by the
    number of log-probs in the two sums that are not common to both (1 for two tokens of one beam, since their
    prefix is shared). So do the stopping test and the final ranking. Beam size 1 with ``beam_full`` is greedy.
    """
    import math

    import torch

    from mtkit.decoding.search import length_penalty_of, max_lengths
    from mtkit.models.base import BOS, EOS, PAD

    k = beam_size
    src = _source(src)
    mask = src.ne(PAD)
    cap = model.max_positions - 1 if max_len_cap is None else max_len_cap
    max_len = int(max_lengths(mask, max_len_a, max_len_b, cap)[0])
    lp_longest = length_penalty_of(max_len + 1, length_penalty)
    margin = math.inf
    beams = [((), 0.0)]  # (tokens, cumulative float32 log-prob)
    finished: list[tuple[float, tuple]] = []  # (score, tokens)

    def unshared(x: tuple, y: tuple, length: int) -> int:
        common = next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
        return length - common

    def outcome(ranked: list, done_before: int) -> tuple:
        top = ranked[: 2 * k]
        ends = frozenset((beam, token) for _, beam, token in top[:k] if token == EOS)
        first = bool(top) and top[0][2] == EOS
        if stopping == "beam_full":
            stops = done_before + len(ends) >= k
        elif stopping == "first":
            stops = first and done_before + len(ends) >= nbest
        else:
            stops = False  # decided on the values below
        cont = None if stops else frozenset([(beam, token) for _, beam, token in top if token != EOS][:k])
        return ends, cont, first

    with torch.inference_mode():
        state = model.init_state(model.encode(src, mask), mask)
        state = state.reorder(torch.zeros(k, dtype=torch.long))  # k rows, as beam_search starts
        for t in range(max_len + 1):
            prev = torch.tensor([tokens[-1] if tokens else BOS for tokens, _ in beams])
            if t == 0:
                prev = prev.repeat(k)
            log_probs, state, _ = model.step(prev, state)
            log_probs = log_probs[: len(beams)].float().clone()
            log_probs[:, [PAD, BOS]] = float("-inf")
            if t == max_len:  # only EOS may follow
                log_probs[:, torch.arange(log_probs.size(1)) != EOS] = float("-inf")
            cumulative = torch.tensor([c for _, c in beams]).unsqueeze(1) + log_probs  # float32, as the search
            values, order = cumulative.flatten().sort(descending=True, stable=True)
            width = log_probs.size(1)
            ranked = [
                (v, i // width, i % width)
                for v, i in zip(values[: 2 * k + 1].tolist(), order[: 2 * k + 1].tolist())
                if v > -math.inf
            ]
            base = outcome(ranked, len(finished))
            for i in range(len(ranked)):
                for j in range(i + 1, len(ranked)):
                    swapped = list(ranked)
                    swapped[i], swapped[j] = swapped[j], swapped[i]
                    if outcome(swapped, len(finished)) != base:
                        (vi, bi, _), (vj, bj, _) = ranked[i], ranked[j]
                        margin = min(margin, (vi - vj) / unshared(beams[bi][0], beams[bj][0], t + 1))
            top = ranked[: 2 * k]
            for value, beam, token in top[:k]:
                if token == EOS:
                    finished.append((value / length_penalty_of(t + 1, length_penalty), beams[beam][0]))
            cont = [(value, beam, token) for value, beam, token in top if token != EOS][:k]
            if stopping == "exact":
                best_live = cont[0][0] if cont else -math.inf
                scores = sorted((s for s, _ in finished), reverse=True)
                nth = scores[nbest - 1] if len(scores) >= nbest else -math.inf
                bound = best_live / max(length_penalty_of(t + 2, length_penalty), lp_longest)
                if bound > -math.inf and nth > -math.inf:
                    margin = min(margin, abs(bound - nth) / (t + 1))
                done = bound <= nth
            elif stopping == "first":
                done = bool(top) and top[0][2] == EOS and len(finished) >= nbest
            else:
                done = len(finished) >= k
            if done or not cont or t == max_len:
                break
            state = state.reorder(torch.tensor([beam for _, beam, _ in cont]))
            beams = [(beams[beam][0] + (token,), value) for value, beam, token in cont]
    finished.sort(key=lambda f: -f[0])
    for (s1, h1), (s2, h2) in zip(finished[:nbest], finished[1 : nbest + 1]):
        margin = min(margin, (s1 - s2) / (max(len(h1), len(h2)) + 1))
    return margin


def diverged_at_near_ties(model, sources, found, expected, **search) -> set[int]:
    """The sentences whose hypotheses differ token for token between ``found`` and ``expected`` (per sentence,
    n-best lists of objects with ``tokens``); asserts that on ``model``, the search (options ``search``, as for
    ``search_margin``) meets a near-tie on each of them, and that they are a minority (a model so flat that most
    sentences meet one would make the comparison vacuous). Compare everything else on the other sentences."""
    diverged = set()
    for i, (src, hyps, refs) in enumerate(zip(sources, found, expected)):
        if [h.tokens for h in hyps] != [r.tokens for r in refs]:
            margin = search_margin(model, src, **search)
            assert margin <= NEAR_TIE, (
                f"sentence {i}: {[h.tokens for h in hyps]} != {[r.tokens for r in refs]}, and the search makes "
                f"no call closer than {margin:.2e} per log-prob there (a near-tie is <= {NEAR_TIE:.0e})"
            )
            diverged.add(i)
    assert len(diverged) < len(found) / 2, "most sentences part ways: the comparison would prove nothing"
    return diverged


def kill_after_first_chunk(command: list, work: Path, env: dict, what: str) -> int:
    """Start ``command`` (a chunked, resumable mtkit command), SIGKILL it once its work folder ``work`` holds its
    first finished chunk, and return how many chunks it had finished. Fails if it ended before it could be killed."""
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 120
    while not (work / "chunk-000000.tsv").is_file() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    alive = proc.poll() is None
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert alive, f"the {what} ended before it could be killed"
    return len(list(work.glob("chunk-*.tsv")))


def cli(*args) -> int:
    """``mtkit ARGS`` in this process; the exit code."""
    from mtkit.cli import main

    return main([str(a) for a in args])


def assert_one_line_error(result, *needles: str) -> str:
    """Exit 2 and one line on stderr (CTranslate2's own log lines aside), naming each needle; no traceback."""
    assert result.code == 2, (result.code, result.err)
    lines = [line for line in result.err.strip().splitlines() if "[ctranslate2]" not in line]
    assert len(lines) == 1 and lines[0].startswith("mtkit: error: ") and "Traceback" not in result.err, result.err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# ------------------------------------------------------------------------- a stand-in model for documents
def _upper_aligned(sentence: str):
    """A sentence "translated" by upper-casing each word, every unit (word or punctuation) aligned to itself."""
    import re

    from mtkit.text.markup import AlignedSentence

    units = tuple((m.start(), m.end()) for m in re.finditer(r"\w+|[^\w\s]", sentence))
    weights = tuple(tuple(1.0 if s == t else 0.0 for s in range(len(units))) for t in range(len(units)))
    return AlignedSentence(units, sentence.upper(), units, weights)


def upper_translate(texts: list, markup: str) -> list:
    """A document format's ``translate`` (mtkit.documents.formats) without a model: every word upper-cased, each
    text cut into sentences as the model's would be, tags carried across by the markup path."""
    from mtkit.text.sentences import split

    out = []
    for text in texts:
        if markup == "text":
            cut = split(text, "en")
            out.append(cut.join([s.upper() for s in cut.sentences]) if cut.sentences else "")
        else:
            out.append(translate_fragment(text, _upper_aligned))
    return out


def translate_fragment(fragment: str, align) -> str:
    """An HTML fragment through the markup path with ``align(sentence) -> AlignedSentence`` standing in for the
    model: each run cut into sentences, each sentence "translated" by ``align``, the runs rendered back."""
    from mtkit.text import markup as html
    from mtkit.text.sentences import split

    parts = []
    for part in html.runs(html.parse(fragment)):
        if isinstance(part, str):
            parts.append(part)
        elif not part.translatable:
            parts.append(part.source)
        else:
            cut = split(part.text, "en", line_breaks=False)
            parts.append(part.render(cut, [align(s) for s in cut.sentences]))
    return "".join(parts)
