"""``dtype: auto`` on an x86 CPU: int8 or float32, chosen by timing both on this machine.

What int8 buys over float32 is not a property of the instruction set: it differs between CPUs that have the same
one (docs/benchmarks.md, sections 2 and 17). So ``choose_cpu_dtype`` times the products a decoding step runs: every linear layer outside the encoder (the encoder
runs once per sentence, the decoder once per token) and the output projection, at ``ROWS`` rows (a beam-5 batch of
about 100 sentences), in float32 (``F.linear``) and in int8 (``Int8Linear``: the activations' quantization, the
integer product and the scaling back). int8 is chosen when those products run at least ``INT8_MIN_GAIN`` times
faster: it costs up to ~0.3 BLEU (docs/benchmarks.md), so it has to pay for itself.

The answer is cached per machine, torch build, thread count and model shapes in ``kernels.json`` under
``$MTKIT_CACHE_DIR`` (default ``$XDG_CACHE_HOME/mtkit``, else ``~/.cache/mtkit``), so a machine measures once;
``MTKIT_CACHE_DIR=off`` measures every time and writes nothing. A cache that cannot be read or written is ignored.
``MTKIT_AUTO_DTYPE=int8`` (or ``float32``) gives the answer without measuring: for a fleet that wants one answer
everywhere, or reproducible test runs.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import threading
import time
from pathlib import Path
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from mtkit.errors import MtkitError

ROWS = 512
INT8_MIN_GAIN = 1.2
REPEATS = 5
CACHE_FILE = "kernels.json"


@dataclasses.dataclass
class Choice:
    """What ``dtype: auto`` chose and why."""

    dtype: str  # "int8" or "float32"
    float32_ms: float  # one decoding step's products at ROWS rows, best of REPEATS
    int8_ms: float
    cached: bool  # read from the cache rather than measured now
    forced: bool = False  # given by MTKIT_AUTO_DTYPE

    @property
    def gain(self) -> float:
        """float32 time over int8 time."""
        return self.float32_ms / self.int8_ms if self.int8_ms > 0 else 0.0

    def reason(self) -> str:
        """One line for ``--verbose``."""
        if self.forced:
            return f"dtype auto -> {self.dtype}: set by MTKIT_AUTO_DTYPE, not measured"
        how = "cached measurement" if self.cached else "measured now"
        verdict = "at least" if self.dtype == "int8" else "less than"
        return (
            f"dtype auto -> {self.dtype}: a decoding step's products take {self.float32_ms:.2f} ms in float32 and "
            f"{self.int8_ms:.2f} ms in int8 at {ROWS} rows on this CPU ({self.gain:.2f}x, {verdict} the "
            f"{INT8_MIN_GAIN}x int8 must gain; {how})"
        )


def step_shapes(model: nn.Module) -> list[tuple[int, int, bool]]:
    """(in_features, out_features, has_bias) of each product a decoding step runs: the float model's linear layers
    outside the encoder, and a tied output projection (the embedding matrix), sorted."""
    shapes, weights = [], set()
    for name, module in model.named_modules():
        if type(module) is nn.Linear and not name.split(".")[0].startswith("encoder"):
            shapes.append((module.in_features, module.out_features, module.bias is not None))
            weights.add(module.weight.data_ptr())
    projection = getattr(model, "output_projection", None)
    if projection is not None:
        weight, bias = projection()
        if weight.data_ptr() not in weights:
            shapes.append((weight.size(1), weight.size(0), bias is not None))
    return sorted(shapes)


def _cpu_key() -> str:
    name, flags = "", ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and not name:
                name = value.strip()
            elif key.strip() in ("flags", "Features") and not flags:
                flags = value.strip()
    except OSError:
        pass
    name = name or platform.processor() or platform.machine()
    isa = hashlib.sha1(flags.encode()).hexdigest()[:12]
    return f"{name}|{isa}|{torch.backends.cpu.get_cpu_capability()}|{os.environ.get('ATEN_CPU_CAPABILITY', '')}"


def cache_key(shapes: list[tuple[int, int, bool]], threads: int) -> str:
    """Which answers can be shared: same CPU (model and flags), torch build and kernels, threads and shapes."""
    digest = hashlib.sha1(repr(shapes).encode()).hexdigest()[:12]
    return f"{_cpu_key()}|torch {torch.__version__}|{threads} threads|rows {ROWS}|shapes {digest}"


def cache_path() -> Optional[Path]:
    """Where the answers are kept, or None when ``MTKIT_CACHE_DIR=off``."""
    root = os.environ.get("MTKIT_CACHE_DIR")
    if root is not None and root.strip().lower() == "off":
        return None
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = str(Path(xdg) / "mtkit") if xdg else str(Path.home() / ".cache" / "mtkit")
    return Path(root) / CACHE_FILE


def _read_cache(path: Optional[Path]) -> dict:
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_cache(path: Optional[Path], key: str, entry: dict) -> None:
    if path is None:
        return
    data = _read_cache(path)
    data[key] = entry
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        # one file per process and thread: a server's model threads may load models at once
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
        os.replace(tmp, path)  # readers see the old file or the new one, never half of one
    except OSError:
        pass


def measure(shapes: list[tuple[int, int, bool]]) -> tuple[float, float]:
    """(float32 ms, int8 ms): one decoding step's products at ``ROWS`` rows, each the best of ``REPEATS``, the two
    kinds taking turns so that a busy moment hits both."""
    from mtkit.models.int8 import Int8Linear

    generator = torch.Generator().manual_seed(0)
    layers = []
    for d_in, d_out, bias in shapes:
        linear = nn.Linear(d_in, d_out, bias=bias)
        with torch.no_grad():
            linear.weight.copy_(torch.randn(d_out, d_in, generator=generator) * d_in**-0.5)
        layers.append((linear, Int8Linear(linear), torch.randn(ROWS, d_in, generator=generator)))

    def run_float() -> None:
        for linear, _, x in layers:
            F.linear(x, linear.weight, linear.bias)

    def run_int8() -> None:
        for _, int8, x in layers:
            int8(x)

    best = {"float32": float("inf"), "int8": float("inf")}
    with torch.inference_mode():
        run_float()  # warm-up: first calls set kernels up
        run_int8()
        for _ in range(REPEATS):
            for name, run in (("float32", run_float), ("int8", run_int8)):
                start = time.perf_counter()
                run()
                best[name] = min(best[name], time.perf_counter() - start)
    return best["float32"] * 1e3, best["int8"] * 1e3


def choose_cpu_dtype(model: nn.Module) -> Choice:
    """int8 or float32 for decoding ``model`` (float weights) on this CPU: cached, else measured and cached.

    Raises:
        MtkitError: ``MTKIT_AUTO_DTYPE`` is set to something else than int8 or float32.
    """
    forced = os.environ.get("MTKIT_AUTO_DTYPE", "").strip().lower()
    if forced:
        if forced not in ("int8", "float32"):
            raise MtkitError(f"MTKIT_AUTO_DTYPE must be int8 or float32 (or unset to measure), got {forced!r}")
        return Choice(forced, float("nan"), float("nan"), cached=False, forced=True)
    shapes = step_shapes(model)
    key, path = cache_key(shapes, torch.get_num_threads()), cache_path()
    entry = _read_cache(path).get(key)
    if isinstance(entry, dict) and entry.get("dtype") in ("int8", "float32"):
        try:
            return Choice(entry["dtype"], float(entry["float32_ms"]), float(entry["int8_ms"]), cached=True)
        except (KeyError, TypeError, ValueError):
            pass
    float_ms, int8_ms = measure(shapes)
    dtype = "int8" if float_ms >= INT8_MIN_GAIN * int8_ms else "float32"
    entry = {"dtype": dtype, "float32_ms": round(float_ms, 4), "int8_ms": round(int8_ms, 4)}
    _write_cache(path, key, {**entry, "measured": time.strftime("%Y-%m-%d")})
    return Choice(dtype, float_ms, int8_ms, cached=False)
