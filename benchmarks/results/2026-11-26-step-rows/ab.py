"""Greedy decoding of test_2016_flickr in one process, several ways in turns, each with its speed and the lines it
changes against the first.

    python benchmarks/results/2026-11-26-step-rows/ab.py runs/bench-multi30k-transformer int8 8
        each batch on its own with every ended path dropped at once (the code before), batches joined up to
        step_rows, and both changes
    python benchmarks/results/2026-11-26-step-rows/ab.py runs/bench-multi30k-transformer int8 8 --bound
        each batch on its own, joined with no bound on the padding joining adds, and joined with the bound
"""

import io
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
from benchlib import describe, read_gz  # noqa: E402

import mtkit  # noqa: E402
from mtkit.decoding import single_path  # noqa: E402
from mtkit.inference import engine  # noqa: E402
from mtkit.inference.translate import translate_stream  # noqa: E402

run, dtype, turns = sys.argv[1], sys.argv[2], int(sys.argv[3])
sources = read_gz(Path("data/multi30k/test_2016_flickr.en.gz"))
model = mtkit.load(run, beam_size=1, threads=2, device="cpu", dtype=dtype)
base = model.engine.options
bound, share = engine.JOIN_PADDING, single_path.DROP_SHARE
if "--bound" in sys.argv:  # (step_rows, JOIN_PADDING, DROP_SHARE)
    ways = {
        "each batch on its own": (1, bound, share),
        "joined, no padding bound": (1000, float("inf"), share),
        f"joined, padding bound {bound}": (1000, bound, share),
    }
else:
    ways = {
        "before (step_rows 1, drop at once)": (1, bound, 0.0),
        "step_rows 1000": (1000, bound, 0.0),
        "both": (1000, bound, share),
    }


def translate(step_rows: int, limit: float, drop_share: float) -> tuple[float, list[str]]:
    model.engine.options = base.replace(step_rows=step_rows)
    engine.JOIN_PADDING, single_path.DROP_SHARE = limit, drop_share
    out = io.StringIO()
    start = time.perf_counter()
    translate_stream(model, sources, out)
    return time.perf_counter() - start, out.getvalue().splitlines()


translate(*next(iter(ways.values())))  # warm-up
seconds = {name: [] for name in ways}
lines = {}
for _ in range(turns):
    for name, way in ways.items():
        took, lines[name] = translate(*way)
        seconds[name].append(took)
print(f"{time.strftime('%Y-%m-%d %H:%M')}; {describe()}")
print(f"{run}: {len(sources)} sentences, greedy, {dtype}, {turns} turns, one process")
first = next(iter(ways))
for name in ways:
    ratio = statistics.median(a / b for a, b in zip(seconds[first], seconds[name]))
    differ = sum(a != b for a, b in zip(lines[first], lines[name]))
    print(
        f"{name:<36} median {len(sources) / statistics.median(seconds[name]):6.1f} sent/s, "
        f"{ratio:.3f}x the first (median of the turns' ratios), {differ} lines differ; "
        f"s: {' '.join(f'{s:.2f}' for s in seconds[name])}"
    )
