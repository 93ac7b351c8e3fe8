#!/usr/bin/env python
"""Length extrapolation of the five Transformer position schemes, trained alike on short sentences.

    python scripts/bench_positions.py --minutes 20              (from the repository root)
    python scripts/bench_positions.py --updates 1300            (a fixed number of updates each: fair on a busy CPU)

One data dir is prepared once with ``data.max_tokens = --max-target-len`` (default 16): training keeps only the
pairs whose target, and source, is at most that many subwords. Then the same model (the config's model section,
default configs/multi30k-demo.yaml) is trained with each of ``positions: sinusoidal, learned, relative, rope,
alibi`` for the same budget, with ``max_positions`` 256 (``--max-positions``) so that no input is truncated, and
translates the config's valid and test splits (val and test_2016_flickr) plus a stress set of test sentences
joined two or three at a time into one line (the reference: their references joined).

Prints one markdown table: BLEU / chrF per source-length bucket (source subwords against L, the longest source
trained on: within L, up to 1.5 L, up to 2 L, beyond 2 L; val and test pooled) and on the joined test lines,
with the command, date and CPU. With ``--minutes``, a cosine schedule keeps the config's ``max_updates`` (its
decay is shaped by it), so a run ends at whichever comes first, as in bench_train.py.

Everything lands in ``--workdir`` (default runs/bench-positions): data/, one run dir per scheme, eval/ and
table.md; ``--reuse`` translates and scores existing runs without training them again.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import time
from pathlib import Path

import benchlib
import yaml

ROOT = Path(__file__).resolve().parent.parent
SCHEMES = ("sinusoidal", "learned", "relative", "rope", "alibi")
BUCKETS = ((0.0, 1.0, "<= L"), (1.0, 1.5, "<= 1.5 L"), (1.5, 2.0, "<= 2 L"), (2.0, float("inf"), "> 2 L"))
JOINS = (2, 3)


def mtkit(*args) -> None:
    """``mtkit ARGS`` (a process of its own, or this one with --in-process); stops the script if it fails."""
    _, code, _ = benchlib.mtkit_timed(list(args))
    if code:  # mtkit already printed its one-line reason
        sys.exit(code)


def eval_sets(data_dir: Path, limit: int | None) -> dict[str, tuple[list[str], list[str], list[int]]]:
    """name -> (sources, references, source subword counts): val, test, and test joined 2 and 3 at a time."""
    from mtkit.data.batches import ParallelData
    from mtkit.manifest import read_manifest
    from mtkit.tokenizer import Tokenizer

    out = {}
    for split in ("valid", "test"):
        data = ParallelData(data_dir, split)
        src = data.text_path("src").read_text(encoding="utf-8").split("\n")[: len(data)]
        refs = data.reference_lines()
        n = min(len(data), limit or len(data))
        out[split] = (src[:n], refs[:n], [int(x) for x in data.src_lengths[:n]])
    files = read_manifest(data_dir)["tokenizer"]
    tokenizer = Tokenizer(data_dir / files["src"], data_dir / files["tgt"])
    test_src, test_refs, _ = out["test"]
    for k in JOINS:
        groups = range(0, len(test_src) - k + 1, k)
        src = [" ".join(test_src[i : i + k]) for i in groups]
        refs = [" ".join(test_refs[i : i + k]) for i in groups]
        out[f"joined x{k}"] = (src, refs, [len(ids) for ids in tokenizer.encode_src(src)])
    return out


def scores(hyps: list[str], refs: list[str]) -> str:
    from mtkit.scoring.score import corpus_scores

    if not hyps:
        return "-"
    got = corpus_scores(hyps, [refs], metrics=("bleu", "chrf"))
    return f"{got['bleu']['score']:.1f} / {got['chrf']['score']:.1f}"


def train_record(run_dir: Path) -> tuple[int, float]:
    """(updates, training minutes) from the run's metrics.jsonl."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    updates = max((r.get("update", 0) for r in records), default=0)
    elapsed = max((r.get("elapsed", 0.0) for r in records), default=0.0)
    return updates, elapsed / 60


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/multi30k-demo.yaml", help="data and model (default: the demo's)")
    budget = ap.add_mutually_exclusive_group()
    budget.add_argument("--minutes", type=float, default=None, help="wall-clock training budget per scheme (20)")
    budget.add_argument("--updates", type=int, default=None, help="or a fixed number of updates per scheme")
    ap.add_argument("--max-target-len", type=int, default=16, help="train on pairs of at most N subwords a side")
    ap.add_argument("--max-positions", type=int, default=256, help="model.max_positions of every scheme")
    ap.add_argument("--schemes", nargs="+", choices=SCHEMES, default=list(SCHEMES))
    ap.add_argument("--workdir", default="runs/bench-positions")
    ap.add_argument("--beam-size", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-sentences", type=int, default=None, help="only the first N of val and test")
    ap.add_argument("--set", action="append", default=[], help="extra config overrides, for every scheme")
    ap.add_argument("--reuse", action="store_true", help="skip training: translate and score the existing runs")
    ap.add_argument(
        "--in-process", action="store_true", help="each mtkit command in this process (no start-up per command)"
    )
    args = ap.parse_args()
    benchlib.IN_PROCESS = args.in_process
    if args.updates is not None and args.updates < 1 or args.max_target_len < 1:
        ap.error("--updates and --max-target-len must be at least 1")
    minutes = 20.0 if args.minutes is None and args.updates is None else args.minutes
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    command = shlex.join(["python", "scripts/bench_positions.py", *sys.argv[1:]])
    workdir = Path(args.workdir)
    data_dir = workdir / "data"
    from mtkit import config as cfgmod

    tree = yaml.safe_load(Path(args.config).read_text(encoding="utf-8")) or {}
    cosine = (tree.get("training") or {}).get("schedule") == "cosine"
    data_sets = [f"data.dir={data_dir}", f"data.max_tokens={args.max_target_len}"]
    mtkit("prepare", args.config, *benchlib.sets(data_sets + args.set))  # once: a no-op when the data is current
    from mtkit.data.batches import ParallelData

    longest = int(ParallelData(data_dir, "train").src_lengths.max())  # L
    evals = eval_sets(data_dir, args.eval_sentences)
    eval_dir = workdir / "eval"
    eval_dir.mkdir(parents=True, exist_ok=True)
    sources = [line for src, _, _ in evals.values() for line in src]
    (eval_dir / "sources.txt").write_text("\n".join(sources) + "\n", encoding="utf-8")

    if args.updates is not None:
        budget_sets = [f"training.max_updates={args.updates}", "training.max_minutes=null"]
    else:
        budget_sets = [f"training.max_minutes={minutes}"] + ([] if cosine else ["training.max_updates=null"])
    defaults = cfgmod.TransformerConfig.model_fields
    rows = []
    for scheme in args.schemes:
        run_dir = workdir / scheme
        # keys only another scheme reads go back to their defaults (alibi refuses them)
        unused = [f"model.{k}={defaults[k].default}" for k, s in cfgmod.SCHEME_ONLY_KEYS.items() if s != scheme]
        overrides = [
            *data_sets,
            f"model.positions={scheme}",
            f"model.max_positions={args.max_positions}",
            *unused,
            f"training.run_dir={run_dir}",
            f"training.threads={args.threads}",
            *budget_sets,
            *args.set,
        ]
        if not args.reuse:
            shutil.rmtree(run_dir, ignore_errors=True)
            mtkit("train", args.config, *benchlib.sets(overrides))
        hyp_path = run_dir / "eval.hyp.txt"
        translate = ["translate", str(run_dir), "--input", str(eval_dir / "sources.txt"), "--output", str(hyp_path)]
        mtkit(*translate, "--beam-size", args.beam_size, "--threads", args.threads)
        hyps = hyp_path.read_text(encoding="utf-8").split("\n")[: len(sources)]
        if len(hyps) != len(sources):
            sys.exit(f"{hyp_path}: {len(hyps)} lines for {len(sources)} sources")
        per_set, at = {}, 0
        for name, (src, refs, lengths) in evals.items():
            per_set[name] = (hyps[at : at + len(src)], refs, lengths)
            at += len(src)
        cells = []
        for low, high, _ in BUCKETS:  # val and test pooled, by source length against L
            picked = [
                (h, r)
                for name in ("valid", "test")
                for h, r, n in zip(*per_set[name])
                if low * longest < n <= high * longest
            ]
            cells.append(scores([h for h, _ in picked], [r for _, r in picked]))
        for k in JOINS:
            h, r, _ = per_set[f"joined x{k}"]
            cells.append(scores(h, r))
        updates, trained = train_record(run_dir)
        rows.append([scheme, str(updates), f"{trained:.1f}", *cells])

    counts = []
    for low, high, _ in BUCKETS:
        counts.append(sum(low * longest < n <= high * longest for name in ("valid", "test") for n in evals[name][2]))
    header = ["positions", "updates", "train min"]
    header += [f"{label} ({n})" for (_, _, label), n in zip(BUCKETS, counts)]
    header += [f"test joined x{k} ({len(evals[f'joined x{k}'][0])})" for k in JOINS]
    budget_text = f"{args.updates} updates" if args.updates is not None else f"{minutes:g} minutes"
    lines = [
        f"`{command}`",
        "",
        f"{time.strftime('%Y-%m-%d')}, {benchlib.describe()}; {budget_text} per scheme on the training pairs of at "
        f"most {args.max_target_len} subwords a side (L = {longest} source subwords); beam {args.beam_size}. "
        "BLEU / chrF on the valid + test splits by source subwords (sentences per bucket in brackets), and on "
        "test lines joined 2 or 3 at a time.",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join(row) + " |" for row in rows),
    ]
    (workdir / "table.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print()
    print("\n".join(lines))


if __name__ == "__main__":
    from mtkit.errors import MtkitError

    try:
        main()
    except MtkitError as err:  # bad data or config: one line, as mtkit says it
        print(f"bench_positions: error: {err}", file=sys.stderr)
        sys.exit(err.exit_code)
