#!/usr/bin/env python
"""First-call and repeat times of scaled_dot_product_attention per backend and dtype on a CUDA GPU.

    python benchmarks/gpu_sdpa_first_call.py

Why bf16/fp16 training was slower than fp32 on an H100 until mtkit switched PyTorch's cuDNN attention backend
off: that backend builds a graph for every new input shape, and training batches change shape every update.
For float32, bfloat16 and float16, each backend (PyTorch's choice, cuDNN, memory-efficient, math) runs forward
and backward on 12 random (batch, length) shapes, with a padding mask and causally, and prints the mean time of
the first call on a shape and of a repeat; then the same for a linear layer under autocast.
Output of 2026-11-23 (H100): benchmarks/results/2026-11-23-gpu-h100/sdpa-first-call.txt.
"""

import random
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

if not torch.cuda.is_available():
    print("gpu_sdpa_first_call.py: no CUDA device visible to torch; run it on a GPU machine", file=sys.stderr)
    sys.exit(2)

dev = "cuda"
print(
    "torch",
    torch.__version__,
    "cudnn",
    torch.backends.cudnn.version(),
    "flash",
    torch.backends.cuda.flash_sdp_enabled(),
    "mem_eff",
    torch.backends.cuda.mem_efficient_sdp_enabled(),
    "cudnn_sdp",
    torch.backends.cuda.cudnn_sdp_enabled(),
    "math",
    torch.backends.cuda.math_sdp_enabled(),
    flush=True,
)


def sdpa_case(dtype, backend, shapes, causal, masked):
    firsts, repeats = [], []
    for b, t in shapes:
        q = torch.randn(b, 4, t, 64, device=dev, dtype=dtype, requires_grad=True)
        k = torch.randn(b, 4, t, 64, device=dev, dtype=dtype, requires_grad=True)
        v = torch.randn(b, 4, t, 64, device=dev, dtype=dtype, requires_grad=True)
        mask = (torch.rand(b, t, device=dev) > 0.1)[:, None, None, :] if masked else None
        for rep in range(2):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with sdpa_kernel(backend) if backend is not None else torch.enable_grad():
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=0.1, is_causal=causal)
                out.sum().backward()
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            (firsts if rep == 0 else repeats).append(dt)
    return sum(firsts) / len(firsts) * 1e3, sum(repeats) / len(repeats) * 1e3


random.seed(0)
warm = [(32, 20)]
for dtype in (torch.float32, torch.bfloat16, torch.float16):
    for backend in (None, SDPBackend.CUDNN_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH):
        for causal, masked in ((False, True), (True, False)):
            if backend == SDPBackend.CUDNN_ATTENTION and dtype == torch.float32:
                continue
            shapes = [(random.randint(60, 250), random.randint(8, 40)) for _ in range(12)]
            try:
                sdpa_case(dtype, backend, warm, causal, masked)
                f, r = sdpa_case(dtype, backend, shapes, causal, masked)
                print(
                    f"sdpa {str(dtype):15s} {str(backend):32s} causal={causal:d} mask={masked:d}: first call {f:7.2f} ms, repeat {r:6.2f} ms",
                    flush=True,
                )
            except Exception as err:
                print(
                    f"sdpa {dtype} {backend} causal={causal} mask={masked}: {type(err).__name__}: {str(err)[:120]}",
                    flush=True,
                )

# linear layers under autocast on new shapes
for dtype in (torch.float32, torch.bfloat16):
    lin = torch.nn.Linear(256, 1024, device=dev)
    firsts, repeats = [], []
    for _ in range(12):
        x = torch.randn(random.randint(2000, 4000), 256, device=dev, requires_grad=True)
        for rep in range(2):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            with torch.autocast("cuda", dtype=dtype, enabled=dtype != torch.float32):
                lin(x).sum().backward()
            torch.cuda.synchronize()
            dt = time.perf_counter() - t0
            (firsts if rep == 0 else repeats).append(dt)
    print(f"linear {dtype}: first {sum(firsts) / 12 * 1e3:.2f} ms, repeat {sum(repeats) / 12 * 1e3:.2f} ms", flush=True)
