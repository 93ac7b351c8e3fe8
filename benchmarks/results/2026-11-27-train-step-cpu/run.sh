#!/usr/bin/env bash
# The same 120 updates of configs/multi30k-transformer.yaml on one CPU thread with the code of two commits:
#   benchmarks/results/2026-11-27-train-step-cpu/run.sh OLD_CHECKOUT NEW_CHECKOUT
# (each a checkout of the repository; the same .venv), then compare.py on the two metrics.jsonl files.
set -euo pipefail
OLD=$1 NEW=$2
SETS="--set data.dir=/tmp/m30k-data --set training.max_updates=120 --set training.max_minutes=null \
 --set training.log_every=10 --set training.validate_every=60 --set training.valid_max_sentences=100 \
 --set training.threads=1 --set training.average_last=0"
(cd "$NEW" && .venv/bin/python -m mtkit prepare configs/multi30k-transformer.yaml --set data.dir=/tmp/m30k-data)
for which in new old; do
  tree=$([ $which = old ] && echo "$OLD" || echo "$NEW")
  rm -rf /tmp/cpu-$which
  (cd "$tree" && OMP_NUM_THREADS=1 PYTHONPATH="$tree" "$NEW/.venv/bin/python" -m mtkit train \
     "$NEW/configs/multi30k-transformer.yaml" $SETS --set training.run_dir=/tmp/cpu-$which)
done
python3 "$(dirname "$0")/compare.py" /tmp/cpu-old/metrics.jsonl /tmp/cpu-new/metrics.jsonl
