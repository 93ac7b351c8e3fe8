#!/usr/bin/env python
"""Load one `mtkit serve` holding several models: two directions mixed, source detection, memory per model.

    python scripts/bench_serve_models.py runs/demo runs/demo-de-en --third runs/ml-decoder   # all, 5-minute soak
    python scripts/bench_serve_models.py runs/demo runs/demo-de-en --clients 1 8 --soak 0 --memory-rounds 1
    python scripts/bench_serve_models.py work/ct2/demo work/ct2/demo-de-en --parallel-models 2 --clients 64 --soak 0

runs/demo is `make demo`'s model; runs/demo-de-en the same recipe the other way (prepare and train
configs/multi30k-demo.yaml with `--set data.src_lang=de --set data.tgt_lang=en`, the splits' src and tgt paths
swapped, `--set data.dir=work/multi30k-deen --set training.run_dir=runs/demo-de-en`); work/ct2/NAME their
CTranslate2 exports (`mtkit export runs/NAME --output work/ct2/NAME`).

The two runs serve opposite directions (English->German and German->English); each sends the test split of its
source language (test_2016_flickr), and the requests interleave the two: one sentence per `POST /v1/translate`
with `source` and `target` set, the n-th request in one direction and the next in the other.

1. Offline, in this process: both models loaded (through `mtkit.load`, as `mtkit translate` loads them), each
   translating its half as `mtkit translate` batches it; the mix's sentences/s is both halves over both times.
   With `--parallel-models N` (the server's option) also the two models at once, each on a thread of its own
   with threads / N threads, and the server's ratios are to the faster of the two offline figures.
2. The detector alone, in this process: the server's per-text detection (`source: "auto"`) over the val
   sentences of en, de, fr and cs, one at a time, among the two runs' sources and among all four: p50 and mean
   microseconds per sentence, and how many it identifies right.
3. One server with both models (`--preload`): for each client count, that many clients send the mixed requests.
   Printed per load: sentences/s and its ratio to the offline mix, p50/p95/p99 latency (all, and per
   direction), errors (any answer but a 200 with one translation), answers equal to offline, the mean batch and
   the share of the time the models were translating (/metrics; the models' seconds together, so up to N x 100%
   with `--parallel-models N`), and the server's peak RSS. Then the same with
   `source: "auto"` at the largest client count (what detection costs under load), and at 1 client each sentence
   sent twice in a row, once with its source and once with `auto`: p50 of each and the median of the per-sentence
   difference (the latency detection adds), and the detected languages right.
4. Memory: servers with 1, 2 (and with `--third` 3) models, each with `--max-models` all of them and 1
   (`--preload`): the RSS after start and after each direction has translated 64 sentences, `--memory-rounds`
   times round the directions, with the models resident, loaded and unloaded (/metrics).
5. A soak: both models with `--max-models 1` and the two directions interleaved at the largest client count for
   `--soak` seconds (models evicted and reloaded): sentences/s, p50/p99, errors, loads and unloads, and the
   server's RSS per minute.

The clients run on the same machine and take some of its CPU. A third run serving a pair the two serve already
(runs/ml-decoder translates en into de, fr and cs) is served for its other directions only (a models file).
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from benchlib import (
    RssSampler,
    batch_totals,
    describe,
    free_port,
    load,
    percentile,
    read_gz,
    server_metrics,
    start_server,
    stop_server,
)

ROOT = Path(__file__).resolve().parent.parent


class Side:
    """One direction of the mix: the model that serves it and the sentences sent to it."""

    def __init__(self, run: Path, pair: tuple[str, str], sentences: list[str], name: str):
        self.run, self.pair, self.sentences, self.name = run, pair, sentences, name
        self.label = "-".join(pair)
        self.outputs: list[str] = []  # offline translations


def spec_of(run: Path):
    from mtkit.serving.models import model_spec

    return model_spec(run)


def mixed(sides: list[Side], auto: bool = False) -> tuple[list[dict], list[tuple[int, int]]]:
    """The requests, the sides' sentences interleaved, and for each (side, sentence index)."""
    requests, where = [], []
    for i in range(max(len(side.sentences) for side in sides)):
        for k, side in enumerate(sides):
            if i < len(side.sentences):
                source, target = side.pair
                requests.append({"text": side.sentences[i], "source": "auto" if auto else source, "target": target})
                where.append((k, i))
    return requests, where


def offline_mix(sides: list[Side], beam: int, threads: int) -> float:
    """Both models loaded in this process, each translating its sentences at once; returns the seconds of both."""
    models = loaded(sides, beam, threads)
    total = 0.0
    for model, side in zip(models, sides):
        start = time.perf_counter()
        side.outputs = model.translate(side.sentences)
        seconds = time.perf_counter() - start
        total += seconds
        rate = len(side.sentences) / seconds
        print(f"offline {side.label} ({side.run}): {len(side.sentences)} sentences, {seconds:.2f} s, {rate:.1f} sent/s")
    del models
    return total


def loaded(sides: list[Side], beam: int, threads: int) -> list:
    """Each side's model (``mtkit.load`` as ``mtkit translate`` loads it), warmed up."""
    import mtkit

    models = []
    for side in sides:
        start = time.perf_counter()
        models.append(mtkit.load(side.run, beam_size=beam, threads=threads, device="cpu"))
        print(f"mtkit.load({side.run}, threads={threads}): {time.perf_counter() - start:.2f} s")
    for model, side in zip(models, sides):
        model.translate(side.sentences[:20])  # warm-up
    return models


def offline_parallel(sides: list[Side], beam: int, threads: int) -> float:
    """Both models loaded with ``threads`` threads each, translating their sentences at once on a thread each (as
    ``mtkit serve --parallel-models`` runs them); returns the wall seconds."""
    models = loaded(sides, beam, threads)
    workers = [threading.Thread(target=model.translate, args=(side.sentences,)) for model, side in zip(models, sides)]
    start = time.perf_counter()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return time.perf_counter() - start


def detector_alone(data: Path, split: str, sources: tuple[str, ...], langs: list[str]) -> dict:
    """The server's source detection per sentence, in this process: for each candidate set, the median of
    the detected-right share, p50 and mean microseconds."""
    from mtkit.serving.detection import Detection

    texts = {lang: read_gz(data / f"{split}.{lang}.gz") for lang in langs}
    print(f"\ndetector alone (the server's per-text detection), {split} sentences, one at a time:")
    print("| candidates | sentences | right | " + " | ".join(langs) + " | p50 µs | mean µs | p99 µs |")
    print("|---|---:|---:|" + "---:|" * len(langs) + "---:|---:|---:|")
    found = {}
    for candidates in (sources, tuple(langs)):
        detection = Detection(candidates)
        detection.detect("warm up")
        times, right, per = [], 0, {}
        for lang, sentences in texts.items():
            hits = 0
            for sentence in sentences:
                start = time.perf_counter()
                best = detection.detect(sentence)[0]["language"]
                times.append(time.perf_counter() - start)
                hits += best == lang
            per[lang] = hits
            right += hits if lang in candidates else 0
        among = sum(len(s) for lang, s in texts.items() if lang in candidates)
        micro = [t * 1e6 for t in times]
        found[candidates] = (percentile(micro, 50), statistics.fmean(micro))
        print(
            f"| {', '.join(candidates)} | {len(times)} | {right}/{among} | "
            + " | ".join(f"{per[lang]}/{len(texts[lang])}" for lang in langs)
            + f" | {percentile(micro, 50):.0f} | {statistics.fmean(micro):.0f} | {percentile(micro, 99):.0f} |"
        )
    print("(right: among the sentences of the candidate languages; a language outside the candidates is never right)")
    return found


def of_model(values: dict, metric: str, name: str) -> float:
    """A per-model series of the server's /metrics."""
    return values.get(f'{metric}{{model="{name}"}}', 0.0)


def ms(values) -> list[float]:
    return [x * 1000 for x in values] or [float("nan")]


def mixed_table_head() -> None:
    print(
        "\n| clients | source | requests | sent/s | x offline | p50 ms | p95 ms | p99 ms | p50 ms by direction | "
        "errors | = offline | mean batch | models busy | peak RSS MiB |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|")


def mixed_row(port, rss, sides, where, requests, clients, offline_rate, source) -> dict:
    began, before = time.monotonic(), batch_totals(port)
    result = load(port, requests, clients)
    after = batch_totals(port)
    lat = ms(result["latencies"])
    rate = result["done"] / result["wall"]
    same = sum(sides[where[i][0]].outputs[where[i][1]] == text for i, text in result["answers"].items())
    by_side = [ms(t for i, t in result["timed"] if where[i][0] == k) for k in range(len(sides))]
    busy = after[2] - before[2]
    print(
        f"| {clients} | {source} | {result['done']} | {rate:.1f} | {rate / offline_rate:.2f} | "
        f"{percentile(lat, 50):.1f} | {percentile(lat, 95):.1f} | {percentile(lat, 99):.1f} | "
        + " / ".join(f"{side.label} {percentile(b, 50):.1f}" for side, b in zip(sides, by_side))
        + f" | {len(result['errors'])} | {same} | {(after[0] - before[0]) / max(1, after[1] - before[1]):.1f} | "
        f"{busy / result['wall']:.0%} | {rss.peak(began):.0f} |",
        flush=True,
    )
    for error in result["errors"][:3]:
        print(f"  error: {error}")
    result["rate"] = rate
    return result


def detection_cost(port: int, sides: list[Side], per_side: int) -> None:
    """At 1 client, each sentence sent with its source and then with ``auto``: the latency detection adds."""
    pairs = []
    subsets = [Side(s.run, s.pair, s.sentences[:per_side], s.name) for s in sides]
    explicit, where = mixed(subsets)
    auto, _ = mixed(subsets, auto=True)
    requests = [r for pair in zip(explicit, auto) for r in pair]
    result = load(port, requests, 1)
    timed = dict(result["timed"])
    for j in range(len(explicit)):
        if 2 * j in timed and 2 * j + 1 in timed:
            pairs.append((timed[2 * j], timed[2 * j + 1]))
    given, detected = ms(p[0] for p in pairs), ms(p[1] for p in pairs)
    added = [(a - g) * 1000 for g, a in pairs]
    right = sum(result["detected"].get(2 * j + 1) == sides[k].pair[0] for j, (k, _) in enumerate(where))
    same = sum(result["answers"].get(2 * j) == result["answers"].get(2 * j + 1) for j in range(len(explicit)))
    print(
        f"\n1 client, {len(explicit)} sentences ({per_side} per direction) each sent with its source, then with "
        f"source auto: p50 {percentile(given, 50):.2f} ms given, {percentile(detected, 50):.2f} ms auto "
        f"(mean {statistics.fmean(given):.2f} / {statistics.fmean(detected):.2f} ms); "
        f"auto - given per sentence: p50 {percentile(added, 50) * 1000:.0f} µs, "
        f"mean {statistics.fmean(added) * 1000:.0f} µs; detected right {right}/{len(explicit)}, "
        f"the same answer {same}/{len(explicit)}, {len(result['errors'])} errors"
    )
    for error in result["errors"][:3]:
        print(f"  error: {error}")


def models_file(third: Path, pairs: list[tuple[str, str]], folder: Path) -> Path:
    """A models file serving ``third`` for ``pairs`` only."""
    path = folder / "third.yaml"
    langs = ", ".join("-".join(p) for p in pairs)
    path.write_text(f"- path: {third.resolve()}\n  name: {third.name}\n  languages: [{langs}]\n", encoding="utf-8")
    return path


def settled(rss: RssSampler, seconds: float = 1.0) -> float:
    time.sleep(seconds)
    return rss.now()


def memory(runs: list, extra: list[str], directions: list[tuple[tuple[str, str], list[str]]], args, label: str):
    """A server of ``runs``: its RSS after start and after each direction's sentences, round and round."""
    port = free_port()
    server = start_server(runs, port, args.beam_size, args.threads, ["--preload", *extra, *args.server_arg])
    rss = RssSampler(server.pid)
    rss.start()
    try:
        at_start = settled(rss)
        after = []
        for _ in range(args.memory_rounds):
            for (source, target), sentences in directions:
                requests = [{"text": s, "source": source, "target": target} for s in sentences]
                result = load(port, requests, 8)
                if result["errors"]:
                    print(f"  {label}: {source}-{target}: {len(result['errors'])} errors: {result['errors'][0]}")
                after.append(settled(rss))
        values = server_metrics(port)
    finally:
        rss.stopped.set()
        code = stop_server(server)
    print(
        f"| {label} | {values.get('mtkit_models_resident', float('nan')):.0f} | "
        f"{values.get('mtkit_model_loads_total', 0):.0f} | {values.get('mtkit_model_unloads_total', 0):.0f} | "
        f"{at_start:.0f} | " + ", ".join(f"{x:.0f}" for x in after) + f" | {rss.peak():.0f} | {code} |",
        flush=True,
    )


class MetricsPoll(threading.Thread):
    """The server's model loads and unloads (all models), read every ``every`` seconds."""

    def __init__(self, port: int, every: float = 5.0):
        super().__init__(daemon=True)
        self.port, self.every = port, every
        self.samples: list[tuple[float, float, float]] = []  # (monotonic time, loads, unloads)
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            self.read()

    def read(self) -> None:
        values = server_metrics(self.port)
        self.samples.append(
            (time.monotonic(), values.get("mtkit_model_loads_total", 0), values.get("mtkit_model_unloads_total", 0))
        )

    def at(self, t: float) -> tuple[float, float]:
        """(loads, unloads) at the last reading before ``t``."""
        before = [s for s in self.samples if s[0] <= t] or self.samples[:1]
        return before[-1][1:] if before else (0.0, 0.0)


def soak(sides: list[Side], args, clients: int, offline_rate: float) -> None:
    requests, where = mixed(sides)
    port = free_port()
    runs = [side.run for side in sides]
    server = start_server(runs, port, args.beam_size, args.threads, ["--max-models", "1", *args.server_arg])
    rss = RssSampler(server.pid)
    rss.start()
    poll = MetricsPoll(port)
    try:
        load(port, requests[:40], 1)  # each model loaded once
        poll.read()
        poll.start()
        began = time.monotonic()
        result = load(port, requests, clients, seconds=args.soak)
        poll.stopped.set()
        poll.read()
        values = server_metrics(port)
    finally:
        rss.stopped.set()
        poll.stopped.set()
        code = stop_server(server)
    rate = result["done"] / result["wall"]
    lat = ms(result["latencies"])
    same = sum(sides[where[i][0]].outputs[where[i][1]] == text for i, text in result["answers"].items())
    loads = poll.samples[-1][1] - poll.at(began)[0]
    unloads = poll.samples[-1][2] - poll.at(began)[1]
    print(
        f"\nsoak, {len(sides)} models with --max-models 1, the directions interleaved: {clients} clients for "
        f"{result['wall']:.0f} s: {result['done']} sentences, {rate:.1f} sentences/s ({rate / offline_rate:.2f}x the "
        f"offline mix), p50 {percentile(lat, 50):.1f} ms, p99 {percentile(lat, 99):.1f} ms, max {max(lat):.1f} ms, "
        f"{len(result['errors'])} errors, {same} answers (of the mix's {len(requests)}) equal to offline"
    )
    for error in result["errors"][:3]:
        print(f"  error: {error}")
    per = ", ".join(f"{s.label} {of_model(values, 'mtkit_model_sentences_total', s.name):.0f}" for s in sides)
    print(
        f"models loaded {loads:.0f} and unloaded {unloads:.0f} times during the soak "
        f"({loads / max(1e-9, result['wall'] / 60):.1f} loads a minute); sentences per model (whole server): {per}"
    )
    minutes = max(1, round(result["wall"] / 60))
    step = result["wall"] / minutes
    peaks = [rss.peak(began + m * step, began + (m + 1) * step) for m in range(minutes)]
    ends = [poll.at(began + (m + 1) * step) for m in range(minutes)]
    print("server RSS, peak per minute (MiB): " + ", ".join(f"{p:.0f}" for p in peaks))
    print("loads by the end of each minute: " + ", ".join(f"{e[0] - poll.at(began)[0]:.0f}" for e in ends))
    print(f"server RSS growth from the first minute to the last: {peaks[-1] - peaks[0]:+.0f} MiB")
    print(f"server stopped on SIGTERM with exit status {code}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=Path, nargs=2, help="two runs serving different directions")
    parser.add_argument("--third", type=Path, help="a third run for the memory figures (its other directions)")
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2, help="the models' threads, offline and in the server")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--soak", type=float, default=300, help="seconds of the --max-models 1 soak (0: none)")
    parser.add_argument("--detect-sentences", type=int, default=500, help="per direction, sent twice at 1 client")
    parser.add_argument("--memory-rounds", type=int, default=2, help="times round the directions (0: no memory)")
    parser.add_argument(
        "--parallel-models",
        type=int,
        default=1,
        help="the server's --parallel-models; above 1 each model gets threads / N, and the offline mix is also "
        "timed that way (two models at once, a thread each): ratios are to the faster of the two",
    )
    parser.add_argument("--server-arg", action="append", default=[], help="passed to mtkit serve (repeatable)")
    parser.add_argument("--data", type=Path, default=ROOT / "data" / "multi30k")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--limit", type=int, help="the first LIMIT sentences of each direction only (trying it out)")
    parser.add_argument("--detect-split", default="val")
    parser.add_argument("--detect-langs", nargs="+", default=["en", "de", "fr", "cs"])
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # this process's torch, and the processes it starts

    sides = []
    for run in args.runs:
        spec = spec_of(run)
        pair = spec.directions[0]
        sentences = read_gz(args.data / f"{args.split}.{pair[0]}.gz")[: args.limit]
        sides.append(Side(run, pair, sentences, spec.name))
    if sides[0].pair == sides[1].pair:
        raise SystemExit(f"both runs translate {sides[0].label}: give two directions")
    print(f"$ python {shlex.join(sys.argv)}")
    print(f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; {describe()}")
    print(
        ", ".join(f"{side.run} ({side.label}): {len(side.sentences)} sentences" for side in sides)
        + f" of {args.split}; beam {args.beam_size}, {args.threads} threads"
    )

    seconds = offline_mix(sides, args.beam_size, args.threads)
    total = sum(len(side.sentences) for side in sides)
    offline_rate = total / seconds
    print(f"offline mix, both models in this process: {total} sentences, {seconds:.2f} s, {offline_rate:.1f} sent/s")
    share = max(1, args.threads // args.parallel_models)
    server_args = ["--preload", *args.server_arg]
    if args.parallel_models > 1:
        seconds = offline_parallel(sides, args.beam_size, share)
        rate = total / seconds
        print(
            f"offline mix, the two models at once on a thread each ({share} thread(s) each): {total} sentences, "
            f"{seconds:.2f} s, {rate:.1f} sent/s"
        )
        offline_rate = max(offline_rate, rate)
        print(f"ratios below are to {offline_rate:.1f} sent/s, the faster of the two")
        server_args = ["--parallel-models", str(args.parallel_models), *server_args]

    sources = tuple(dict.fromkeys(side.pair[0] for side in sides))
    detector_alone(args.data, args.detect_split, sources, args.detect_langs)

    requests, where = mixed(sides)
    auto_requests, _ = mixed(sides, auto=True)
    port = free_port()
    server = start_server([s.run for s in sides], port, args.beam_size, share, server_args)
    rss = RssSampler(server.pid)
    rss.start()
    results = {}
    try:
        load(port, requests[:40], 1)  # warm-up
        load(port, auto_requests[:40], 8)
        mixed_table_head()
        for clients in args.clients:
            results[clients] = mixed_row(port, rss, sides, where, requests, clients, offline_rate, "given")
        most = max(args.clients)
        auto = mixed_row(port, rss, sides, where, auto_requests, most, offline_rate, "auto")
        right = sum(sides[where[i][0]].pair[0] == lang for i, lang in auto["detected"].items())
        print(f"source auto at {most} clients: detected right {right}/{auto['done']}")
        values = server_metrics(port)
        print(
            "sentences per model: "
            + ", ".join(f"{s.label} {of_model(values, 'mtkit_model_sentences_total', s.name):.0f}" for s in sides)
            + f"; loads {values.get('mtkit_model_loads_total', 0):.0f}, unloads "
            f"{values.get('mtkit_model_unloads_total', 0):.0f}"
        )
        if args.detect_sentences > 0:
            detection_cost(port, sides, args.detect_sentences)
    finally:
        rss.stopped.set()
        code = stop_server(server)
    print(f"server stopped on SIGTERM with exit status {code}; peak RSS {rss.peak():.0f} MiB")
    if most in results:
        print(f"{most} clients, the two directions mixed: {results[most]['rate'] / offline_rate:.2f}x the offline mix")

    if args.memory_rounds > 0:
        directions = [(side.pair, side.sentences[:64]) for side in sides]
        print(
            f"\nmemory (--preload; RSS settled 1 s after each direction's 64 sentences, {args.memory_rounds} times "
            "round the directions each server serves):"
        )
        print(
            "| server | resident | loads | unloads | RSS at start MiB | RSS after each direction MiB | peak MiB | exit |"
        )
        print("|---|---:|---:|---:|---:|---|---:|---:|")
        one = [directions[0]]
        memory([sides[0].run], [], one, args, f"{sides[0].label} alone")
        memory([s.run for s in sides], [], directions, args, "2 models, --max-models 2")
        memory([s.run for s in sides], ["--max-models", "1"], directions, args, "2 models, --max-models 1")
        if args.third is not None:
            served = {side.pair for side in sides}
            own = [pair for pair in spec_of(args.third).directions if pair not in served]
            if not own:
                print(f"{args.third} serves no direction the two do not")
            else:
                with tempfile.TemporaryDirectory() as folder:
                    file = models_file(args.third, own[:2], Path(folder))
                    third = [(own[0], read_gz(args.data / f"{args.split}.{own[0][0]}.gz")[:64])]
                    label = f"+ {args.third.name} ({', '.join('-'.join(p) for p in own[:2])})"
                    runs = [s.run for s in sides]
                    memory(runs, ["--models", str(file)], directions + third, args, f"3 models {label}")
                    one_slot = ["--models", str(file), "--max-models", "1"]
                    memory(runs, one_slot, directions + third, args, "3 models, --max-models 1")

    if args.soak > 0:
        soak(sides, args, max(args.clients), offline_rate)


if __name__ == "__main__":
    main()
