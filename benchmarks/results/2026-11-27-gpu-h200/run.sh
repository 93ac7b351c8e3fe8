#!/bin/bash
# The GPU sitting: run from the checkout's root on a machine with one CUDA GPU; outputs go to $OUT.
OUT=${OUT:-work/gpu-sitting}; mkdir -p "$OUT"; export PYTHONUNBUFFERED=1
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  python -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'transformers', transformers.__version__)"
  nproc; } > "$OUT/machine.txt" 2>&1
timeout 285 python scripts/bench_gpu.py --updates 40 --warmup 8 --profile 8 --decode-minutes 1.0 --work work/bench-gpu \
  > "$OUT/bench_gpu.txt" 2> "$OUT/bench_gpu.log"
for shape in nllb-600m nllb-1.3b; do
  timeout 115 python scripts/bench_lora.py --device cuda --precision bf16 --shape $shape --sentences 64 --length 64 \
    --updates 5 > "$OUT/bench_lora-$shape.txt"
done
timeout 80 python scripts/bench_gpu.py --shapes base --no-decode --compile --updates 40 --warmup 8 --profile 8 \
  --work work/bench-gpu > "$OUT/bench_gpu_compile.txt" 2> "$OUT/bench_gpu_compile.log"
