"""BLEU of one model run three ways on test_2016_flickr: mtkit's CTranslate2 engine, Argos Translate with the
model's `mtkit export --format argos` package, and the LibreTranslate server with that package installed.

    python scripts/bench_argos.py [--run runs/demo] [--out benchmarks/results/DATE-argos] [--work work/bench-argos]

1. Builds (or reuses) the virtual environments of benchmarks/argos/venvs.sh (.venv-argos).
2. Exports the run twice: as CTranslate2 (WORK/ct2, float32) and as an Argos package (WORK/en_de.argosmodel,
   float32).
3. Translates the test set: ``mtkit translate WORK/ct2 --engine ctranslate2`` (the run's decoding settings);
   ``argostranslate.translate.translate(line, src, tgt)`` line by line, after ``install_from_path`` into a folder of
   its own, with no way out (HTTP(S) proxies on a closed port); LibreTranslate's ``/translate`` (32 lines a request)
   on a server started with ``--load-only`` on that folder, with an empty local package index so that its start-up
   fetches nothing.
4. Scores each with sacreBLEU against the references and prints one line per system, the difference to mtkit's
   engine and the seconds each took; OUT gets the three outputs and the report.

Argos decodes with its own search (beam 4, length penalty 0.2) and loads the model with compute_type "auto" (int8
on a CPU with the instructions for it); LibreTranslate with the model's own type and LibreTranslate's formatting
(the source's first-letter case and final punctuation mark). So their lines differ from mtkit's in places.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "benchmarks" / "argos"))

from argos_offline import offline_env  # noqa: E402
from benchlib import describe, read_gz  # noqa: E402

ARGOS_JOB = """
import json, sys, time
import argostranslate.package as package
import argostranslate.translate as translate
job = json.load(open(sys.argv[1], encoding="utf-8"))
package.install_from_path(job["package"])
lines = open(job["input"], encoding="utf-8").read().splitlines()
start = time.perf_counter()
out = [translate.translate(line, job["source"], job["target"]) for line in lines]
seconds = time.perf_counter() - start
open(job["output"], "w", encoding="utf-8").write("".join(line.replace("\\n", " ") + "\\n" for line in out))
print(json.dumps({"seconds": seconds}))
"""


def run(command: list, **kwargs) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        sys.exit(f"bench_argos: {' '.join(map(str, command[:3]))} ... failed:\n{done.stderr[-3000:]}")
    return done


def libretranslate(venv: Path, home: Path, lines: list[str], source: str, target: str, threads: int, log: Path):
    """LibreTranslate's answers for ``lines`` (32 a request) and the seconds they took."""
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [venv / "bin" / "libretranslate", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--load-only", f"{source},{target}", "--threads", str(threads), "--disable-web-ui"]
    with open(log, "w", encoding="utf-8") as out:
        server = subprocess.Popen(
            [str(c) for c in command], stdout=out, stderr=subprocess.STDOUT, env=offline_env(home, threads)
        )
    client = httpx.Client(trust_env=False, timeout=600)
    try:
        deadline = time.monotonic() + 180
        while True:
            if server.poll() is not None:
                sys.exit(f"bench_argos: LibreTranslate stopped; see {log}")
            try:
                client.get(f"http://127.0.0.1:{port}/languages")
                break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    sys.exit(f"bench_argos: LibreTranslate did not answer in 180 s; see {log}")
                time.sleep(0.5)
        start, out = time.perf_counter(), []
        for i in range(0, len(lines), 32):
            body = {"q": lines[i : i + 32], "source": source, "target": target}
            answer = client.post(f"http://127.0.0.1:{port}/translate", json=body)
            answer.raise_for_status()
            out += answer.json()["translatedText"]
        return out, time.perf_counter() - start
    finally:
        client.close()
        server.terminate()
        server.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", type=Path, default=ROOT / "runs" / "demo")
    parser.add_argument("--test", default="test_2016_flickr", help="a split of data/multi30k")
    parser.add_argument("--out", type=Path, help="where to write the outputs and report (default: print only)")
    parser.add_argument("--work", type=Path, default=ROOT / "work" / "bench-argos")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import sacrebleu

    from mtkit.serving.languages import run_languages

    source, target = run_languages(args.run)
    src_lines = read_gz(ROOT / "data" / "multi30k" / f"{args.test}.{source}.gz")
    refs = read_gz(ROOT / "data" / "multi30k" / f"{args.test}.{target}.gz")
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    (work / "source.txt").write_text("".join(line + "\n" for line in src_lines), encoding="utf-8")

    start = time.perf_counter()
    run(["bash", ROOT / "benchmarks" / "argos" / "venvs.sh"])
    venv_seconds = time.perf_counter() - start
    mtkit = [sys.executable, "-m", "mtkit"]
    run([*mtkit, "export", args.run, "--output", work / "ct2", "--force"])
    package = work / f"{source}_{target}.argosmodel"
    run([*mtkit, "export", args.run, "--format", "argos", "--output", package, "--force"])

    outputs, seconds = {}, {}
    start = time.perf_counter()
    done = run(
        [*mtkit, "translate", work / "ct2", "--engine", "ctranslate2", "--threads", args.threads],
        input=(work / "source.txt").read_text(encoding="utf-8"),
    )
    seconds["mtkit"], outputs["mtkit"] = time.perf_counter() - start, done.stdout.splitlines()

    home = work / "argos-home"
    subprocess.run(["rm", "-rf", str(home)], check=True)
    job = {"package": str(package), "input": str(work / "source.txt"), "output": str(work / "argos.txt")}
    (work / "job.json").write_text(json.dumps({**job, "source": source, "target": target}), encoding="utf-8")
    (work / "argos_job.py").write_text(ARGOS_JOB, encoding="utf-8")
    argos_python = ROOT / ".venv-argos" / "argos" / "bin" / "python"
    done = run([argos_python, work / "argos_job.py", work / "job.json"], env=offline_env(home, args.threads))
    seconds["argos"] = json.loads(done.stdout.strip().splitlines()[-1])["seconds"]
    outputs["argos"] = (work / "argos.txt").read_text(encoding="utf-8").splitlines()

    lt_home = work / "libretranslate-home"
    subprocess.run(["rm", "-rf", str(lt_home)], check=True)
    lt_venv = ROOT / ".venv-argos" / "libretranslate"
    install = "import sys, argostranslate.package as p; p.install_from_path(sys.argv[1])"
    run([lt_venv / "bin" / "python", "-c", install, package], env=offline_env(lt_home, args.threads))
    outputs["libretranslate"], seconds["libretranslate"] = libretranslate(
        lt_venv, lt_home, src_lines, source, target, args.threads, work / "libretranslate.log"
    )

    report = [
        f"== {args.run.name} ({source} -> {target}), {args.test} ({len(src_lines)} sentences), float32 model",
        f"date        {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
        f"machine     {describe()}",
        f"venvs       {venv_seconds:.0f} s (benchmarks/argos/venvs.sh; 0 when reused)",
    ]
    base = None
    for name, label in (
        ("mtkit", "mtkit translate --engine ctranslate2"),
        ("argos", "argostranslate 1.11.0 translate()"),
        ("libretranslate", "LibreTranslate 1.9.6 /translate"),
    ):
        hyps = outputs[name]
        assert len(hyps) == len(refs), (name, len(hyps), len(refs))
        bleu = sacrebleu.corpus_bleu(hyps, [refs]).score
        chrf = sacrebleu.corpus_chrf(hyps, [refs]).score
        base = bleu if base is None else base
        same = sum(h == m for h, m in zip(hyps, outputs["mtkit"]))
        report.append(
            f"{label:<40} BLEU {bleu:5.2f} ({bleu - base:+.2f})  chrF {chrf:5.2f}  "
            f"{same / len(refs):6.1%} lines as mtkit's  {seconds[name]:6.1f} s"
        )
    text = "\n".join(report) + "\n"
    print(text, end="")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        for name, hyps in outputs.items():
            (args.out / f"{name}.{target}").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
        (args.out / "bench_argos.txt").write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
