#!/usr/bin/env python
"""Where decoding time goes: translate a split with the torch engine and print the wall time of each part.

    python scripts/profile_decode.py runs/multi30k-transformer                 # beam 5, the run's options
    python scripts/profile_decode.py runs/multi30k-transformer --beam 1 --ops 25
    python scripts/profile_decode.py runs/multi30k-transformer --set stopping=first --set shortlist=50
    python scripts/profile_decode.py runs/multi30k-multilingual --target fr

The parts are timed by wrapping the functions ``mtkit translate`` calls (each part's own time, without the parts
it calls): source tokenization, the encoder, the decoder's layers per step, the Transformer state's per-step
bookkeeping (``encoder_side``), the output projection, the log-softmax, the beam reorders, the search's own
tensor ops and Python, the engine's batching and the output's detokenization. CPU tensor ops run synchronously,
so wall time is theirs. ``--ops N`` adds torch.profiler's N most expensive operators (self CPU time) over the
same run (``--shapes``: per operator and input shapes). Each report starts with the date and the CPU.
"""

from __future__ import annotations

import argparse
import collections
import functools
import io
import os
import time
from pathlib import Path

from benchlib import describe, read_gz

ROOT = Path(__file__).resolve().parent.parent


class Clock:
    """Self time per named part: time spent in a wrapped function minus the wrapped functions it called."""

    def __init__(self):
        self.own = collections.defaultdict(float)
        self.calls = collections.Counter()
        self._stack: list[list] = []  # [name, start, time in wrapped callees]

    def wrap(self, owner, attr: str, name: str) -> None:
        inner = getattr(owner, attr)

        @functools.wraps(inner)
        def timed(*args, **kwargs):
            self._stack.append([name, time.perf_counter(), 0.0])
            try:
                return inner(*args, **kwargs)
            finally:
                _, start, nested = self._stack.pop()
                spent = time.perf_counter() - start
                self.own[name] += spent - nested
                self.calls[name] += 1
                if self._stack:
                    self._stack[-1][2] += spent

        setattr(owner, attr, timed)


def parse_sets(items: list[str]) -> dict:
    out = {}
    for item in items:
        key, _, value = item.partition("=")
        if not _:
            raise SystemExit(f"--set takes KEY=VALUE, got {item!r}")
        out[key] = int(value) if value.lstrip("-").isdigit() else value
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="run dir or checkpoint (torch engine)")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--set", action="append", default=[], help="a decoding option of mtkit.load, KEY=VALUE")
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "multi30k")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--target", help="the target language of a multilingual run")
    parser.add_argument("--ops", type=int, default=0, help="also print torch.profiler's N costliest operators")
    parser.add_argument("--shapes", action="store_true", help="with --ops: one row per operator and input shapes")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

    import torch

    import mtkit
    from mtkit.decoding import search
    from mtkit.decoding import single_path as single_path_module
    from mtkit.inference.translate import translate_stream
    from mtkit.models import transformer

    sources = read_gz(args.data / f"{args.split}.en.gz")
    model = mtkit.load(
        args.run, beam_size=args.beam, threads=args.threads, device="cpu", dtype=args.dtype, **parse_sets(args.set)
    )
    engine = model.engine
    net = engine.model
    into = {"target": args.target} if args.target else {}
    translate_stream(model, sources[:20], io.StringIO(), **into)  # warm-up, untimed

    clock = Clock()
    clock.wrap(engine, "translate_ids", "engine: batching, padding")
    clock.wrap(engine, "encode", "tokenize sources")
    # beam search, and the decoder that greedy and sampling call by its module's name
    clock.wrap(search, "beam_search", "search: own ops and Python")
    clock.wrap(single_path_module, "single_path", "search: own ops and Python")
    clock.wrap(net, "encode", "encoder")
    clock.wrap(net, "init_state", "cross-attention keys/values")
    clock.wrap(net, "step", "log-softmax")
    clock.wrap(net, "step_features", "decoder layers")
    clock.wrap(net, "project", "output projection")
    clock.wrap(transformer.TransformerState, "encoder_side", "state: encoder_side")
    clock.wrap(transformer.TransformerState, "reorder", "state: reorder (beams)")

    start = time.perf_counter()
    if args.ops:
        with torch.profiler.profile(
            activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=args.shapes
        ) as prof:
            translate_stream(model, sources, io.StringIO(), **into)
    else:
        translate_stream(model, sources, io.StringIO(), **into)
    total = time.perf_counter() - start
    clock.own["detokenize, I/O, the rest"] = total - sum(clock.own.values())

    print(f"{time.strftime('%Y-%m-%d %H:%M')}; {describe()}")
    print(
        f"{args.run}: {len(sources)} sentences of {args.split}{f' into {args.target}' if args.target else ''}, "
        f"beam {args.beam}, {args.dtype}, "
        f"{args.threads} threads, options {engine.options}"
    )
    print(f"total {total:.2f} s ({len(sources) / total:.1f} sentences/s{', under the profiler' if args.ops else ''})")
    print(f"{'part':<32} {'seconds':>8} {'share':>6} {'calls':>7}")
    for name, seconds in sorted(clock.own.items(), key=lambda kv: -kv[1]):
        print(f"{name:<32} {seconds:>8.3f} {100 * seconds / total:>5.1f}% {clock.calls.get(name, 1):>7}")
    if args.ops:
        table = prof.key_averages(group_by_input_shape=args.shapes)
        print(table.table(sort_by="self_cpu_time_total", row_limit=args.ops, max_name_column_width=40))


if __name__ == "__main__":
    main()
