#!/usr/bin/env python
"""A copy of a run whose model claims another direction: the same weights and tokenizer, its config (in config.yaml
and in the checkpoint) with other source and target languages. For serving benchmarks that need two models of
equal cost serving different pairs (docs/benchmarks.md, section 26); what it translates is not a translation.

    python scripts/relabel_run.py runs/multi30k-transformer runs/mirror-deen --src de --tgt en

Copies the checkpoint `mtkit translate RUN` would use as OUT/checkpoints/average.safetensors, the SentencePiece
models and calibration beside it.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import yaml


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--src", required=True, help="the source language it will claim")
    ap.add_argument("--tgt", required=True, help="the target language it will claim")
    args = ap.parse_args()

    from safetensors import safe_open
    from safetensors.torch import save_file

    from mtkit import checkpoint as ckpt

    if args.out.exists():
        raise SystemExit(f"{args.out} exists; remove it or choose another")
    source = ckpt.resolve(args.run)
    with safe_open(str(source), "pt") as f:
        metadata = dict(f.metadata())
        tensors = {name: f.get_tensor(name) for name in f.keys()}
    facts = json.loads(metadata["mtkit"])
    facts["config"]["data"]["src_lang"], facts["config"]["data"]["tgt_lang"] = args.src, args.tgt
    metadata["mtkit"] = json.dumps(facts)
    (args.out / "checkpoints").mkdir(parents=True)
    save_file(tensors, str(args.out / "checkpoints" / "average.safetensors"), metadata=metadata)
    config = yaml.safe_load((args.run / "config.yaml").read_text(encoding="utf-8"))
    config["data"]["src_lang"], config["data"]["tgt_lang"] = args.src, args.tgt
    (args.out / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    for extra in args.run.glob("*.model"):
        shutil.copy2(extra, args.out / extra.name)
    if (args.run / "calibration.json").is_file():
        shutil.copy2(args.run / "calibration.json", args.out / "calibration.json")
    print(f"{args.out}: {source.name} of {args.run} as {args.src}-{args.tgt}")


if __name__ == "__main__":
    main()
