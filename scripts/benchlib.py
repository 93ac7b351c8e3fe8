"""What the scripts in this folder share: the line saying which machine a benchmark ran on (the CPU's model name,
its widest vector extension, the kernels PyTorch picked and the threads used), reading the shipped splits, and
loading an `mtkit serve` process with clients (scripts/bench_serve.py, scripts/bench_serve_models.py): starting it,
sampling its memory, reading its /metrics, sending it requests from many clients."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Sequence, Union


def read_gz(path: Path) -> list[str]:
    """The lines of a gzipped UTF-8 text file (e.g. data/multi30k/test_2016_flickr.en.gz)."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def add_split_options(parser) -> None:
    """The options of a script that translates one shipped English -> German split: its folder, name and length."""
    parser.add_argument("--limit", type=int, default=None, help="only the first N sentences")
    parser.add_argument("--data", type=Path, default=None, help="folder holding SPLIT.en.gz and SPLIT.de.gz")
    parser.add_argument("--split", default="test_2016_flickr")


def read_split(args) -> tuple[list[str], list[str]]:
    """The sources and references ``add_split_options``' options name (data/multi30k by default)."""
    data = args.data or Path(__file__).resolve().parent.parent / "data" / "multi30k"
    return read_gz(data / f"{args.split}.en.gz")[: args.limit], read_gz(data / f"{args.split}.de.gz")[: args.limit]


def sets(overrides: list[str]) -> list[str]:
    """``--set`` flags for each ``KEY=VALUE`` override."""
    return [x for o in overrides for x in ("--set", o)]


IN_PROCESS = False  # mtkit_timed runs each command in this process (a script's --in-process)


def mtkit_timed(args: list, cwd: Union[Path, None] = None) -> tuple[str, int, float]:
    """``mtkit ARGS`` in a process of its own, its command line printed first: (that line, exit status, seconds).

    With ``IN_PROCESS``, the command runs in this process instead (``mtkit.cli.main``, in ``cwd``): its seconds
    then leave out a process's start-up (about 2 s of imports on 2 cores), which the published figures include;
    the scripts' tests use it to check what the scripts compute without paying a start-up per command."""
    line = "mtkit " + " ".join(shlex.quote(str(a)) for a in args)
    print(f"$ {line}", flush=True)
    start = time.perf_counter()
    if IN_PROCESS:
        import os

        from mtkit.cli import main as mtkit_main

        before = os.getcwd()
        os.chdir(cwd or before)
        try:
            code = mtkit_main([str(a) for a in args])
        finally:
            os.chdir(before)
        sys.stdout.flush()
    else:
        code = subprocess.run([sys.executable, "-m", "mtkit", *map(str, args)], cwd=cwd).returncode
    return line, code, time.perf_counter() - start


def cpu_name_and_flags() -> tuple[str, set[str]]:
    name, flags = "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and name == "unknown CPU":
                name = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return name, flags


def describe() -> str:
    """e.g. ``AMD EPYC, AVX-512, 2 cores; torch kernels avx512, 2 thread(s)``."""
    import os

    import torch

    name, flags = cpu_name_and_flags()
    vector = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2" if flags else "?"
    return (
        f"{name}, {vector}, {os.cpu_count()} cores; torch kernels {torch.backends.cpu.get_cpu_capability()}, "
        f"{torch.get_num_threads()} thread(s)"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values) or [float("nan")]
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

    def now(self) -> float:
        """The resident set size now (MiB), read at once."""
        for line in self.path.read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")


def start_server(
    runs: Sequence[Union[Path, str]], port: int, beam: int, threads: int, extra: Sequence[str] = ()
) -> subprocess.Popen:
    """``mtkit serve RUNS...`` in a process of its own, once it answers /health (``extra``: more of its options)."""
    cmd = [sys.executable, "-m", "mtkit", "serve", *map(str, runs), "--port", str(port), "--beam-size", str(beam)]
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


def stop_server(server: subprocess.Popen) -> Union[int, str]:
    """SIGTERM, then the exit status (or what happened when it did not end within 60 s)."""
    server.terminate()
    try:
        return server.wait(60)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
        return "killed after 60 s"


_SERIES = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$")


def server_metrics(port: int) -> dict[str, float]:
    """The server's /metrics: each series by its full name (``mtkit_model_loads_total{model="demo"}``) and each
    metric's total over its labels by its bare name (``mtkit_model_loads_total``)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for line in text.splitlines():
        match = _SERIES.match(line)
        if match is None:
            continue
        name, labels, value = match.groups()
        values[name + (labels or "")] = float(value)
        if labels:
            values[name] = values.get(name, 0.0) + float(value)
    return values


def batch_totals(port: int) -> tuple[float, float, float]:
    """(sentences, batches, seconds the models were busy) of the server so far, all models together."""
    values = server_metrics(port)
    names = ("mtkit_batch_sentences_sum", "mtkit_batch_sentences_count", "mtkit_model_busy_seconds")
    return tuple(values.get(name, 0.0) for name in names)  # type: ignore[return-value]


Request = Union[str, dict]  # a sentence (sent as {"text": ...}) or a whole /v1/translate body


def load(port: int, requests: Sequence[Request], clients: int, seconds: float | None = None) -> dict:
    """``clients`` keep-alive connections send ``requests`` to ``POST /v1/translate``, one sentence each (each once,
    or round and round for ``seconds``), each client sending the next request when its answer has come. The clients
    are coroutines of one event loop writing HTTP/1.1 by hand, not a thread each: on a 2-core machine the clients
    share the server's CPU.

    Returns:
        ``wall`` seconds; ``latencies`` (seconds, in the order the answers came) and ``timed`` ((request index,
        seconds) for each); ``answers`` and ``detected`` (each request's translation and detected language, by
        index); ``errors`` (any answer but a 200 with one translation); ``done`` (requests answered).
    """
    return asyncio.run(_load(port, requests, clients, seconds))


async def _load(port: int, requests: Sequence[Request], clients: int, seconds: float | None) -> dict:
    position = 0
    timed: list[tuple[int, float]] = []
    answers: dict[int, str] = {}
    detected: dict[int, str] = {}
    errors: list[str] = []
    deadline = None if seconds is None else time.monotonic() + seconds
    bodies = [json.dumps({"text": r} if isinstance(r, str) else r).encode() for r in requests]

    def next_index() -> int | None:
        nonlocal position
        if deadline is None and position >= len(bodies):
            return None
        if deadline is not None and time.monotonic() >= deadline:
            return None
        position += 1
        return (position - 1) % len(bodies)

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
            start = time.perf_counter()
            try:
                status, payload = await asyncio.wait_for(exchange(reader, writer, bodies[i]), 120)
                elapsed = time.perf_counter() - start
                translations = json.loads(payload).get("translations") if status == 200 else None
                if status != 200 or not isinstance(translations, list) or len(translations) != 1:
                    raise ValueError(f"status {status}: {payload[:200]!r}")
            except (OSError, ValueError, StopIteration, asyncio.IncompleteReadError, asyncio.TimeoutError) as err:
                errors.append(f"{type(err).__name__}: {err}")
                writer.close()
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                continue
            timed.append((i, elapsed))
            answers[i] = translations[0]["text"]
            if translations[0].get("detected_language"):
                detected[i] = translations[0]["detected_language"]["language"]
        writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    wall = time.perf_counter() - start
    return {
        "wall": wall,
        "latencies": [t for _, t in timed],
        "timed": timed,
        "answers": answers,
        "detected": detected,
        "errors": errors,
        "done": len(timed),
    }


CHROMIUM = "/usr/bin/chromium"  # the system's (Debian's chromium package); Playwright's own browsers are not used
BROWSER_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


@contextlib.contextmanager
def own_origin_page(site: Path, query: str = ""):
    """An exported web site (``mtkit export --format web``) served as ``mtkit serve --web`` serves it and opened in
    headless Chromium, every request off its origin refused and noted, the model loaded: yields (the page, its
    origin, the off-origin URLs asked for so far, the headers of the page's own response)."""
    from playwright.sync_api import sync_playwright

    from mtkit.serving.web_site import make_server

    server = make_server(site, "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    origin = f"http://127.0.0.1:{server.server_address[1]}"
    off_origin: list[str] = []

    def only_own_origin(route):
        if route.request.url.startswith(origin + "/"):
            route.continue_()
        else:
            off_origin.append(route.request.url)
            route.abort()

    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
            try:
                context = browser.new_context()
                context.route("**/*", only_own_origin)
                page = context.new_page()
                first = page.goto(f"{origin}/{query}")
                page.evaluate("window.mtkit.ready")
                yield page, origin, off_origin, first.headers
            finally:
                browser.close()
    finally:
        server.shutdown()
        server.server_close()
