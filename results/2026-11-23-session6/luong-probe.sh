#!/bin/bash
# Luong plateau probe: 150 updates each, training loss every 25 (baseline: 6.26 at 150, 6.24 at 225; Bahdanau 5.40 at 150)
cd /work/main; source .venv/bin/activate
out=results/2026-11-23-session6/luong-probe.txt
for v in "model.input_feeding=false" "model.dropout=0.0" "model.layers=1" "training.lr=0.0005"; do
  echo "== --set $v  $(date -u +%H:%M:%S)" >> $out
  OMP_NUM_THREADS=2 mtkit train configs/multi30k-luong.yaml --set training.max_updates=150 --set training.validate_every=100000 \
    --set training.run_dir=/tmp/probe-$(echo $v | tr '=.' '__') --set "$v" 2>&1 | grep "^update" >> $out
done
echo "done $(date -u +%H:%M:%S)" >> $out
