#!/usr/bin/env python
"""A multilingual model against bilingual ones at equal training time, and zero-shot directions against pivoting.

    python scripts/bench_multilingual.py --rate runs/cal-bi runs/cal-multi
    python scripts/bench_multilingual.py --multi runs/multi-60 runs/multi-20 \\
        --bilingual de=runs/bi-en-de fr=runs/bi-en-fr cs=runs/bi-en-cs
    python scripts/bench_multilingual.py --many runs/multi30k-many

Printed, on test_2016_flickr (or --split; --limit N: its first N lines), beam 5 (--beam-size), 2 threads, each
run's dtype (or --dtype):
0. With --rate: each run's training speed, updates per second from its metrics.jsonl (update 50 to its last, so
   without the start-up), to turn a time budget into an update budget.
1. With --multi (runs from English into several languages): BLEU and chrF of each direction from each multilingual
   run, beside each bilingual run's (--bilingual LANG=RUN), and sentences/s of the first multilingual run against
   the bilingual one on the first direction (the median of three runs each, taking turns).
2. With --many (a many-to-many run through English): each pair of non-English languages both ways, translated
   directly (zero-shot: the model never saw the pair) and through English (source -> en -> target, the same
   model), BLEU and chrF of both.

Equal total training time: one multilingual model for 3 x T minutes against three bilingual models for T minutes
each. Training speed differs between the two (the multilingual vocabulary is larger) and a wall-clock cap would
cut the cosine schedule short, so each run gets the updates that T minutes buy at its own speed, measured on a
quiet machine with 300-update runs, and max_updates set to that (the schedule then ends where the budget does).
With R_bi and R_multi those rates, the multilingual runs get U60 = 180 x T x R_multi and U20 = 60 x T x R_multi
updates, each bilingual one (configs/multi30k-demo.yaml into de, fr, cs) B20 = 60 x T x R_bi.

    python scripts/bench_multilingual.py --train DIR [--minutes 20]

prepares the data of every run in DIR/data, measures the two rates (DIR/rates.json; the machine must be quiet for
these 2 x 300 updates, and only for them), then trains DIR/bi-en-de, bi-en-fr, bi-en-cs, multi-60, multi-20 and
many (configs/multi30k-many-to-many.yaml as it is) to their update budgets, one after the other. Rerun after an
interrupt, it continues where it stopped: prepared data is kept, a calibration is measured again from its start,
a run with a checkpoint goes on with `mtkit train --resume` (bit-exact) and a finished one is left as it is. At the
end it prints the command of the report (1 and 2 above), which runs in one quiet sitting.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402
from benchlib import describe, mtkit_timed, read_gz, sets  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def scores(hyps: list[str], refs: list[str]) -> tuple[float, float]:
    import sacrebleu

    return sacrebleu.corpus_bleu(hyps, [refs]).score, sacrebleu.corpus_chrf(hyps, [refs]).score


def lines(args, lang: str) -> list[str]:
    """The ``--split`` of the shipped four-way Multi30k in ``lang`` (its first ``--limit`` lines)."""
    return read_gz(ROOT / "data" / "multi30k" / f"{args.split}.{lang}.gz")[: args.limit]


def timed(fn):
    started = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - started


def rate(run) -> tuple[float, int, int]:
    """(updates per second, first update, last update) from a run's metrics.jsonl: update 50 to its last logged
    update, so without the start-up."""
    rows = [json.loads(line) for line in Path(run, "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if r.get("kind") == "train"]
    first = next(r for r in rows if r["update"] >= 50)
    last = rows[-1]
    return (last["update"] - first["update"]) / (last["elapsed"] - first["elapsed"]), first["update"], last["update"]


def rates(runs: list[str]) -> None:
    print("\n0. Training speed (update 50 to the last logged update)")
    for run in runs:
        r, first, last = rate(run)
        print(f"{run}: {r:.3f} updates/s ({first}-{last}); 20 min = {1200 * r:.0f} updates")


def mtkit_cli(*args) -> None:
    """One ``mtkit`` command, printed first; a failure ends the script with its code."""
    code = mtkit_timed(list(args), cwd=ROOT)[1]
    if code:
        sys.exit(code)


def bilingual_overrides(lang: str, data: Path) -> list[str]:
    """configs/multi30k-demo.yaml from English into ``lang`` (the four-way Multi30k files), its data in ``data``."""
    out = [f"data.tgt_lang={lang}", f"data.dir={data}"]
    for key, split in (("train", "train"), ("valid", "val"), ("test", "test_2016_flickr")):
        out.append(f"data.splits.{key}.tgt=data/multi30k/{split}.{lang}.gz")
    return out


def train_all(args) -> None:
    """``--train DIR``: every run of the comparison trained (or continued) to its update budget."""
    top = args.train.resolve()
    demo, multi = "configs/multi30k-demo.yaml", "configs/multi30k-multilingual.yaml"
    many = "configs/multi30k-many-to-many.yaml"
    data = {lang: bilingual_overrides(lang, top / "data" / f"en-{lang}") for lang in ("de", "fr", "cs")}
    data["multi"], data["many"] = [f"data.dir={top / 'data' / 'multi'}"], [f"data.dir={top / 'data' / 'many'}"]
    configs = {"de": demo, "fr": demo, "cs": demo, "multi": multi, "many": many}
    for key, config in configs.items():  # a no-op on prepared, unchanged data
        mtkit_cli("prepare", config, *sets(data[key] + args.set))
    # the end is the update budget alone: no wall-clock cap, the cosine schedule decays over the updates
    by_updates = ["training.decay_over=updates", "training.max_minutes=null"]

    rates_file = top / "rates.json"
    if not rates_file.exists():
        measured = {}
        for key, over in (("bi", data["de"]), ("multi", data["multi"])):
            run = top / f"cal-{key}"
            shutil.rmtree(run, ignore_errors=True)  # a rate is measured in one go
            steps = [f"training.max_updates={args.calibrate_updates}", "training.validate_every=100000000"]
            steps += [f"training.run_dir={run}", *by_updates, *args.set]
            mtkit_cli("train", demo if key == "bi" else multi, *sets(over + steps))
            measured[key] = rate(run)[0]
        info = {
            "updates_per_second": measured,
            "machine": describe(),
            "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        }
        rates_file.write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    measured = json.loads(rates_file.read_text(encoding="utf-8"))["updates_per_second"]
    seconds = 60 * args.minutes
    runs = [(f"bi-en-{lang}", demo, data[lang], round(seconds * measured["bi"])) for lang in ("de", "fr", "cs")]
    runs += [("multi-60", multi, data["multi"], round(3 * seconds * measured["multi"]))]
    runs += [("multi-20", multi, data["multi"], round(seconds * measured["multi"]))]
    runs += [("many", many, data["many"], None)]  # its config's budget
    print(f"rates {measured} (updates/s, {rates_file}); budgets: " + ", ".join(f"{n} {u}" for n, _, _, u in runs))
    for name, config, over, updates in runs:
        run = top / name
        if (run / "checkpoints").is_dir() and any((run / "checkpoints").iterdir()):
            mtkit_cli("train", "--resume", run)
            continue
        budget = [f"training.max_updates={updates}"] if updates else []
        mtkit_cli("train", config, *sets(over + [f"training.run_dir={run}", *budget, *by_updates, *args.set]))
    print(
        "\nall trained; the report, on a quiet machine:\n"
        f"python scripts/bench_multilingual.py --multi {top}/multi-60 {top}/multi-20 "
        f"--bilingual de={top}/bi-en-de fr={top}/bi-en-fr cs={top}/bi-en-cs --many {top}/many"
    )


def one_to_many(args) -> None:
    import statistics

    import mtkit

    multis = [mtkit.load(run, beam_size=args.beam_size, threads=args.threads, dtype=args.dtype) for run in args.multi]
    bilingual = dict(pair.split("=", 1) for pair in args.bilingual)
    source = lines(args, "en")
    print(f"\n1. {', '.join(args.multi)} (targets {', '.join(multis[0].targets)}) against bilingual runs, {args.split}")
    print(
        "| direction | " + " | ".join(f"{run} BLEU | chrF" for run in args.multi) + " | bilingual BLEU | chrF | run |"
    )
    print("|---|" + "---:|---:|" * len(multis) + "---:|---:|---|")
    for lang in multis[0].targets:
        refs = lines(args, lang)
        row = f"| en-{lang} |"
        for multi in multis:
            row += " {:.2f} | {:.2f} |".format(*scores(multi.translate(source, target=lang), refs))
        if lang in bilingual:
            model = mtkit.load(bilingual[lang], beam_size=args.beam_size, threads=args.threads, dtype=args.dtype)
            row += " {:.2f} | {:.2f} |".format(*scores(model.translate(source), refs)) + f" {bilingual[lang]} |"
        else:
            row += " | | |"
        print(row)
    lang = next((t for t in multis[0].targets if t in bilingual), None)
    if lang is None:
        return
    model = mtkit.load(bilingual[lang], beam_size=args.beam_size, threads=args.threads, dtype=args.dtype)
    m_times, b_times = [], []
    for _ in range(3):  # taking turns, so that a slower minute of the machine falls on both
        m_times.append(timed(lambda: multis[0].translate(source, target=lang))[1])
        b_times.append(timed(lambda: model.translate(source))[1])
    m, b = len(source) / statistics.median(m_times), len(source) / statistics.median(b_times)
    print(f"sentences/s on en-{lang}, median of 3: {args.multi[0]} {m:.1f}, {bilingual[lang]} {b:.1f} ({m / b:.2f}x)")


def many_to_many(args) -> None:
    import mtkit

    model = mtkit.load(args.many, beam_size=args.beam_size, threads=args.threads, dtype=args.dtype)
    others = [t for t in model.targets if t != "en"]
    print(f"\n2. {args.many}: zero-shot against pivoting through English, {args.split}")
    print("| direction | zero-shot BLEU | chrF | through en BLEU | chrF |")
    print("|---|---:|---:|---:|---:|")
    for src in others:
        source = lines(args, src)
        english = model.translate(source, target="en")
        for tgt in others:
            if tgt == src:
                continue
            refs = lines(args, tgt)
            direct = scores(model.translate(source, target=tgt), refs)
            pivot = scores(model.translate(english, target=tgt), refs)
            print(f"| {src}-{tgt} | {direct[0]:.2f} | {direct[1]:.2f} | {pivot[0]:.2f} | {pivot[1]:.2f} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", nargs="*", default=[], help="runs whose training speed to print")
    parser.add_argument("--multi", nargs="*", default=[], help="runs from English into several languages")
    parser.add_argument("--bilingual", nargs="*", default=[], help="LANG=RUN: a bilingual run from English")
    parser.add_argument("--many", help="a many-to-many run through English")
    parser.add_argument("--split", default="test_2016_flickr")
    parser.add_argument("--beam-size", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", help="as mtkit translate --dtype (default: each run's, auto)")
    parser.add_argument("--limit", type=int, help="the first N lines of each split only (smoke tests)")
    parser.add_argument("--train", type=Path, metavar="DIR", help="train (or continue) every run of the comparison")
    parser.add_argument("--minutes", type=float, default=20, help="with --train: T, a bilingual run's budget")
    parser.add_argument("--calibrate-updates", type=int, default=300, help="with --train: updates timed per rate")
    parser.add_argument("--set", action="append", default=[], help="with --train: extra overrides for every run")
    parser.add_argument(
        "--in-process", action="store_true", help="each mtkit command in this process (times without start-up)"
    )
    args = parser.parse_args()
    benchlib.IN_PROCESS = args.in_process
    if not args.multi and not args.many and not args.rate and not args.train:
        parser.error("give --train, --rate, --multi or --many")
    if args.train:
        train_all(args)
        return 0
    import torch

    torch.set_num_threads(args.threads)
    print(describe())
    if args.rate:
        rates(args.rate)
    if args.multi:
        one_to_many(args)
    if args.many:
        many_to_many(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
