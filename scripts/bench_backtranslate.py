#!/usr/bin/env python
"""Back-translation on Multi30k (docs/data.md, "Back-translation"), each en->de model trained for M minutes.

    python scripts/bench_backtranslate.py --minutes 20 --bt-minutes 20
    python scripts/bench_backtranslate.py --smoke        # a few updates on a few hundred sentences: a check, no result

Multi30k's training pairs (data/multi30k/train.{en,de}.gz) are cut in two halves: the first is the parallel data,
the second's German side the monolingual text. Each step is an ordinary `mtkit` command, printed before it runs and
timed:
1. a de->en model trained on the half for --bt-minutes;
2. `mtkit backtranslate` of the monolingual German with it (beam search), then the same corpus tagged (`--tag`,
   from the same chunks: the work folder is copied, nothing is translated again);
3. en->de models, each trained for --minutes: (a) the half; (b) the half plus its back-translation
   (`data.mix`, ratio 1: as many synthetic pairs as real ones); (c) the half plus the tagged back-translation
   (`data.user_symbols: [<BT>]`); (d) all the pairs;
4. `mtkit translate` of test_2016_flickr by each (their config's beam), scored with sacreBLEU.
Training runs as in scripts/bench_train.py: the wall-clock budget ends it (training.max_updates=null). Prints the
date and CPU, each command with its seconds, a line per decoded system (its hypotheses file) and a markdown table:
training pairs (the prepared train split), updates, test BLEU and chrF.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
import time
from pathlib import Path

import yaml
from benchlib import describe, read_gz, sets

ROOT = Path(__file__).resolve().parent.parent
MULTI30K = ROOT / "data" / "multi30k"
TAG = "<BT>"
LOG: list[tuple[str, float]] = []  # (command, seconds)
SMOKE_DATA = ["data.vocab_size=300"]  # --smoke: a vocabulary a few hundred sentences can fill
SMOKE = [  # a tiny model, a few updates, no calibration or averaging: the pipeline runs, the figures mean nothing
    *SMOKE_DATA,
    "model.d_model=32",
    "model.heads=2",
    "model.encoder_layers=1",
    "model.decoder_layers=1",
    "model.ffn_dim=64",
    "training.batch_tokens=600",
    "training.warmup_updates=2",
    "training.validate_every=4",
    "training.save_every=4",
    "training.valid_max_sentences=10",
    "training.calibrate=false",
    "training.average_last=0",
    "decoding.batch_size=100",
]


def sh(args: list) -> float:
    """``mtkit ARGS`` in this process (one start-up for the whole experiment), its command line printed first and
    logged for the report: its seconds (exit on failure)."""
    from mtkit.cli import main as mtkit_main

    line = "mtkit " + " ".join(shlex.quote(str(a)) for a in args)
    print(f"$ {line}", flush=True)
    start = time.perf_counter()
    code = mtkit_main([str(a) for a in args])
    seconds = time.perf_counter() - start
    LOG.append((line, seconds))
    if code:  # mtkit already printed its one-line reason
        sys.exit(code)
    return seconds


def write(path: Path, lines: list[str]) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return str(path)


def split_corpus(work: Path, sentences: int | None) -> dict:
    """The halves: {"half": (en, de), "mono": de, "all": (en, de)} file paths under WORK/corpus."""
    en, de = read_gz(MULTI30K / "train.en.gz")[:sentences], read_gz(MULTI30K / "train.de.gz")[:sentences]
    half = len(en) // 2
    corpus = work / "corpus"
    return {
        "half": (write(corpus / "half.en", en[:half]), write(corpus / "half.de", de[:half])),
        "mono": write(corpus / "mono.de", de[half:]),
        "all": (write(corpus / "all.en", en), write(corpus / "all.de", de)),
    }


def config(work: Path, base: dict, name: str, langs: tuple[str, str], train: tuple[str, str], **data) -> Path:
    """WORK/NAME.yaml: ``base`` with its data section for ``langs`` (Multi30k's val and test) and run dir."""
    src, tgt = langs
    splits = {"train": {"src": train[0], "tgt": train[1]}}
    for split, stem in (("valid", "val"), ("test", "test_2016_flickr")):
        splits[split] = {"src": str(MULTI30K / f"{stem}.{src}.gz"), "tgt": str(MULTI30K / f"{stem}.{tgt}.gz")}
    section = {**base["data"], "src_lang": src, "tgt_lang": tgt, "dir": str(work / "data" / name), "splits": splits}
    tree = {**base, "data": {**section, **data}, "training": {**base["training"], "run_dir": str(work / name)}}
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False), encoding="utf-8")
    return path


def train(path: Path, minutes: float, args) -> None:
    """`mtkit prepare` and `mtkit train` of ``path`` into a fresh run dir."""
    run_dir = Path(yaml.safe_load(path.read_text(encoding="utf-8"))["training"]["run_dir"])
    shutil.rmtree(run_dir, ignore_errors=True)
    budget = ["training.max_updates=null", f"training.max_minutes={minutes}"]
    if args.smoke:
        budget = [f"training.max_updates={args.smoke_updates}", "training.max_minutes=null"]
    overrides = sets([f"training.threads={args.threads}", *(SMOKE if args.smoke else []), *budget, *args.set])
    sh(["prepare", path, *sets([*(SMOKE_DATA if args.smoke else []), *args.set])])
    sh(["train", path, *overrides])


def updates(run_dir: Path) -> int:
    """The last update the run's metrics.jsonl records."""
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    return max([r["update"] for r in records if "update" in r] or [0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=20, help="wall-clock budget of each en->de training run")
    ap.add_argument("--bt-minutes", type=float, help="budget of the de->en model (default: --minutes)")
    ap.add_argument("--config", type=Path, default=ROOT / "configs/multi30k-transformer.yaml", help="model, training")
    ap.add_argument("--workdir", type=Path, default=Path("work/bench-backtranslate"))
    ap.add_argument("--set", action="append", default=[], help="extra overrides for every prepare and training run")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sentences", type=int, help="use only the first N training pairs (default: all)")
    ap.add_argument("--limit", type=int, help="decode only the first N test sentences")
    ap.add_argument("--smoke", action="store_true", help="300 pairs, 50 test sentences, a tiny model, 3 updates")
    ap.add_argument("--smoke-updates", type=int, default=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.smoke:
        args.sentences, args.limit = args.sentences or 300, args.limit or 50
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    from mtkit.scoring.score import corpus_scores

    work = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    base = yaml.safe_load(args.config.read_text(encoding="utf-8"))
    files = split_corpus(work, args.sentences)

    # 1. the de->en model on the half
    deen = config(work, base, "de-en-half", ("de", "en"), (files["half"][1], files["half"][0]))
    train(deen, args.bt_minutes or args.minutes, args)

    # 2. its back-translation of the monolingual German, plain and tagged (the same chunks)
    plain, tagged = work / "bt-plain", work / "bt-tagged"
    for stale in (plain, tagged, work / "bt-plain.work", work / "bt-tagged.work"):
        shutil.rmtree(stale, ignore_errors=True)
    sh(["backtranslate", work / "de-en-half", files["mono"], "--output", plain, "--threads", args.threads])
    shutil.copytree(work / "bt-plain.work", work / "bt-tagged.work")
    sh(["backtranslate", work / "de-en-half", files["mono"], "--output", tagged, "--tag", "--threads", args.threads])

    # 3. the en->de systems
    half = files["half"]
    systems = {
        "(a) half": config(work, base, "en-de-half", ("en", "de"), half),
        "(b) half + BT": config(work, base, "en-de-bt", ("en", "de"), half, mix=[{**bt_files(plain), "ratio": 1.0}]),
        "(c) half + tagged BT": config(
            work,
            base,
            "en-de-tagged-bt",
            ("en", "de"),
            half,
            mix=[{**bt_files(tagged), "ratio": 1.0}],
            user_symbols=[TAG],
        ),
        "(d) all pairs": config(work, base, "en-de-all", ("en", "de"), files["all"]),
    }
    for path in systems.values():
        train(path, args.minutes, args)

    # 4. decoding and scores
    src = write(work / "decode" / "test.en", read_gz(MULTI30K / "test_2016_flickr.en.gz")[: args.limit])
    refs = read_gz(MULTI30K / "test_2016_flickr.de.gz")[: args.limit]
    rows = []
    for name, path in systems.items():
        tree = yaml.safe_load(path.read_text(encoding="utf-8"))
        run_dir, data_dir = Path(tree["training"]["run_dir"]), Path(tree["data"]["dir"])
        hyp = work / "decode" / f"{run_dir.name}.de"
        sh(["translate", run_dir, "-i", src, "-o", hyp, "--threads", args.threads])
        hyps = hyp.read_text(encoding="utf-8").splitlines()
        scored = corpus_scores(hyps, [refs], metrics=("bleu", "chrf"))
        bleu, chrf = scored["bleu"]["score"], scored["chrf"]["score"]
        pairs = json.loads((data_dir / "manifest.json").read_text(encoding="utf-8"))["splits"]["train"]["pairs_kept"]
        rows.append((name, pairs, updates(run_dir), bleu, chrf))
        print(f"{name}: BLEU {bleu:.2f} chrF {chrf:.2f} on {len(hyps)} sentences ({hyp})", flush=True)

    # 5. the report
    minutes = "a few updates (--smoke)" if args.smoke else f"{args.minutes} min per en->de run"
    print(f"\n== mtkit bench_backtranslate: {minutes} on {args.threads} threads")
    print(f"{time.strftime('%Y-%m-%d %H:%M')}; {describe()}")
    for line, seconds in LOG:
        print(f"{seconds:8.1f} s  $ {line}")
    mono = len(Path(files["mono"]).read_text(encoding="utf-8").splitlines())
    print(f"\nparallel: {len(Path(half[0]).read_text(encoding='utf-8').splitlines())} pairs; monolingual: {mono} lines")
    print(f"test_2016_flickr: {len(refs)} sentences, sacreBLEU {scored['bleu']['signature']}\n")
    print("| system | train pairs | updates | BLEU | chrF |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, pairs, done, bleu, chrf in rows:
        print(f"| {name} | {pairs} | {done} | {bleu:.2f} | {chrf:.2f} |")


def bt_files(out: Path) -> dict:
    """A back-translated corpus folder's files as a data.mix part (en synthetic, de real)."""
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    return {"src": str(out / report["files"]["synthetic"]), "tgt": str(out / report["files"]["original"])}


if __name__ == "__main__":
    main()
