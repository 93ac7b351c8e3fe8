#!/bin/bash
# The same model decoded by three checkouts, taking turns: 7d6665a (the code of section 2's 2026-11-24 sitting),
# 2bea9fb (2026-11-26 04:00) and HEAD (the time-major caches, transposed cross-attention keys, row_argmax, the
# first beam step per sentence). From the repository root:
#   for c in 7d6665a 2bea9fb HEAD; do git worktree add --detach work/ab/$c $c; ln -s ../../../runs work/ab/$c/runs; done
#   python benchmarks/results/2026-11-26-int8-code-ab/compat_checkpoint.py work/ab/7d6665a
#   bash benchmarks/results/2026-11-26-int8-code-ab/run.sh 4
for turn in $(seq "${1:-4}"); do
  echo "== turn $turn, $(date -u +%H:%M:%S)"
  for c in 7d6665a 2bea9fb HEAD; do
    (cd work/ab/$c && PYTHONPATH=. python scripts/bench_translate.py runs/bench-multi30k-transformer-compat \
      --compute-type int8 --beams 5 1 2>&1 | grep "^torch" | sed "s/^/$c /")
  done
done
