"""Write runs/bench-multi30k-transformer-compat: the 20-minute model with the config keys an older checkout rejects
dropped (keys added later, at their defaults), so that checkout and today's decode the same weights.

    python benchmarks/results/2026-11-26-int8-code-ab/compat_checkpoint.py work/ab/7d6665a
"""

import json
import re
import subprocess
import sys
from pathlib import Path

from safetensors import safe_open
from safetensors.torch import save_file

old = Path(sys.argv[1]).resolve()
src = Path("runs/bench-multi30k-transformer/checkpoints/average.safetensors")
dst = Path("runs/bench-multi30k-transformer-compat/checkpoints/average.safetensors")
with safe_open(str(src), "pt") as f:
    metadata, tensors = dict(f.metadata()), {k: f.get_tensor(k) for k in f.keys()}
meta, dropped = json.loads(metadata["mtkit"]), []
while True:
    metadata["mtkit"] = json.dumps(meta)
    save_file(tensors, str(dst), metadata=metadata)
    probe = f"import mtkit; mtkit.load({str(dst.parent.parent.resolve())!r}, dtype='int8')"
    run = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, cwd=old, env={"PYTHONPATH": str(old)}
    )
    unknown = re.search(r"unknown key '([^']+)'", run.stderr + run.stdout)
    if not unknown:
        break
    *parents, leaf = unknown.group(1).split(".")
    node = meta["config"]
    for key in parents:
        node = node[key]
    del node[leaf]
    dropped.append(unknown.group(1))
print("dropped:", ", ".join(dropped), "|", "loads" if run.returncode == 0 else run.stderr[-300:])
