#!/usr/bin/env python
"""The per-step operations of beam search, each against what could replace it, at one beam-5 batch's size.

    python scripts/bench_decode_ops.py                  # 1,000 rows (200 sentences x 5 beams), demo model sizes
    python scripts/bench_decode_ops.py --vocab 32000 --d-model 512

Prints the best and median of N calls in microseconds for:
- each beam's top 2k tokens: ``topk`` over the vocabulary against ``row_topk`` (block maxima first);
- the int8 output projection's scaling: the mixed-dtype product against a cast, then in-place products;
- the self-attention cache at step t: ``cat`` of the new keys then ``index_select`` for the beams (the decoder
  before 2026-11-26) against a batch-major buffer written in place and reordered into another one (a strided
  copy), and the time-major cache the decoder keeps (``mtkit/models/decoder_state.py``), with the attention of one
  query over each layout;
- the activations' int8 scale: ``abs().amax()`` against ``aminmax``;
- the whole output layer of a step (int8 product, scaling, log-softmax, ``row_topk``) with its minor page faults
  and the process's RSS after: run once as is and once with ``MTKIT_MALLOC=default`` to see what
  ``mtkit/memory.py`` changes (a 32,000-subword vocabulary makes 128 MB logits);
and how many rows a beam reorder leaves in place is ``--moves RUN`` (it decodes 300 test sentences).
Each report starts with the date and the CPU.
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from pathlib import Path

from benchlib import describe


def timer(repeats: int):
    def run(name: str, fn) -> None:
        fn()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        times.sort()
        print(f"  {name:<58} best {times[0] * 1e6:9.1f} us   median {times[len(times) // 2] * 1e6:9.1f} us")

    return run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--d-model", type=int, default=128)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--step", type=int, default=20, help="target positions already in the cache")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--moves", help="a run dir: count the rows the beam reorders leave in place")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch

    from mtkit.decoding.strategy import row_topk
    from mtkit.memory import keep_freed_memory
    from mtkit.models import decoder_state
    from mtkit.models.int8 import Int8Linear, quantize_rows

    torch.set_num_threads(args.threads)
    keep_freed_memory()
    torch.manual_seed(0)
    rows, vocab, d, heads, t = args.rows, args.vocab, args.d_model, args.heads, args.step
    hd = d // heads
    run = timer(args.repeats)
    print(f"{time.strftime('%Y-%m-%d %H:%M')}; {describe()}")
    print(f"rows {rows}, vocabulary {vocab}, d_model {d}, heads {heads}, cache of {t} positions")

    log_probs = torch.randn(rows, vocab).log_softmax(dim=1)
    print("each beam's 10 best tokens")
    run("log_probs.topk(10, dim=1)", lambda: log_probs.topk(10, dim=1))
    run("row_topk(log_probs, 10)", lambda: row_topk(log_probs, 10))

    x = torch.randn(rows, d)
    layer = Int8Linear(torch.nn.Linear(d, vocab, bias=False))
    q, scale = quantize_rows(x)
    products = torch._int_mm(q, layer.qweight_t)
    print("the int8 output projection's scaling back to float32")
    run("(int32 * weight_scale).mul_(row_scale)", lambda: (products * layer.weight_scale).mul_(scale))
    run(
        "int32.float().mul_(weight_scale).mul_(row_scale)",
        lambda: products.float().mul_(layer.weight_scale).mul_(scale),
    )
    run("_int_mm itself, for scale", lambda: torch._int_mm(q, layer.qweight_t))

    parents = torch.randint(0, rows, (rows,))
    cache = torch.randn(rows, heads, t, hd)
    new = torch.randn(rows, 1, 3 * d)[..., d : 2 * d].view(rows, 1, heads, hd).transpose(1, 2)  # a view, as decoded
    capacity = 2 * t
    buffer, other = torch.randn(rows, heads, capacity, hd), torch.empty(rows, heads, capacity, hd)
    print("the self-attention keys at one step (values cost the same again)")
    run("cat([cache, new], dim=2)  (the decoder before)", lambda: torch.cat([cache, new], dim=2))
    grown = torch.cat([cache, new], dim=2)
    run("index_select(0, parents) of the grown cache  (its reorder)", lambda: grown.index_select(0, parents))
    run("buffer[:, :, t] = new  (in place)", lambda: buffer[:, :, t : t + 1].copy_(new))

    def strided_reorder():
        torch.index_select(buffer[:, :, : t + 1], 0, parents, out=other[:, :, : t + 1])

    run("index_select of buffer[:, :, :t+1] into another buffer", strided_reorder)
    run("index_select of the whole buffer (capacity 2t)", lambda: torch.index_select(buffer, 0, parents, out=other))
    time_major = torch.randn(capacity, rows, d)
    run("time-major: write position t in place  (the decoder)", lambda: decoder_state.write(time_major, t, new))
    run(
        "time-major: t+1 positions into a new buffer  (its reorder)",
        lambda: decoder_state.reorder(time_major, t + 1, parents),
    )
    query = torch.randn(rows, heads, 1, hd)

    def attention(keys):
        return (query @ keys.transpose(-1, -2)).softmax(dim=-1) @ keys

    print("one query's attention over t+1 cached positions (keys standing in for the values)")
    run("over the grown cache (contiguous)", lambda: attention(grown))
    run("over buffer[:, :, :t+1] (batch-major, strided)", lambda: attention(buffer[:, :, : t + 1]))
    run("over the time-major cache's view  (the decoder)", lambda: attention(decoder_state.write(time_major, t, new)))

    acts = torch.randn(rows, d)
    print("an activation row's int8 scale")
    run("x.abs().amax(dim=1)", lambda: acts.abs().amax(dim=1, keepdim=True))
    run("torch.aminmax(x, dim=1)", lambda: torch.aminmax(acts, dim=1, keepdim=True))

    def output_step():
        row_topk(layer(x).log_softmax(dim=-1), 10)

    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    tuned = "glibc's defaults (MTKIT_MALLOC=default)" if not keep_freed_memory() else "freed memory kept"
    print(f"the output layer's whole step, {tuned}")
    run("int8 product, scaling, log_softmax, row_topk", output_step)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / (args.repeats + 1)
    rss = int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") >> 20
    print(f"  {faults:.0f} minor page faults per step; RSS after {rss} MiB")

    if args.moves:
        count_moves(args.moves)


def count_moves(run_dir: str) -> None:
    """Decode 300 test sentences with beam 5 and count the reorder rows whose parent is the row itself."""
    import io

    import torch
    from benchlib import read_gz

    import mtkit
    from mtkit.inference.translate import translate_stream
    from mtkit.models import decoder_state

    counts = {"rows": 0, "in_place": 0}
    reorder = decoder_state.TransformerState.reorder

    def counting(state, index):
        if state.step > 0 and index.numel() == state.row_source.numel():  # a step, not a shrink or the first copies
            counts["rows"] += index.numel()
            counts["in_place"] += int(index.eq(torch.arange(index.numel())).sum())
        return reorder(state, index)

    decoder_state.TransformerState.reorder = counting
    root = Path(__file__).resolve().parent.parent
    sources = read_gz(root / "data" / "multi30k" / "test_2016_flickr.en.gz")[:300]
    translate_stream(mtkit.load(run_dir, beam_size=5), sources, io.StringIO())
    share = counts["in_place"] / max(counts["rows"], 1)
    print(f"beam reorders over 300 test sentences of {run_dir}: {counts['rows']} rows, {share:.1%} left in place")


if __name__ == "__main__":
    main()
