#!/usr/bin/env python
"""Where an update's time goes: time N training updates on real batches, then profile a few with torch.profiler.

    python scripts/profile_train.py configs/multi30k-transformer.yaml              # as training runs
    python scripts/profile_train.py configs/multi30k-transformer.yaml --unfused    # logits, then the loss

Builds the config's model and optimizer (the run dir is a scratch one), takes the first batches of epoch 1, runs
`--warmup` updates untimed, times `--updates` more (the trainer's ``train_step``: forward, loss, backward,
clipping, learning rate, Adam) and prints seconds per update and minor page faults per update, then the
profiler's table of the costliest ops over `--profile` updates.
"""

from __future__ import annotations

import argparse
import os
import resource
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config")
    ap.add_argument("--set", action="append", default=[], help="extra config overrides")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=4)
    ap.add_argument("--updates", type=int, default=20)
    ap.add_argument("--profile", type=int, default=6, help="updates under torch.profiler (0: none)")
    ap.add_argument("--rows", type=int, default=15, help="rows of the profiler table")
    ap.add_argument("--unfused", action="store_true", help="logits from the model, then the loss on them")
    ap.add_argument("--shapes", action="store_true", help="one profiler row per operator and input shapes")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch
    from torch.profiler import ProfilerActivity, profile

    from mtkit import config as cfgmod
    from mtkit.data.batches import make_batches
    from mtkit.training.loop import Trainer
    from mtkit.training.step import train_step

    torch.set_num_threads(args.threads)
    cfg = cfgmod.load(args.config, args.set + ["training.run_dir=/tmp/mtkit-profile-train"])
    trainer = Trainer(cfg)
    trainer.model.train()
    data, t = trainer.train_data, cfg.training
    need = args.warmup + max(args.updates, args.profile)
    plan = make_batches(data.src_lengths, data.tgt_lengths, t.batch_tokens, seed=1, epoch=1)[:need]

    def update(idx):  # the trainer's own update (mtkit.training.step.train_step), one batch per update
        train_step(trainer, [idx], fused=not args.unfused)
        trainer.state.update += 1  # the next update's learning rate, as the training loop counts

    for idx in plan[: args.warmup]:
        update(idx)
    timed = plan[args.warmup : args.warmup + args.updates]
    faults, start = resource.getrusage(resource.RUSAGE_SELF).ru_minflt, time.perf_counter()
    for idx in timed:
        update(idx)
    seconds = (time.perf_counter() - start) / max(len(timed), 1)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / max(len(timed), 1)
    print(
        f"{'unfused' if args.unfused else 'fused'} loss: {seconds:.3f} s/update over {len(timed)} updates, "
        f"{faults:.0f} minor page faults/update, {args.threads} threads"
    )
    if args.profile:
        with profile(activities=[ProfilerActivity.CPU], record_shapes=args.shapes) as prof:
            for idx in plan[args.warmup : args.warmup + args.profile]:
                update(idx)
        table = prof.key_averages(group_by_input_shape=args.shapes)
        print(table.table(sort_by="self_cpu_time_total", row_limit=args.rows, max_name_column_width=40))


if __name__ == "__main__":
    main()
