#!/usr/bin/env python
"""The quickstart: prepare -> train -> translate -> score on the shipped Multi30k English-German data.

    make demo            (creates .venv, then runs this script)

Each step is an ordinary `mtkit` command, printed before it runs, so every step can be repeated by hand.
Training runs configs/multi30k-demo.yaml's 1,300 updates (about 9.5 minutes on a 2-core AVX2-only CPU); the run
lands in runs/demo.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

from benchlib import describe, read_gz

ROOT = Path(__file__).resolve().parent.parent
CONFIG = "configs/multi30k-demo.yaml"
RUN = "runs/demo"
TEST_SRC = "data/multi30k/test_2016_flickr.en.gz"
TEST_REF = "data/multi30k/test_2016_flickr.de.gz"


def sh(args: list[str], log: list[str], **kw) -> subprocess.CompletedProcess:
    line = " ".join(shlex.quote(a) for a in args)
    log.append(line)
    print(f"\n\033[1m$ {line}\033[0m", flush=True)
    return subprocess.run([sys.executable, "-m", *args], check=True, cwd=ROOT, **kw)


def main() -> int:
    os.chdir(ROOT)
    log: list[str] = []
    started = time.perf_counter()
    run = Path(RUN)
    if run.exists():
        import shutil

        shutil.rmtree(run)  # the demo always starts a fresh run
    sh(["mtkit", "prepare", CONFIG], log)
    sh(["mtkit", "train", CONFIG, "--set", f"training.run_dir={RUN}"], log)

    sources, references = read_gz(TEST_SRC), read_gz(TEST_REF)
    (run / "test.en").write_text("\n".join(sources) + "\n", encoding="utf-8")
    (run / "test.ref.de").write_text("\n".join(references) + "\n", encoding="utf-8")
    sh(
        ["mtkit", "translate", RUN, "--input", f"{RUN}/test.en", "--output", f"{RUN}/test.hyp.de", "--beam-size", "5"],
        log,
    )
    scored = sh(
        ["mtkit", "score", f"{RUN}/test.ref.de", "-i", f"{RUN}/test.hyp.de", "--json"],
        log,
        capture_output=True,
        text=True,
    )
    scores = json.loads(scored.stdout)
    example = "A man is riding a bike."
    (run / "example.en").write_text(example + "\n", encoding="utf-8")
    sh(
        [
            "mtkit",
            "translate",
            RUN,
            "--input",
            f"{RUN}/example.en",
            "--output",
            f"{RUN}/example.de",
            "--plot-attention",
            f"{RUN}/attention",
        ],
        log,
    )
    hyps = (run / "test.hyp.de").read_text(encoding="utf-8").splitlines()
    metrics = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    train = [m for m in metrics if m["kind"] == "train"]
    minutes = (time.perf_counter() - started) / 60

    print("\n" + "=" * 78)
    print(f"mtkit demo report   ({time.strftime('%Y-%m-%d %H:%M')}, {minutes:.1f} min end to end, {describe()})")
    print("=" * 78)
    if train:
        steady = train[2:] or train
        print(
            f"trained {train[-1]['update']} updates in {train[-1]['elapsed'] / 60:.1f} min, "
            f"~{sum(m['tgt_tokens_per_s'] for m in steady) / len(steady):.0f} target tokens/s"
        )
    print(
        f"test_2016_flickr (1,000 sentences, beam 5):  BLEU {scores['bleu']['score']:.1f}   "
        f"chrF {scores['chrf']['score']:.1f}   TER {scores['ter']['score']:.1f}"
    )
    print(f"  {scores['bleu']['signature']}")
    for i in (0, 42):
        print(f"  EN  {sources[i]}\n  MT  {hyps[i]}\n  REF {references[i]}")
    print(f"'{example}' -> {(run / 'example.de').read_text(encoding='utf-8').strip()}")
    print(
        f"run dir {run}/ (curves.png, attention/); translate more with: "
        f'echo "A man is riding a bike." | mtkit translate {RUN}'
    )
    print("\ncommands run (repeat any of them by hand, inside .venv):")
    for line in log:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
