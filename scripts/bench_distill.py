#!/usr/bin/env python
"""The distillation pipeline end to end (docs/distillation.md), each model trained for M minutes of wall time.

    python scripts/bench_distill.py --minutes 20
    python scripts/bench_distill.py --teacher runs/distill-teacher --ensemble --peer /tmp/mtkit-peer-opennmt
    python scripts/bench_distill.py --teacher runs/multi30k-transformer --select top mbr --beam-size 8 \
        --updates 1500 --no-original

Each step is an ordinary `mtkit` command, printed before it runs and timed:
1. the teacher: `mtkit prepare` and `mtkit train` of --teacher-config into runs/distill-teacher (or --teacher RUN,
   reused: its config.yaml is the teacher config unless --teacher-config is given);
2. with --ensemble, a second teacher (training.seed=2) into runs/distill-teacher-seed2;
3. `mtkit distill` of the teacher(s) into WORKDIR/distilled, then the student (--student-config) trained on it;
   with several --select rules (chrf, bleu, top, mbr: which n-best hypothesis becomes the target), one distilled
   data dir and one student for each (WORKDIR/distilled-RULE, WORKDIR/student-distilled-RULE);
4. the same student on the teacher's own data (same vocabulary), unless --no-original;
5. `mtkit translate` of test_2016_flickr and val at beam 5 and 1 (the other decoding options: each run's own),
   timed as whole processes, scored with sacreBLEU; parameters, and the size of `mtkit export --quantization int8`.
Training runs as in scripts/bench_train.py: the wall-clock budget ends it (max_updates=null except under a cosine
schedule); with --updates N each student trains exactly N updates instead (the clock then bounds nothing: students
compared at equal updates whatever else shares the machine). Prints: the date and CPU, each command with its
seconds, one markdown table, a row per model (BLEU / chrF, sentences/s, parameters, int8 export MiB, the pipeline's
wall-clock), then the distilled student's speed ratio to the teacher (and to onmt_translate at beam 5 with --peer:
the files benchmarks/peer_opennmt.sh wrote in WORKDIR) and its test BLEU minus the teacher's.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sys
import time
from pathlib import Path

import benchlib  # noqa: E402
import yaml
from benchlib import describe, mtkit_timed, read_gz, sets

from mtkit.data.selection import SELECTIONS

ROOT = Path(__file__).resolve().parent.parent
SPLITS = {"test": "test_2016_flickr", "val": "val"}
BEAMS = (5, 1)
LOG: list[tuple[str, float]] = []  # (command, seconds)


def sh(args: list, check: bool = True) -> tuple[int, float]:
    """``mtkit ARGS`` in a process of its own, logged for the report: (exit status, seconds)."""
    line, code, seconds = mtkit_timed(args)
    LOG.append((line, seconds))
    if code and check:  # mtkit already printed its one-line reason
        sys.exit(code)
    return code, seconds


def load_yaml(path) -> dict:
    return yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}


def train(config, tree: dict, run_dir: Path, args, extra: tuple = (), updates: int | None = None) -> float:
    """`mtkit train CONFIG` into a fresh ``run_dir`` for --minutes of wall time (or exactly ``updates`` updates,
    the clock unbounded): its seconds."""
    if run_dir.exists():
        shutil.rmtree(run_dir)
    if updates:
        budget_only, minutes = [f"training.max_updates={updates}"], "null"
    else:
        no_cap = (tree.get("training") or {}).get("schedule") == "cosine"
        budget_only, minutes = ([] if no_cap else ["training.max_updates=null"]), args.minutes
    overrides = [f"training.run_dir={run_dir}", f"training.max_minutes={minutes}"]
    overrides += [f"training.threads={args.threads}", *budget_only, *args.set, *extra]
    return sh(["train", config, *sets(overrides)])[1]


def decode(key: str, runs: list[Path], beams: list[int], inputs: dict, args, scores: dict) -> dict:
    """``mtkit translate`` of each split at each beam: {(split, beam): (seconds, sent/s, BLEU, chrF)}."""
    from mtkit.scoring.score import corpus_scores

    out = {}
    for beam in beams:
        for split, (src, refs) in inputs.items():
            hyp = Path(args.workdir) / "decode" / f"{key}.{split}.b{beam}.de"
            _, seconds = sh(["translate", *runs, "-b", beam, "-i", src, "-o", hyp, "--threads", args.threads])
            hyps = hyp.read_text(encoding="utf-8").splitlines()
            assert len(hyps) == len(refs), (hyp, len(hyps), len(refs))
            scored = corpus_scores(hyps, [refs], metrics=("bleu", "chrf"))
            scores.update({name: s["signature"] for name, s in scored.items()})
            bleu, chrf = scored["bleu"]["score"], scored["chrf"]["score"]
            out[split, beam] = (seconds, len(hyps) / seconds, bleu, chrf)
            print(
                f"{key} {split} beam {beam}: {seconds:.2f} s, {len(hyps) / seconds:.1f} sent/s, "
                f"BLEU {bleu:.2f} chrF {chrf:.2f} ({hyp})",
                flush=True,
            )
    return out


def export_mib(key: str, runs: list[Path], args) -> str:
    """The MiB of the CTranslate2 int8 model.bin `mtkit export` writes, or n/a (an ensemble, an export refused)."""
    if len(runs) != 1:
        return "n/a"
    out = Path(args.workdir) / "export" / key
    code, _ = sh(["export", runs[0], "--output", out, "--quantization", "int8", "--force"], check=False)
    return f"{(out / 'model.bin').stat().st_size / 2**20:.2f}" if code == 0 else "n/a"


def peer_row(workdir: Path, limit: int | None) -> dict:
    """onmt_translate's figures from the files benchmarks/peer_opennmt.sh MINUTES WORKDIR wrote: sentences/s per
    beam (its own "Total translation time", model loading excluded), test BLEU / chrF, parameters."""
    from mtkit.scoring.score import corpus_scores

    evals, data = workdir / "eval", workdir / "data"
    rates = {}
    for beam in BEAMS:
        log, hyps = evals / f"onmt.b{beam}.log", evals / f"onmt.b{beam}"
        for need in (log, hyps, evals / f"onmt.b{beam}.detok", data / "test_2016_flickr.de"):
            if not need.exists():
                raise SystemExit(
                    f"--peer {workdir}: {need} not found; run benchmarks/peer_opennmt.sh MINUTES {workdir}"
                )
        found = re.search(r"Total translation time \(s\): ([0-9.]+)", log.read_text(encoding="utf-8", errors="replace"))
        if not found:
            raise SystemExit(f"--peer {workdir}: {log} has no 'Total translation time' line")
        rates[beam] = len(hyps.read_text(encoding="utf-8").splitlines()) / float(found.group(1))
    hyps = (evals / "onmt.b5.detok").read_text(encoding="utf-8").splitlines()[:limit]
    refs = (data / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()[:limit]
    scored = corpus_scores(hyps, [refs], metrics=("bleu", "chrf"))
    train_log = workdir / "run" / "train.out"
    params = (
        re.search(r"number of parameters: (\d+)", train_log.read_text(errors="replace")) if train_log.exists() else None
    )
    return {
        "test": f"{scored['bleu']['score']:.2f} / {scored['chrf']['score']:.2f}",
        "val": "-",
        "rates": rates,
        "params": f"{int(params.group(1)):,}" if params else "-",
        "int8": "n/a",
        "pipeline": "-",
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=20, help="wall-clock budget of each training run")
    ap.add_argument("--teacher-config", help="default: configs/multi30k-transformer.yaml (--teacher: its config)")
    ap.add_argument("--student-config", default="configs/multi30k-student.yaml")
    ap.add_argument("--teacher", type=Path, metavar="RUN", help="reuse this trained teacher instead of training one")
    ap.add_argument("--ensemble", action="store_true", help="a second teacher (training.seed=2); distil from both")
    ap.add_argument(
        "--select", nargs="+", default=["chrf"], choices=SELECTIONS, help="mtkit distill --select: one student each"
    )
    ap.add_argument("--beam-size", type=int, help="mtkit distill --beam-size (default: the teacher's)")
    ap.add_argument("--updates", type=int, help="train each student exactly N updates instead of --minutes")
    ap.add_argument("--no-original", action="store_true", help="no student on the teacher's own data")
    ap.add_argument("--peer", type=Path, metavar="WORKDIR", help="add onmt_translate's row from peer_opennmt.sh")
    ap.add_argument("--workdir", type=Path, default=Path("work/bench-distill"))
    ap.add_argument("--set", action="append", default=[], help="extra overrides for every training run")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, help="decode only the first N lines of each split (smoke tests)")
    ap.add_argument(
        "--in-process", action="store_true", help="each mtkit command in this process (times without start-up)"
    )
    args = ap.parse_args()
    benchlib.IN_PROCESS = args.in_process
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    import torch

    from mtkit.checkpoint import load_checkpoint

    torch.set_num_threads(args.threads)
    work = args.workdir
    (work / "decode").mkdir(parents=True, exist_ok=True)
    teacher_config = args.teacher_config or (
        args.teacher / "config.yaml" if args.teacher else "configs/multi30k-transformer.yaml"
    )
    teacher_tree, student_tree = load_yaml(teacher_config), load_yaml(args.student_config)
    steps: dict[str, float | None] = {"prepare": sh(["prepare", teacher_config, *sets(args.set)])[1]}

    # 1-2. the teacher(s)
    teachers = [args.teacher or Path("runs/distill-teacher")]
    steps["teacher"] = None if args.teacher else train(teacher_config, teacher_tree, teachers[0], args)
    if args.ensemble:
        teachers.append(Path("runs/distill-teacher-seed2"))
        steps["teacher2"] = train(teacher_config, teacher_tree, teachers[1], args, ("training.seed=2",))

    # 3. distillation into a fresh data dir per selection rule, then a student on each
    students = {}  # rule -> (row key, student run)
    for rule in args.select:
        tail = f"-{rule}" if len(args.select) > 1 else ""
        distilled = work / f"distilled{tail}"
        for stale in (distilled, work / f"distilled{tail}.distill"):
            shutil.rmtree(stale, ignore_errors=True)
        distill = ["distill", *teachers, "--config", args.student_config, "--threads", args.threads]
        distill += ["--select", rule] + (["--beam-size", args.beam_size] if args.beam_size else [])
        steps[f"distill{tail}"] = sh(distill + sets([*args.set, f"data.dir={distilled}"]))[1]
        student = work / f"student-distilled{tail}"
        extra = (f"data.dir={distilled}",)
        steps[f"student{tail}"] = train(args.student_config, student_tree, student, args, extra, args.updates)
        students[rule] = (f"student-distilled{tail}", student, tail)

    # 4. the same student on the teacher's data
    if not args.no_original:
        original_config = work / "student-original.yaml"
        original_data = dict(student_tree, data=teacher_tree["data"])
        original_config.write_text(yaml.safe_dump(original_data, sort_keys=False), "utf-8")
        original = work / "student-original"
        steps["original"] = train(original_config, student_tree, original, args, updates=args.updates)

    # 5. decoding, sizes
    inputs = {}
    for split, stem in SPLITS.items():
        src = work / "decode" / f"{split}.en"
        src.write_text("\n".join(read_gz(ROOT / f"data/multi30k/{stem}.en.gz")[: args.limit]) + "\n", encoding="utf-8")
        inputs[split] = (src, read_gz(ROOT / f"data/multi30k/{stem}.de.gz")[: args.limit])
    teacher_steps = ["teacher"] if args.teacher else ["prepare", "teacher"]
    models = [("teacher", "teacher", teachers[:1], teacher_steps)]
    if args.ensemble:
        models.append(("ensemble", "teacher ensemble", teachers, teacher_steps + ["teacher2"]))
    for rule, (key, student, tail) in students.items():
        distill_steps = teacher_steps + ["teacher2"] * args.ensemble + [f"distill{tail}", f"student{tail}"]
        name = f"distilled student ({rule})" if tail else "distilled student"
        models.append((key, name, [student], distill_steps))
    if not args.no_original:
        models.append(("student-original", "original-data student", [original], ["prepare", "original"]))
    rows, signatures = {}, {}
    for key, name, runs, pipeline in models:
        default = load_yaml(runs[0] / "config.yaml").get("decoding", {}).get("beam_size", 5)
        beams = list(BEAMS) + ([default] if default not in BEAMS else [])
        figures = decode(key, runs, beams, inputs, args, signatures)
        params = sum(load_checkpoint(run).model.num_parameters() for run in runs)
        known = [steps[s] for s in pipeline if steps[s] is not None]
        clock = ["reused"] * (len(known) < len(pipeline)) + [f"{sum(known) / 60:.1f} min"] * bool(known)
        rows[name] = {
            "test": "{2:.2f} / {3:.2f}".format(*figures["test", 5]),
            "val": "{2:.2f} / {3:.2f}".format(*figures["val", 5]),
            "rates": {beam: figures["test", beam][1] for beam in beams},
            "default": default,
            "bleu": figures["test", 5][2],
            "params": f"{params:,}",
            "int8": export_mib(key, runs, args),
            "pipeline": " + ".join(clock),
        }
    if args.peer:
        rows["onmt_translate (peer)"] = peer_row(args.peer, args.limit)

    # 6. the report
    sentences = {split: len(refs) for split, (_, refs) in inputs.items()}
    budget = f"{args.updates} updates per student" if args.updates else f"{args.minutes} min per training run"
    print(f"\n== mtkit bench_distill: {budget} on {args.threads} threads")
    print(f"{time.strftime('%Y-%m-%d %H:%M')}; {describe()}")
    for line, seconds in LOG:
        print(f"{seconds:8.1f} s  $ {line}")
    print(f"\ndecoded: {sentences['test']} test_2016_flickr and {sentences['val']} val sentences; sent/s on test")
    columns = ["model", "test BLEU / chrF (beam 5)", "val BLEU / chrF (beam 5)", "beam-5 sent/s", "greedy sent/s"]
    columns += ["params", "int8 export MiB", "pipeline wall-clock"]
    print("| " + " | ".join(columns) + " |\n" + "|---" * len(columns) + "|")
    for name, r in rows.items():
        print(
            f"| {name} | {r['test']} | {r['val']} | {r['rates'][5]:.1f} | {r['rates'][1]:.1f} | {r['params']} "
            f"| {r['int8']} | {r['pipeline']} |"
        )
    teacher_row = rows["teacher"]
    for name in [n for n in rows if n.startswith("distilled student")]:
        student_row = rows[name]
        rate = student_row["rates"][student_row["default"]]
        print(
            f"\n{name} / teacher, default decoding (beam {student_row['default']} / beam {teacher_row['default']}), "
            f"sentences/s: {rate / teacher_row['rates'][teacher_row['default']]:.2f}x (goal >= 3x)"
        )
        if args.peer:
            print(
                f"{name} beam {student_row['default']} / onmt_translate beam 5, sentences/s: "
                f"{rate / rows['onmt_translate (peer)']['rates'][5]:.2f}x (goal >= 7x; onmt_translate's own "
                "translation time on the whole test set, model loading excluded; mtkit's whole processes)"
            )
        print(f"{name} test BLEU - teacher's: {student_row['bleu'] - teacher_row['bleu']:+.2f} (goal >= -1.0)")
    for name, signature in signatures.items():
        print(f"{name}: {signature}")


if __name__ == "__main__":
    main()
