#!/usr/bin/env python
"""`mtkit translate EXPORT` against a plain CTranslate2 + SentencePiece script, as whole processes.

    python scripts/bench_ct2_engine.py RUN [--input FILE] [--repeat 3] [--out DIR] [--inside] [--cases float32:1 ...]

Exports RUN (a run dir) to CTranslate2 twice, float32 and int8 (DIR/ct2-float32, DIR/ct2-int8; default DIR:
RUN/ct2-bench), then for each compute type and beam 5 and 1 (or the COMPUTE:BEAM pairs of --cases) runs, taking
turns --repeat times:
  mtkit translate EXPORT -b B --threads 2 -i FILE                  (the default search, ranked as mtkit ranks)
  mtkit translate EXPORT -b B --threads 2 -i FILE --search ctranslate2    (beam 5 only: CTranslate2's own)
  python scripts/ct2_direct.py EXPORT --beam-size B --threads 2 --batch-size N --max-len-a A --max-len-b B < FILE
with the run's batch size and output limit, each turn starting with the next command, and prints each time, the
fastest of each, their ratio (the script's time over mtkit's: 1.0 is parity), the median of the turns' own ratios
(steadier where the machine's speed drifts) and how many output lines equal the script's. With --inside, each
process runs through scripts/ct2_timed.py, and each time is split into CTranslate2's translate_batch calls and the
rest (start-up, Python, input and output), with the medians of both per command. First, the start-up: both
commands (float32, greedy) over an empty input and over its first 5 lines, the fastest of 2 x --repeat. FILE defaults to
data/multi30k/test_2016_flickr.en.gz (held out from training), decompressed into DIR.

mtkit's modules are compiled to bytecode first (`python -m compileall`), as `pip install` leaves them: under
PYTHONDONTWRITEBYTECODE an editable install would otherwise compile them again in every process.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import describe  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SLUGS = {"mtkit": "mtkit", "--search ctranslate2": "search", "ct2_direct.py": "direct"}  # output file names


def timed(cmd: list[str], stdin_path: Path, out_path: Path) -> float:
    with open(stdin_path, "rb") as src, open(out_path, "wb") as out:
        start = time.perf_counter()
        done = subprocess.run(cmd, stdin=src, stdout=out, stderr=subprocess.PIPE)
        seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({done.returncode}): {done.stderr.decode(errors='replace')}")
    return seconds


def commands_for(export: Path, compute: str, beam: int, threads: int) -> dict[str, list[str]]:
    """mtkit translate (and, at beam > 1, with --search ctranslate2) and ct2_direct.py with the same settings."""
    decoding = json.loads((export / "mtkit_export.json").read_text())["runtime"]["decoding"]
    mtkit = [sys.executable, "-m", "mtkit", "translate", str(export), "-b", str(beam), "--threads", str(threads)]
    commands = {"mtkit": mtkit}
    if beam > 1:
        commands["--search ctranslate2"] = [*mtkit, "--search", "ctranslate2"]
    commands["ct2_direct.py"] = [
        sys.executable,
        str(ROOT / "scripts" / "ct2_direct.py"),
        str(export),
        *("--beam-size", str(beam), "--threads", str(threads), "--compute-type", compute),
        *("--batch-size", str(decoding["batch_size"]), "--max-len-a", str(decoding["max_len_a"])),
        *("--max-len-b", str(decoding["max_len_b"])),
    ]
    return commands


def inside(cmd: list[str], report: Path) -> list[str]:
    """``cmd`` (a Python program) run through ct2_timed.py, which writes its time in CTranslate2's calls to
    ``report``."""
    return [cmd[0], str(ROOT / "scripts" / "ct2_timed.py"), str(report), *cmd[1:]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path)
    parser.add_argument("--input", type=Path, default=ROOT / "data" / "multi30k" / "test_2016_flickr.en.gz")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--inside", action="store_true", help="also split each process's time: CTranslate2's calls and the rest"
    )
    parser.add_argument(
        "--cases",
        nargs="+",
        default=["float32:5", "float32:1", "int8:5", "int8:1"],
        help="which COMPUTE:BEAM runs to time (default: all four)",
    )
    args = parser.parse_args()
    work = args.out or args.run / "ct2-bench"
    work.mkdir(parents=True, exist_ok=True)
    source = work / "source.txt"
    opener = gzip.open if args.input.suffix == ".gz" else open
    with opener(args.input, "rt", encoding="utf-8") as f:
        source.write_text(f.read(), encoding="utf-8")
    lines = len(source.read_text(encoding="utf-8").splitlines())
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "mtkit")], check=True, capture_output=True)

    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {describe()}")
    print(f"# {args.run}, {lines} lines of {args.input.name}; seconds per whole process, taking turns")
    exports = {}
    for compute in ("float32", "int8"):
        exports[compute] = export = work / f"ct2-{compute}"
        quantize = [] if compute == "float32" else ["--quantization", "int8"]
        subprocess.run(
            [sys.executable, "-m", "mtkit", "export", str(args.run), "--output", str(export), "--force", *quantize],
            check=True,
            capture_output=True,
        )
    head = {"empty input": work / "empty.txt", "5 lines": work / "five.txt"}
    head["empty input"].write_text("", encoding="utf-8")
    head["5 lines"].write_text("".join(line + "\n" for line in source.read_text().splitlines()[:5]), encoding="utf-8")
    for what, path in head.items():
        commands = commands_for(exports["float32"], "float32", 1, args.threads)
        times: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(2 * args.repeat):
            for name, cmd in commands.items():
                times[name].append(timed(cmd, path, work / "out-start.txt"))
        print(f"start-up, {what}: " + ", ".join(f"{n} {min(t):.3f} s" for n, t in times.items()), flush=True)
    cases = [(compute, int(beam)) for compute, beam in (case.split(":") for case in args.cases)]
    for compute, export in exports.items():
        for beam in (b for c, b in cases if c == compute):
            commands = commands_for(export, compute, beam, args.threads)
            if args.inside:
                commands = {name: inside(cmd, work / f"inside-{SLUGS[name]}.json") for name, cmd in commands.items()}
            times = {name: [] for name in commands}
            splits: dict[str, list[dict]] = {name: [] for name in commands}
            names = list(commands)
            for turn in range(args.repeat):
                # each turn starts with another command, so none is always first (or always after the same one)
                for name in names[turn % len(names) :] + names[: turn % len(names)]:
                    times[name].append(timed(commands[name], source, work / f"out-{compute}-{beam}-{SLUGS[name]}.txt"))
                    if args.inside:
                        splits[name].append(json.loads((work / f"inside-{SLUGS[name]}.json").read_text()))
                print(
                    f"{compute} beam {beam} run {turn + 1}: "
                    + ", ".join(
                        f"{name} {t[-1]:.3f} s"
                        + (
                            f" (CTranslate2 {splits[name][-1]['ctranslate2']:.3f} s, rest "
                            f"{t[-1] - splits[name][-1]['ctranslate2']:.3f} s)"
                            if args.inside
                            else ""
                        )
                        for name, t in times.items()
                    ),
                    flush=True,
                )
            if args.inside:
                print(
                    f"{compute} beam {beam}, medians: "
                    + ", ".join(
                        f"{name} CTranslate2 {statistics.median(x['ctranslate2'] for x in splits[name]):.3f} s, "
                        f"rest {statistics.median(t - x['ctranslate2'] for t, x in zip(times[name], splits[name])):.3f} s"
                        for name in commands
                    ),
                    flush=True,
                )
            reference = (work / f"out-{compute}-{beam}-direct.txt").read_text(encoding="utf-8").splitlines()
            best_direct = min(times["ct2_direct.py"])
            for name in commands:
                if name == "ct2_direct.py":
                    continue
                out = (work / f"out-{compute}-{beam}-{SLUGS[name]}.txt").read_text(encoding="utf-8").splitlines()
                same = sum(a == b for a, b in zip(out, reference))
                turns = sorted(d / t for d, t in zip(times["ct2_direct.py"], times[name]))
                print(
                    f"{compute} beam {beam}: {name} fastest {min(times[name]):.3f} s against {best_direct:.3f} s, "
                    f"ratio {best_direct / min(times[name]):.2f} (median of the turns' ratios "
                    f"{statistics.median(turns):.2f}); lines equal to the script's {same}/{len(reference)}",
                    flush=True,
                )


if __name__ == "__main__":
    main()
