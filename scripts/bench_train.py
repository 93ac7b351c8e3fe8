#!/usr/bin/env python
"""Train a config for M minutes of wall time and print what it achieved.

    python scripts/bench_train.py configs/multi30k-transformer.yaml --minutes 20

Prints: target tokens/s (mean of the log windows after the first `--warmup-logs`), updates, padding
fraction, peak RSS of the training process, achieved matmul FLOP/s (counted with torch's FlopCounterMode on
real batches) beside a plain matmul of the same shapes, and the BLEU/chrF of the final checkpoint (averaged
when the config says so) on test_2016_flickr at beam 5 (or the SPLIT.en.gz / SPLIT.de.gz of --data and --split).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml
from benchlib import read_gz

ROOT = Path(__file__).resolve().parent.parent


def run(cmd: list[str], **kw) -> subprocess.CompletedProcess:
    print("$", " ".join(cmd), flush=True)
    done = subprocess.run(cmd, **kw)
    if done.returncode:  # mtkit already printed its one-line reason
        sys.exit(done.returncode)
    return done


def flops_per_update(config: str, overrides: list[str], batches: int = 4) -> tuple[float, float, float]:
    """(GFLOP per update as FlopCounterMode counts them (matmuls and attention), measured s per update on the same batches, plain-matmul GFLOP/s)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from mtkit import config as cfgmod
    from mtkit.data.batches import make_batches
    from mtkit.training.loop import Trainer
    from mtkit.training.step import train_step

    cfg = cfgmod.load(config, overrides + ["training.run_dir=/tmp/mtkit-bench-flops"])
    trainer = Trainer(cfg)
    trainer.model.train()
    data = trainer.train_data
    plan = make_batches(data.src_lengths, data.tgt_lengths, cfg.training.batch_tokens, seed=1, epoch=1)[: batches + 2]

    def update(idx):  # the trainer's own update: forward, loss, backward, clipping, learning rate, optimizer step
        train_step(trainer, [idx])
        trainer.state.update += 1  # the next update's learning rate, as the training loop counts

    for idx in plan[:2]:
        update(idx)
    with FlopCounterMode(display=False) as counter:
        for idx in plan[2:]:
            update(idx)
    start = time.perf_counter()
    for idx in plan[2:]:
        update(idx)
    seconds = (time.perf_counter() - start) / batches
    gflop = counter.get_total_flops() / batches / 1e9
    # a plain matmul of the model's typical shape: (batch_tokens, d_model) x (d_model, ffn_dim)
    d = getattr(cfg.model, "d_model", 256)
    f = getattr(cfg.model, "ffn_dim", 1024)
    a, w = torch.randn(cfg.training.batch_tokens, d), torch.randn(d, f)
    for _ in range(3):
        a @ w
    t0, reps = time.perf_counter(), 30
    for _ in range(reps):
        a @ w
    plain = 2 * a.size(0) * d * f * reps / (time.perf_counter() - t0) / 1e9
    return gflop, seconds, plain


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config")
    ap.add_argument("--minutes", type=float, default=20)
    ap.add_argument("--run-dir", default=None, help="default: runs/bench-<config name>")
    ap.add_argument("--set", action="append", default=[], help="extra config overrides")
    ap.add_argument("--warmup-logs", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-flops", action="store_true")
    ap.add_argument("--flops-only", action="store_true", help="only the GFLOP/s line: no training, no test")
    ap.add_argument("--reuse", action="store_true", help="skip training: report on the existing run dir")
    ap.add_argument(
        "--data", type=Path, default=ROOT / "data" / "multi30k", help="folder holding SPLIT.en.gz and SPLIT.de.gz"
    )
    ap.add_argument("--split", default="test_2016_flickr", help="the split translated and scored at beam 5")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    if args.flops_only:
        print_flops(args.config, args.set, args.threads)
        return
    name = Path(args.config).stem
    run_dir = Path(args.run_dir or f"runs/bench-{name}")
    if run_dir.exists() and not args.reuse:
        shutil.rmtree(run_dir)
    mtkit = [sys.executable, "-m", "mtkit"]
    # The wall-clock budget ends the run, not the config's max_updates, except under a cosine schedule, whose
    # decay is shaped by max_updates (set it to what the budget allows on this machine).
    schedule = ((yaml.safe_load(Path(args.config).read_text(encoding="utf-8")) or {}).get("training") or {}).get(
        "schedule"
    )
    budget_only = [] if schedule == "cosine" else ["training.max_updates=null"]
    overrides = [
        f"training.run_dir={run_dir}",
        f"training.max_minutes={args.minutes}",
        f"training.threads={args.threads}",
        *budget_only,
        *args.set,
    ]
    sets = [x for o in overrides for x in ("--set", o)]
    run(mtkit + ["prepare", args.config] + [x for o in args.set for x in ("--set", o)])
    started = time.perf_counter()
    if not args.reuse:
        run(mtkit + ["train", args.config] + sets)
        wall = time.perf_counter() - started
        # read before translate and score run: the largest child so far is the trainer
        peak_rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    steady = train[args.warmup_logs :] or train
    tok_s = sum(r["tgt_tokens_per_s"] for r in steady) / len(steady)
    padding = sum(r["padding"] for r in steady) / len(steady)
    valid = [r for r in records if r["kind"] == "valid"]
    updates = max([r["update"] for r in train + valid] or [0])  # the final update is validated, maybe not logged

    src, ref = args.data / f"{args.split}.en.gz", args.data / f"{args.split}.de.gz"
    hyp_path, src_path = run_dir / "test.beam5.de", run_dir / "test.en"
    src_path.write_text("\n".join(read_gz(src)) + "\n", encoding="utf-8")
    run(
        mtkit
        + [
            "translate",
            str(run_dir),
            "--input",
            str(src_path),
            "--output",
            str(hyp_path),
            "--beam-size",
            "5",
            "--threads",
            str(args.threads),
        ]
    )
    ref_path = run_dir / "test.ref.de"
    ref_path.write_text("\n".join(read_gz(ref)) + "\n", encoding="utf-8")
    out = subprocess.run(
        mtkit + ["score", str(ref_path), "-i", str(hyp_path), "--json", "-w", "2", "-m", "bleu", "-m", "chrf"],
        capture_output=True,
        text=True,
        check=True,
    )
    scores = json.loads(out.stdout)

    print()
    print(
        f"== mtkit bench_train {args.config}: {args.minutes} min on {args.threads} threads "
        f"({time.strftime('%Y-%m-%d %H:%M')})"
    )
    print(f"updates                 {updates}")
    print(f"target tokens/s         {tok_s:.0f} (mean of {len(steady)} log windows after {args.warmup_logs})")
    print(f"padding fraction        {padding:.3f}")
    if args.reuse:  # no trainer ran in this call: its RSS is unknown, its time is the one it recorded
        print("peak RSS (train)        not measured (--reuse: no training in this call)")
        elapsed = max((r.get("elapsed", 0.0) for r in records), default=0.0)
        print(f"training time           {elapsed / 60:.1f} min (recorded in metrics.jsonl, across resumes)")
    else:
        print(f"peak RSS (train)        {peak_rss_mb:.0f} MB")
        print(f"wall time train         {wall / 60:.1f} min")
    if valid:
        best = max(valid, key=lambda r: r.get("bleu", -1))
        print(f"best valid BLEU         {best.get('bleu', float('nan')):.2f} at update {best['update']}")
    print(f"test BLEU beam 5        {scores['bleu']['score']:.2f}   ({scores['bleu']['signature']})")
    print(f"test chrF beam 5        {scores['chrf']['score']:.2f}")
    if not args.skip_flops:
        print_flops(args.config, args.set, args.threads)


def print_flops(config: str, overrides: list[str], threads: int) -> None:
    """The GFLOP/s line: what an update achieves against a plain matmul of the model's typical shape."""
    import torch

    from mtkit.memory import keep_freed_memory

    torch.set_num_threads(threads)
    keep_freed_memory()  # as the trainer does on CPU
    gflop, seconds, plain = flops_per_update(config, overrides)
    print(
        f"GFLOP / update          {gflop:.1f}  ({seconds:.2f} s/update on the same batches -> "
        f"{gflop / seconds:.0f} GFLOP/s achieved; plain {plain:.0f} GFLOP/s, {100 * gflop / seconds / plain:.0f}%)"
    )


if __name__ == "__main__":
    main()
