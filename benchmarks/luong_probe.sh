#!/usr/bin/env bash
# Short probes of the Luong baseline: 150 updates of configs/multi30k-luong.yaml per variant, printing the
# training loss every 25 updates, to see which change lets the model leave the unigram plateau (loss ~6.2).
#
#   benchmarks/luong_probe.sh [VARIANT ...]
#
# A VARIANT is one quoted, space-separated list of `section.key=value` overrides (passed to `mtkit train --set`).
# Without arguments it runs the probes of docs/benchmarks.md ("RNN baselines"): the paper's uniform
# initialisation (model.param_init=0.1) alone and with one change each, then PyTorch's initialisation
# (model.param_init=0, what the config ships). Output of 2026-11-23:
# benchmarks/results/2026-11-23-rnn-20min/luong-probe.txt. Environment: MTKIT (default .venv/bin/mtkit, else
# mtkit on PATH), THREADS (default 2). About 2 minutes per variant on 2 CPU cores.
set -euo pipefail

me=benchmarks/luong_probe.sh
cd "$(dirname "$0")/.."

if [ "$#" -eq 0 ]; then
    set -- "model.param_init=0.1" \
        "model.param_init=0.1 model.input_feeding=false" \
        "model.param_init=0.1 model.dropout=0.0" \
        "model.param_init=0.1 model.layers=1" \
        "model.param_init=0.1 training.lr=0.0005" \
        "model.param_init=0"
fi
for variant in "$@"; do
    for item in $variant; do
        if ! [[ "$item" =~ ^[a-z_]+\.[a-z_]+=[^[:space:]]+$ ]]; then
            echo "$me: '$item' is not a section.key=value override (e.g. model.input_feeding=false)" >&2
            exit 2
        fi
    done
done

if [ -z "${MTKIT:-}" ]; then
    if [ -x .venv/bin/mtkit ]; then MTKIT=.venv/bin/mtkit; else MTKIT=mtkit; fi
fi
command -v "$MTKIT" >/dev/null || { echo "$me: $MTKIT not found; run make setup first (or set MTKIT)" >&2; exit 2; }
THREADS=${THREADS:-2}
export OMP_NUM_THREADS=$THREADS MKL_NUM_THREADS=$THREADS

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
"$MTKIT" prepare configs/multi30k-luong.yaml >/dev/null

n=0
for variant in "$@"; do
    n=$((n + 1))
    sets=()
    for item in $variant; do sets+=(--set "$item"); done
    echo "== $variant  $(date -u +%H:%M:%S)"
    "$MTKIT" train configs/multi30k-luong.yaml --set training.max_updates=150 --set training.validate_every=100000 \
        --set training.log_every=25 --set "training.run_dir=$scratch/run$n" "${sets[@]}" 2>&1 | grep '^update' || {
        echo "$me: the run with '$variant' failed; rerun it by hand to see why" >&2
        exit 1
    }
done
