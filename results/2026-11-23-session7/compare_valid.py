"""Valid loss / greedy BLEU of run B beside run A's nearest validation in elapsed training time.

python results/2026-11-23-session7/compare_valid.py RUN_A RUN_B
"""
import json
import sys


def validations(run):
    with open(f"{run}/metrics.jsonl", encoding="utf-8") as f:
        return [r for r in map(json.loads, f) if r["kind"] == "valid"]


a, b = (validations(run) for run in sys.argv[1:3])
print(f"B = {sys.argv[2]}, A = {sys.argv[1]}")
print(f"{'B update':>8} {'min':>6} {'loss':>6} {'BLEU':>6}  | {'A update':>8} {'min':>6} {'loss':>6} {'BLEU':>6}")
for r in b:
    near = min(a, key=lambda x: abs(x["elapsed"] - r["elapsed"]))
    print(f"{r['update']:8d} {r['elapsed'] / 60:6.1f} {r['loss']:6.3f} {r.get('bleu', 0):6.2f}  | "
          f"{near['update']:8d} {near['elapsed'] / 60:6.1f} {near['loss']:6.3f} {near.get('bleu', 0):6.2f}")
