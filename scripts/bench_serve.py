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
import asyncio
import gzip
import json
import os
import shlex
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

from benchlib import describe, read_gz

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


class RssSampler(threading.Thread):
    """The resident set size of process ``pid`` (MiB), sampled every ``every`` seconds."""

    def __init__(self, pid: int, every: float = 0.25):
        super().__init__(daemon=True)
        self.path, self.every = Path(f"/proc/{pid}/status"), every
        self.samples: list[tuple[float, float]] = []  # (monotonic time, MiB)
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                for line in self.path.read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        self.samples.append((time.monotonic(), int(line.split()[1]) / 1024))
            except OSError:
                return
            self.stopped.wait(self.every)

    def peak(self, since: float = 0.0, until: float = float("inf")) -> float:
        return max((mib for t, mib in self.samples if since <= t <= until), default=float("nan"))


def load(port: int, sentences: list[str], clients: int, seconds: float | None = None) -> dict:
    """``clients`` keep-alive connections send ``sentences`` one per request (each once, or round and round for
    ``seconds``), each sending the next sentence when its answer has come. The clients are coroutines of one event
    loop writing HTTP/1.1 by hand, not a thread each: on a 2-core machine the clients share the server's CPU."""
    return asyncio.run(_load(port, sentences, clients, seconds))


async def _load(port: int, sentences: list[str], clients: int, seconds: float | None) -> dict:
    position = 0
    latencies: list[float] = []
    answers: dict[int, str] = {}
    errors: list[str] = []
    deadline = None if seconds is None else time.monotonic() + seconds

    def next_index() -> int | None:
        nonlocal position
        if deadline is None and position >= len(sentences):
            return None
        if deadline is not None and time.monotonic() >= deadline:
            return None
        position += 1
        return (position - 1) % len(sentences)

    async def exchange(reader, writer, body: bytes) -> tuple[int, bytes]:
        writer.write(
            b"POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        length = next(int(x.split(":", 1)[1]) for x in lines[1:] if x.lower().startswith("content-length:"))
        return status, await reader.readexactly(length)

    async def client() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while (i := next_index()) is not None:
            body = json.dumps({"text": sentences[i]}).encode()
            start = time.perf_counter()
            try:
                status, payload = await asyncio.wait_for(exchange(reader, writer, body), 120)
                elapsed = time.perf_counter() - start
                translations = json.loads(payload).get("translations") if status == 200 else None
                if status != 200 or not isinstance(translations, list) or len(translations) != 1:
                    raise ValueError(f"status {status}: {payload[:200]!r}")
            except (OSError, ValueError, StopIteration, asyncio.IncompleteReadError, asyncio.TimeoutError) as err:
                errors.append(f"{type(err).__name__}: {err}")
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                continue
            latencies.append(elapsed)
            answers[i] = translations[0]["text"]
        writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    wall = time.perf_counter() - start
    return {"wall": wall, "latencies": latencies, "answers": answers, "errors": errors, "done": len(latencies)}


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


def batch_totals(port: int) -> tuple[float, float, float]:
    """(sentences, batches, seconds the model was busy) of the server so far, from its /metrics."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    values = dict(line.rsplit(" ", 1) for line in text.splitlines() if line.startswith("mtkit_"))
    names = ("mtkit_batch_sentences_sum", "mtkit_batch_sentences_count", "mtkit_model_busy_seconds")
    return tuple(float(values.get(name, 0)) for name in names)  # type: ignore[return-value]


def start_server(run: Path, port: int, beam: int, threads: int, extra: list[str]) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "mtkit", "serve", str(run), "--port", str(port), "--beam-size", str(beam)]
    cmd += ["--threads", str(threads), *extra]
    server = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"mtkit serve exited with {server.returncode}: {server.stderr.read()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as response:
                if response.status == 200:
                    return server
        except OSError:
            time.sleep(0.2)
    server.kill()
    raise SystemExit("mtkit serve did not answer /health within 120 s")


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
    server = start_server(args.run, port, args.beam_size, args.threads, args.server_arg)
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
        server.send_signal(signal.SIGTERM)
        try:
            code = server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
            code = "killed after 60 s"
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
