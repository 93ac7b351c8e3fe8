#!/usr/bin/env python
"""Run an mtkit command under a real torch.distributed process group of ONE process, with DDP forced on.

At world size 1 mtkit starts no process group and skips DDP and every collective, so `torchrun
--nproc_per_node 1 -m mtkit train ...` on a single GPU never touches NCCL. This wrapper starts the group itself
(NCCL on a GPU, gloo on the CPU) and marks the run as distributed, so one GPU exercises the code the multi-GPU
runs take: the DDP wrapper with device_ids, no_sync, the all_reduce of the step statistics, the all_gather of
the RNG states for checkpoints, the broadcast after validation, barriers and, with --resume, the check that
every rank found the same checkpoint.

    python -m torch.distributed.run --standalone --nproc_per_node 1 scripts/ddp_world1.py nccl \\
        train configs/multi30k-transformer.yaml --set training.devices=cuda --set training.max_updates=100
    (gloo instead of nccl: the same on the CPU, with --set training.devices=cpu)
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist


def main() -> int:
    if len(sys.argv) < 3 or sys.argv[1] not in ("nccl", "gloo"):
        print(__doc__, file=sys.stderr)
        return 2
    backend, argv = sys.argv[1], sys.argv[2:]
    if "RANK" not in os.environ:
        print(
            "ddp_world1.py: start it with torchrun (python -m torch.distributed.run --nproc_per_node 1 ...)",
            file=sys.stderr,
        )
        return 2
    if backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)  # as mtkit.training.distributed.setup does for world > 1
    else:
        dist.init_process_group("gloo")
    print(f"ddp_world1: process group {dist.get_backend()} rank {dist.get_rank()}/{dist.get_world_size()}", flush=True)

    from mtkit.cli import main as mtkit_main
    from mtkit.training import distributed as distmod

    distmod.Dist.enabled = property(lambda self: True)  # world size 1, yet every distributed branch runs
    return mtkit_main(argv)


if __name__ == "__main__":
    sys.exit(main())
