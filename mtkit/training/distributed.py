"""torch.distributed for training: the set-up from torchrun's environment, and the collectives the loop uses.

At world size 1 no process group starts and every collective returns at once, so one code path serves both.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from mtkit.devices import pick_device


@dataclass(frozen=True)
class Dist:
    """This process's place in the run."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def enabled(self) -> bool:
        return self.world_size > 1


def setup(device_choice: str, timeout_minutes: float = 30.0) -> Dist:
    """This process's ``Dist`` from torchrun's RANK / WORLD_SIZE / LOCAL_RANK; the process group starts when world > 1.

    Args:
        device_choice: training.devices (auto, cpu, cuda, ...).
        timeout_minutes: how long a collective waits for the other ranks before it fails.

    Returns:
        The rank, world size, local rank and device; NCCL serves CUDA devices, gloo the others.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = pick_device(device_choice, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if world > 1 and not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        dist.init_process_group(
            backend,
            timeout=datetime.timedelta(minutes=timeout_minutes),
            **({"device_id": device} if device.type == "cuda" else {}),
        )
    return Dist(rank, world, local_rank, device)


# what gloo / NCCL / the store say when the process at the other end died or stopped answering
_PEER_LOST = (
    "connection closed by peer",
    "connection reset by peer",
    "broken pipe",
    "timed out",
    "timeout",
    "socket closed",
    "nccl communicator was aborted",
    "connection refused",
)


def peer_lost(err: BaseException) -> bool:
    """True when ``err`` came from a collective whose partner process failed (not from this process's own bug)."""
    if isinstance(err, getattr(dist, "DistError", ())):
        return True
    return isinstance(err, RuntimeError) and any(s in str(err).lower() for s in _PEER_LOST)


def all_reduce_sum(tensor: torch.Tensor, d: Dist) -> torch.Tensor:
    """Sum ``tensor`` over the ranks in place and return it (a collective)."""
    if d.enabled:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def all_gather_bytes(tensor: torch.Tensor, d: Dist) -> list[torch.Tensor]:
    """Every rank's ``tensor``, by rank, on the CPU (a collective; the tensors are uint8 of one size, RNG states)."""
    if not d.enabled:
        return [tensor]
    out = [torch.empty_like(tensor) for _ in range(d.world_size)]
    dist.all_gather(out, tensor.to(d.device) if d.device.type == "cuda" else tensor)
    return [t.cpu() for t in out]


def same_on_all_ranks(value: int, d: Dist) -> bool:
    """Whether every rank holds the same integer (a collective: every rank must call it)."""
    if not d.enabled:
        return True
    t = torch.tensor([value, -value], dtype=torch.int64, device=d.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t[0]) == -int(t[1])


def barrier(d: Dist) -> None:
    """Wait until every rank gets here (a collective)."""
    if d.enabled:
        dist.barrier()


def teardown(d: Dist, wait: bool = False) -> None:
    """End the process group, if one was started. ``wait`` (a run that ended well on this rank): first wait for
    every rank, so that none tears down its connections while another still uses them (under load, a rank that left
    early was aborted at exit by the transport); a rank whose peers are gone does not wait."""
    if d.enabled and dist.is_initialized():
        if wait:
            try:
                dist.barrier()
            except RuntimeError:  # a peer failed or left: nothing to wait for
                pass
        dist.destroy_process_group()


def is_out_of_memory(err: BaseException) -> bool:
    """CUDA's OutOfMemoryError, or the RuntimeError of a CPU / MPS allocation that failed."""
    return isinstance(err, torch.OutOfMemoryError) or "out of memory" in str(err) or "can't allocate" in str(err)
