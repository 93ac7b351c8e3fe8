"""The torch device a command computes on: ``cpu``, ``cuda`` or ``auto`` (a GPU when one is visible)."""

from __future__ import annotations

import torch

from mtkit.errors import MtkitError


def pick_device(choice: str, local_rank: int = 0) -> torch.device:
    """The device for ``choice``.

    Args:
        choice: ``cpu``, ``cuda`` or ``auto`` (``cuda`` when a GPU is visible, else ``cpu``).
        local_rank: this process's rank on its node; picks one of the node's GPUs.

    Returns:
        The device to compute on.

    Raises:
        MtkitError: ``cuda`` was asked for and no GPU is visible.
    """
    if choice == "cpu":
        return torch.device("cpu")
    if choice == "cuda" or (choice == "auto" and torch.cuda.is_available()):
        if not torch.cuda.is_available():
            raise MtkitError("device 'cuda' requested but no CUDA GPU is visible; set training.devices: cpu (or auto)")
        _skip_cudnn_attention()
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device("cpu")


def _skip_cudnn_attention() -> None:
    """Keep scaled_dot_product_attention off cuDNN's backend; flash, memory-efficient and math kernels stay."""
    # cuDNN builds a graph for each new shape, and mtkit's batches change shape at almost every call (length
    # buckets, validation, decoding): docs/benchmarks.md has what that cost in bf16/fp16 training.
    enable = getattr(torch.backends.cuda, "enable_cudnn_sdp", None)  # torch >= 2.3
    if enable is not None:
        enable(False)


def float32_matmuls(device: torch.device, tf32: bool) -> str:
    """Let float32 matmuls and convolutions on a CUDA ``device`` use TensorFloat-32 (``tf32``) or keep them exact.

    TF32 keeps float32's range with a 10-bit mantissa in the products (sums stay float32): an H100 multiplies
    about 7x faster so. PyTorch leaves it off for matmuls by default; mtkit turns it on for training and
    decoding on a GPU unless told otherwise (``training.tf32: false``). A CPU is left as it is.

    Returns:
        What float32 products compute in on ``device``: "tf32" or "fp32" (the summary table shows it).
    """
    if device.type != "cuda":
        return "fp32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    return "tf32" if tf32 else "fp32"
