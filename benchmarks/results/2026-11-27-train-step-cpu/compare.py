"""Two runs' metrics.jsonl side by side: every logged loss, NLL, BLEU and chrF must be the same number."""

import json
import sys

old, new = ([json.loads(line) for line in open(path)] for path in sys.argv[1:3])
different = [
    (a["kind"], a["update"], key, a[key], b[key])
    for a, b in zip(old, new)
    for key in ("loss", "nll", "bleu", "chrf")
    if key in a and a[key] != b.get(key)
]
for a, b in zip(old, new):
    extra = f"BLEU {a.get('bleu'):.2f} / {b.get('bleu'):.2f}" if a["kind"] == "valid" else ""
    print(f"{a['kind']:5} {a['update']:4}  loss {a['loss']!r:22} {b['loss']!r:22} {extra}")
print(f"{len(old)} and {len(new)} records; {'identical' if not different and len(old) == len(new) else different}")
