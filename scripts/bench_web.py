"""The web export against mtkit itself, in one sitting: equality, BLEU, speed and size.

    python scripts/bench_web.py [--run runs/demo] [--work work/bench-web] [--out DIR] [--threads 4] [--max-lines N]
                                [--screenshot docs/images/web-page.png] [--batch 32]

1. Exports the run twice, ``mtkit export RUN --format web --quantization float32`` and ``int8`` (WORK/float32,
   WORK/int8), and prints each site's size: the model's files (what the page downloads for the model) and the whole
   folder (with transformers.js and onnxruntime-web's WebAssembly).
2. Translates the test set (default data/multi30k test_2016_flickr en -> de) with ``mtkit translate RUN -b 1
   --dtype float32 --threads 1`` in a process of its own, and once more with an empty input: its seconds less the
   empty run's are its translation time without start-up (loading Python, torch and the model).
3. Serves each site as ``mtkit serve --web`` does (cross-origin isolated) and loads it in headless Chromium (the
   system's, /usr/bin/chromium, driven by Playwright), every request off the page's origin blocked: after
   ``window.mtkit.ready`` and a warm-up of 8 lines, ``window.mtkit.translate`` of the whole test set is timed in the
   page, on one thread (``?threads=1``) and on ``--threads`` (``?threads=N``).
4. Prints: the share of lines where the float32 page equals mtkit's greedy output, BLEU and chrF of mtkit, the
   float32 page and the int8 page against the references (sacreBLEU), sentences per second of each, and the int8
   page's speed as a multiple of mtkit's one-thread greedy. OUT (if given) gets every output and report.json.

Nothing is held to a figure here: it measures. Run it on a quiet machine; at full size it takes minutes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

from benchlib import describe, own_origin_page  # noqa: E402

WARM_UP = 8


def read_lines(path: Path) -> list[str]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def mtkit(args: list, stdin: str = "") -> tuple[str, float]:
    """``mtkit ARGS`` in a process of its own: (stdout, seconds)."""
    print("$ mtkit " + " ".join(map(str, args)), flush=True)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "mtkit", *map(str, args)], input=stdin, capture_output=True, text=True, cwd=ROOT
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"bench_web: mtkit {' '.join(map(str, args[:2]))} ... failed:\n{done.stderr[-3000:]}")
    return done.stdout, seconds


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def in_browser(
    site: Path, lines: list[str], threads: int, screenshot: str = "", batch: int = 0
) -> tuple[list[str], float, bool, dict]:
    """(the page's translations, the seconds translate took in the page, crossOriginIsolated, where those seconds went:
    ``window.mtkit.spent()``'s difference); with ``screenshot``,
    the page is then given the first three lines to translate as one types, and pictured."""
    query = f"?threads={threads}" + (f"&batch={batch}" if batch else "")
    with own_origin_page(site, query) as (page, _, off_origin, _):
        page.evaluate("(lines) => window.mtkit.translate(lines)", lines[:WARM_UP])
        timed = page.evaluate(
            """async (lines) => {
                const before = window.mtkit.spent();
                const start = performance.now();
                const out = await window.mtkit.translate(lines);
                const seconds = (performance.now() - start) / 1000;
                const after = window.mtkit.spent();
                const spent = Object.fromEntries(Object.keys(after).map((k) => [k, after[k] - before[k]]));
                return { out, seconds, spent, isolated: crossOriginIsolated };
            }""",
            lines,
        )
        if screenshot:
            page.fill("#input", "\n".join(lines[:3]))
            page.wait_for_function("document.getElementById('output').textContent.split('\\n').length === 3")
            page.screenshot(path=screenshot)
            print(f"a picture of the page: {screenshot}")
    if off_origin:
        sys.exit(f"bench_web: the page asked for {off_origin[0]} off its origin")
    return timed["out"], timed["seconds"], timed["isolated"], timed["spent"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", default="runs/demo", help="The run to export (default: runs/demo).")
    parser.add_argument("--src", default="data/multi30k/test_2016_flickr.en.gz", help="The test set's sources.")
    parser.add_argument("--ref", default="data/multi30k/test_2016_flickr.de.gz", help="Its references.")
    parser.add_argument("--work", default="work/bench-web", help="Where the exports go.")
    parser.add_argument("--out", default=None, help="A folder for the outputs and report.json.")
    parser.add_argument("--threads", type=int, default=4, help="The page's threads in the several-threads sitting.")
    parser.add_argument("--max-lines", type=int, default=None, help="Only the first N lines of the test set.")
    parser.add_argument("--screenshot", default="", help="A PNG of the float32 page translating three lines.")
    parser.add_argument("--batch", type=int, default=0, help="Lines the page decodes together (default: the page's).")
    args = parser.parse_args()

    import sacrebleu

    run, work = Path(args.run), Path(args.work)
    sources, refs = read_lines(ROOT / args.src), read_lines(ROOT / args.ref)
    if args.max_lines:
        sources, refs = sources[: args.max_lines], refs[: args.max_lines]
    print(f"machine: {describe()}")
    print(f"test set: {args.src}, {len(sources)} lines")

    sites, sizes = {}, {}
    for quantization in ("float32", "int8"):
        site = work / quantization
        mtkit(["export", run, "--format", "web", "--quantization", quantization, "--output", site, "--force"])
        meta = json.loads((site / "mtkit-web.json").read_text(encoding="utf-8"))
        sites[quantization] = site
        sizes[quantization] = {"model_bytes": meta["model_bytes"], "site_bytes": folder_bytes(site)}

    text = "\n".join(sources) + "\n"
    common = ["-b", "1", "--dtype", "float32", "--threads", "1"]
    cli_out, cli_seconds = mtkit(["translate", run, *common], stdin=text)
    _, empty_seconds = mtkit(["translate", run, *common], stdin="")
    cli_lines = cli_out.splitlines()
    cli_translate = cli_seconds - empty_seconds
    if cli_translate <= 0.05:  # within the start-up's own variation: no rate to compare with
        print(f"mtkit translated in {cli_translate:.2f} s less start-up: too few lines for a rate", flush=True)
        cli_translate = float("nan")

    results = {
        "machine": describe(),
        "lines": len(sources),
        "sizes": sizes,
        "mtkit": {"seconds": cli_translate, "seconds_with_start_up": cli_seconds, "start_up_seconds": empty_seconds},
    }
    outputs = {"mtkit": cli_lines}
    for quantization, site in sites.items():
        for threads in (1, args.threads):
            name = f"{quantization}-{threads}t"
            picture = args.screenshot if (quantization, threads) == ("float32", args.threads) else ""
            out, seconds, isolated, spent = in_browser(site, sources, threads, picture, args.batch)
            outputs[name] = out
            results[name] = {"seconds": seconds, "isolated": isolated, "threads": threads, "spent": spent}

    def scores(hyps: list[str]) -> dict:
        return {
            "bleu": sacrebleu.corpus_bleu(hyps, [refs]).score,
            "chrf": sacrebleu.corpus_chrf(hyps, [refs]).score,
        }

    equal = sum(a == b for a, b in zip(outputs["float32-1t"], cli_lines))
    results["float32_equal_share"] = equal / len(sources)
    print()
    print(
        f"float32 page == mtkit translate -b 1 --dtype float32: {equal} / {len(sources)} lines ({equal / len(sources):.1%})"
    )
    for name in ("mtkit", "float32-1t", "int8-1t"):
        results.setdefault(name, {}).update(scores(outputs[name]))
    bleu = {name: results[name]["bleu"] for name in ("mtkit", "float32-1t", "int8-1t")}
    print(
        f"BLEU  mtkit {bleu['mtkit']:.2f}  float32 page {bleu['float32-1t']:.2f}  int8 page {bleu['int8-1t']:.2f}  "
        f"(int8 - float32: {bleu['int8-1t'] - bleu['float32-1t']:+.2f})"
    )
    print()
    print(f"{'':<28}{'seconds':>9}{'sent/s':>9}{'x mtkit':>9}")
    mtkit_rate = len(sources) / cli_translate
    print(
        f"{'mtkit -b 1 --threads 1':<28}{cli_translate:>9.2f}{mtkit_rate:>9.1f}{1.0:>9.2f}"
        f"   (start-up {empty_seconds:.2f} s left out)"
    )
    for name in outputs:
        if name == "mtkit":
            continue
        entry = results[name]
        rate = len(sources) / entry["seconds"]
        entry["sentences_per_second"] = rate
        label = f"page {entry_label(name)}"
        note = "" if entry["isolated"] else "  (not cross-origin isolated)"
        print(f"{label:<28}{entry['seconds']:>9.2f}{rate:>9.1f}{rate / mtkit_rate:>9.2f}{note}")
    results["mtkit"]["sentences_per_second"] = mtkit_rate
    print()
    print("where the page's time goes (onnxruntime-web's calls; the rest is the page's own JavaScript):")
    for name in outputs:
        if name == "mtkit":
            continue
        entry, spent = results[name], results[name]["spent"]
        own = entry["seconds"] - spent["encoder_s"] - spent["decoder_s"]
        print(
            f"page {entry_label(name):<23} encoder {spent['encoder_s']:.2f} s, decoder {spent['decoder_s']:.2f} s "
            f"({spent['decoder_s'] / entry['seconds']:.0%}) in {spent['decoder_calls']} calls, own {own:.2f} s; "
            f"rows computed {spent['rows']} of {spent['whole_batch_rows']} stepping whole batches "
            f"({spent['rows'] / spent['whole_batch_rows']:.0%})"
        )
    print()
    for quantization, size in sizes.items():
        print(
            f"size {quantization:<8} model {size['model_bytes'] / 2**20:7.2f} MiB   site {size['site_bytes'] / 2**20:7.2f} MiB"
        )
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        for name, hyps in outputs.items():
            (out / f"{name}.de").write_text("".join(h + "\n" for h in hyps), encoding="utf-8")
        (out / "report.json").write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        print(f"outputs and report.json in {out}")


def entry_label(name: str) -> str:
    """``float32-4t`` -> ``float32, 4 threads``."""
    quantization, threads = name.rsplit("-", 1)
    count = int(threads[:-1])
    return f"{quantization}, {count} thread{'s' if count > 1 else ''}"


if __name__ == "__main__":
    main()
