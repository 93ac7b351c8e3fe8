#!/usr/bin/env python
"""Peak memory and speed of full training updates against LoRA updates (training.lora) on a random Transformer.

    python scripts/bench_lora.py [--shape small|nllb-600m|D,ENC,DEC,HEADS,FFN,VOCAB] [--updates 3]
                                 [--sentences 16] [--length 32] [--rank 8] [--device cpu|cuda]
                                 [--precision fp32|bf16] [--modes full,lora,lora-ckpt] [--smoke]

Each mode runs in a child process of its own (so that each peak is its own): it builds the model at random (seeded),
then makes one untimed update and UPDATES timed ones on one fixed batch of random tokens, each update as mtkit train
makes it (teacher forcing, the loss fused with the output projection, backward, Adam). Modes:

- full: every parameter trains (Adam's moments for all of them);
- lora: PEFT's LoRA adapters of rank RANK on the attention projections (training.lora's default modules), only
  they train; the token embeddings and the tied output projection are frozen with the rest;
- lora-ckpt: lora with training.gradient_checkpointing (each layer recomputed in the backward pass).

Printed per mode: parameters, trained parameters, peak memory (the child's own peak RSS, ru_maxrss, on the CPU;
torch.cuda.max_memory_allocated on a GPU) and target tokens per second over the timed updates. Shapes: nllb-600m is
NLLB-200-distilled-600M's (d_model 1024, 12+12 layers, 16 heads, FFN 4096, 256,206 subwords), nllb-1.3b NLLB-200's
1.3B (24+24 layers, FFN 8192); --precision bf16 runs the updates under bf16 autocast, as training.precision: bf16
does (weights and Adam's moments stay float32); small (the default)
fits a 2-core CPU in a few minutes; --smoke is a tiny model and one timed update (the tests run it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHAPES = {  # d_model, encoder layers, decoder layers, heads, FFN, vocabulary
    "nllb-600m": (1024, 12, 12, 16, 4096, 256206),
    "nllb-1.3b": (1024, 24, 24, 16, 8192, 256206),
    "small": (512, 6, 6, 8, 2048, 32000),
    "smoke": (32, 1, 1, 2, 64, 100),
}
MODES = ("full", "lora", "lora-ckpt")


def shape_of(text: str) -> tuple[int, ...]:
    if text in SHAPES:
        return SHAPES[text]
    try:
        shape = tuple(int(x) for x in text.split(","))
    except ValueError:
        shape = ()
    if len(shape) != 6 or min(shape) < 1 or shape[0] % shape[3]:
        sys.exit(f"--shape {text}: give {', '.join(SHAPES)} or D,ENC,DEC,HEADS,FFN,VOCAB (D divisible by HEADS)")
    return shape


def child(args) -> dict:
    """One mode's figures, measured in this process."""
    import torch

    from mtkit import config as cfgmod
    from mtkit import lora
    from mtkit.config.schema import LoraSection
    from mtkit.models import build_model
    from mtkit.training.loss import fused_output_loss
    from mtkit.training.optim import make_optimizer
    from mtkit.training.step import TeacherForcing

    device = torch.device(args.device)
    d, enc, dec, heads, ffn, vocab = shape_of(args.shape)
    torch.manual_seed(1)
    cfg = cfgmod.TransformerConfig(
        d_model=d, heads=heads, encoder_layers=enc, decoder_layers=dec, ffn_dim=ffn, dropout=0.1, max_positions=512
    )
    model = build_model(cfg, vocab, vocab, True).to(device).train()
    if args.mode != "full":
        lora.inject(model, LoraSection(rank=args.rank, alpha=2.0 * args.rank))
        model.checkpoint_layers = args.mode == "lora-ckpt"
    training = cfgmod.TrainingConfig(run_dir="unused", lr=1e-4)
    optimizer = make_optimizer(model, training, training.lr)
    net = TeacherForcing(model)
    g = torch.Generator().manual_seed(2)
    src = torch.randint(4, vocab, (args.sentences, args.length), generator=g).to(device)
    tgt_in = torch.randint(4, vocab, (args.sentences, args.length), generator=g).to(device)
    target = torch.randint(4, vocab, (args.sentences * args.length,), generator=g).to(device)
    keep = torch.ones(args.sentences, args.length, dtype=torch.bool, device=device)
    weight, bias = model.output_projection()

    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.precision == "bf16")

    def update():
        with autocast:
            loss, _ = fused_output_loss(net(src, tgt_in, keep), weight, bias, target, 0.1)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return float(loss)

    def synchronize():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    update()  # untimed: allocations, the optimizer's moments
    synchronize()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    for _ in range(args.updates):
        loss = update()
    synchronize()
    seconds = time.perf_counter() - start
    return {
        "parameters": sum(p.numel() for p in model.parameters()),
        "trained": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "seconds": seconds,
        "tokens_per_s": args.updates * target.numel() / seconds,
        "loss": loss,
        "cuda_peak_mb": torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None,
    }


def measure(args, mode: str) -> dict:
    """Run one mode in a child process; its figures, with its peak RSS (MiB)."""
    cmd = [sys.executable, __file__, "--child", "--mode", mode, "--shape", args.shape, "--updates", str(args.updates)]
    cmd += ["--sentences", str(args.sentences), "--length", str(args.length), "--rank", str(args.rank)]
    cmd += ["--device", args.device, "--precision", args.precision]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out, err = proc.communicate()
    if proc.returncode != 0:
        sys.exit(f"mode {mode} failed ({proc.returncode}): {err.decode(errors='replace')[-2000:]}")
    figures = json.loads(out.decode().strip().splitlines()[-1])
    figures["rss_mb"] = figures.pop("rss_kb") / 1024
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", default="small", help=f"{', '.join(SHAPES)} or D,ENC,DEC,HEADS,FFN,VOCAB")
    parser.add_argument("--updates", type=int, default=3, help="timed updates per mode (after one untimed)")
    parser.add_argument("--sentences", type=int, default=16, help="sentences per batch")
    parser.add_argument("--length", type=int, default=32, help="source and target length of each sentence")
    parser.add_argument("--rank", type=int, default=8, help="LoRA rank (alpha = 2 x rank)")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--precision", default="fp32", choices=["fp32", "bf16"], help="bf16: updates under autocast")
    parser.add_argument("--modes", default="full,lora,lora-ckpt", help=f"comma-separated, of {', '.join(MODES)}")
    parser.add_argument("--smoke", action="store_true", help="a tiny model, one timed update (for the tests)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        import resource

        figures = child(args)
        figures["rss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KB on Linux
        print(json.dumps(figures))
        return
    if args.smoke:
        args.shape, args.updates, args.sentences, args.length = "smoke", 1, 4, 8
    shape_of(args.shape)  # a bad shape stops here, before any child
    modes = [m for m in args.modes.split(",") if m]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        sys.exit(f"--modes {args.modes}: choose among {', '.join(MODES)}")
    d, enc, dec, heads, ffn, vocab = shape_of(args.shape)
    print(
        f"shape: d_model {d}, {enc}+{dec} layers, {heads} heads, FFN {ffn}, vocabulary {vocab}; "
        f"{args.sentences} sentences x {args.length} tokens per update, {args.updates} timed updates; "
        f"LoRA rank {args.rank} on the attention projections; device {args.device}, {args.precision}"
    )
    peak = "peak CUDA MiB" if args.device == "cuda" else "peak RSS MiB"
    print(f"{'mode':<10} {'parameters':>13} {'trained':>13} {peak:>13} {'tgt tokens/s':>13} {'s/update':>9}")
    for mode in modes:
        f = measure(args, mode)
        memory = f["cuda_peak_mb"] if args.device == "cuda" else f["rss_mb"]
        print(
            f"{mode:<10} {f['parameters']:>13,} {f['trained']:>13,} {memory:>13.0f} "
            f"{f['tokens_per_s']:>13.1f} {f['seconds'] / args.updates:>9.2f}"
        )


if __name__ == "__main__":
    main()
