#!/usr/bin/env python
"""Load `mtkit serve` with test_2016_flickr, one sentence per request, and compare it with offline translation.

    python scripts/bench_serve.py runs/demo                        # 1, 8 and 64 clients, then 5 minutes at 64
    python scripts/bench_serve.py runs/demo --clients 1 8 --soak 0 --beam-size 4

In this process first (the model loaded through `mtkit.load`, as `mtkit translate` loads it): the offline
batched throughput (`translate` over the whole test set, as `mtkit translate` batches it) and the latency of
`translate([sentence])` for one sentence at a time. Then the model is released, `mtkit serve` starts in its own
process with the same beam and threads, and for each client count that many clients send the test set's
sentences one per `POST /v1/translate` (keep-alive connections, coroutines of one event loop), each taking the
next sentence when its answer arrives. Printed per load: sentences/s and its ratio to offline, p50/p95/p99
latency, errors (any answer but a 200 with one translation), answers equal to the offline translation, the mean
batch, the share of the time the model was translating and its seconds per sentence against offline (from the
server's /metrics), and the server's peak RSS. The soak runs the largest client count for `--soak` seconds over
the test set again and again and prints the server's RSS per minute, to show whether memory grows. The clients
run on the same machine and take some of its CPU.
"""

from __future__ import annotations

import argparse
import gzip
import os
import shlex
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from benchlib import RssSampler, batch_totals, describe, free_port, load, percentile, read_gz, start_server, stop_server

ROOT = Path(__file__).resolve().parent.parent


def offline(run: Path, sentences: list[str], beam: int, threads: int, lone: int) -> dict:
    """Batched and one-sentence translation in this process, through the model ``mtkit.load`` gives."""
    import mtkit

    model = mtkit.load(run, beam_size=beam, threads=threads, device="cpu")
    model.translate(sentences[:20])  # warm-up
    start = time.perf_counter()
    outputs = model.translate(sentences)
    batched = time.perf_counter() - start
    singles = []
    for sentence in sentences[:lone]:
        start = time.perf_counter()
        model.translate([sentence])
        singles.append(time.perf_counter() - start)
    return {"outputs": outputs, "seconds": batched, "singles": singles}


def cli_seconds(run: Path, source: Path, beam: int, threads: int) -> float:
    """Wall time of a whole `mtkit translate` process over the test set (start-up included)."""
    start = time.perf_counter()
    with gzip.open(source, "rb") as f:
        subprocess.run(
            [sys.executable, "-m", "mtkit", "translate", str(run), "--beam-size", str(beam), "--threads", str(threads)],
            input=f.read(),
            stdout=subprocess.DEVNULL,
            check=True,
        )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="run directory (or checkpoint) to serve")
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2, help="the model's threads, offline and in the server")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--soak", type=float, default=300, help="seconds at the largest client count (0: none)")
    parser.add_argument(
        "--lone", type=int, default=None, help="sentences timed one by one in-process (default: all, as 1 client sends)"
    )
    parser.add_argument("--server-arg", action="append", default=[], help="passed to mtkit serve (repeatable)")
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "multi30k")
    parser.add_argument("--split", default="test_2016_flickr")
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # this process's torch, and the processes it starts

    source = args.data / f"{args.split}.en.gz"
    sentences = read_gz(source)
    print(f"$ python {shlex.join(sys.argv)}")
    print(f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; {describe()}")
    print(f"{args.run}: {len(sentences)} sentences of {args.split}, beam {args.beam_size}, {args.threads} threads")

    base = offline(args.run, sentences, args.beam_size, args.threads, args.lone)
    offline_rate = len(sentences) / base["seconds"]
    lone_p50 = statistics.median(base["singles"]) * 1000
    process = cli_seconds(args.run, source, args.beam_size, args.threads)
    print(f"offline, in-process translate(all): {base['seconds']:.2f} s, {offline_rate:.1f} sentences/s")
    print(f"offline, whole `mtkit translate` process: {process:.2f} s, {len(sentences) / process:.1f} sentences/s")
    print(f"in-process translate([sentence]), {len(base['singles'])} sentences: p50 {lone_p50:.1f} ms")

    port = free_port()
    server = start_server([args.run], port, args.beam_size, args.threads, args.server_arg)
    rss = RssSampler(server.pid)
    rss.start()
    rows = []
    try:
        load(port, sentences[:20], 1)  # warm-up
        print(
            "\n| clients | sentences | sent/s | x offline | p50 ms | p95 ms | p99 ms | errors | = offline | mean batch | "
            "model busy | model s/sentence x offline | peak RSS MiB |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for clients in args.clients:
            began, before = time.monotonic(), batch_totals(port)
            result = load(port, sentences, clients)
            after = batch_totals(port)
            rows.append((clients, result))
            lat = [x * 1000 for x in result["latencies"]] or [float("nan")]
            same = sum(base["outputs"][i] == text for i, text in result["answers"].items())
            rate = result["done"] / result["wall"]
            busy = after[2] - before[2]
            print(
                f"| {clients} | {result['done']} | {rate:.1f} | {rate / offline_rate:.2f} | "
                f"{percentile(lat, 50):.1f} | {percentile(lat, 95):.1f} | {percentile(lat, 99):.1f} | "
                f"{len(result['errors'])} | {same} | {(after[0] - before[0]) / max(1, after[1] - before[1]):.1f} | "
                f"{busy / result['wall']:.0%} | {busy / max(1, result['done']) * offline_rate:.2f} | "
                f"{rss.peak(began):.0f} |",
                flush=True,
            )
            for error in result["errors"][:3]:
                print(f"  error: {error}")
        if args.soak > 0:
            clients = max(args.clients)
            began = time.monotonic()
            result = load(port, sentences, clients, seconds=args.soak)
            rate = result["done"] / result["wall"]
            lat = [x * 1000 for x in result["latencies"]] or [float("nan")]
            print(
                f"\nsoak: {clients} clients for {result['wall']:.0f} s: {result['done']} sentences, {rate:.1f} "
                f"sentences/s ({rate / offline_rate:.2f}x offline), p50 {percentile(lat, 50):.1f} ms, "
                f"p99 {percentile(lat, 99):.1f} ms, {len(result['errors'])} errors"
            )
            minutes = max(1, round(result["wall"] / 60))
            step = result["wall"] / minutes
            peaks = [rss.peak(began + m * step, began + (m + 1) * step) for m in range(minutes)]
            print("server RSS, peak per minute (MiB): " + ", ".join(f"{p:.0f}" for p in peaks))
            print(f"server RSS growth from the first minute to the last: {peaks[-1] - peaks[0]:+.0f} MiB")
    finally:
        rss.stopped.set()
        code = stop_server(server)
    print(f"\nserver stopped on SIGTERM with exit status {code}; peak RSS {rss.peak():.0f} MiB")
    by_clients = dict(rows)
    if 1 in by_clients and by_clients[1]["latencies"]:
        ratio = statistics.median(by_clients[1]["latencies"]) * 1000 / lone_p50
        print(f"1 client: p50 latency {ratio:.2f}x in-process translate([sentence])")
    if by_clients:
        most = max(by_clients)
        rate = by_clients[most]["done"] / by_clients[most]["wall"]
        print(f"{most} clients: {rate / offline_rate:.2f}x the offline batched throughput")


if __name__ == "__main__":
    main()
