#!/usr/bin/env python
"""Translate test_2016_flickr with a trained run and print speed and quality per engine, compute type and beam.

    python scripts/bench_translate.py runs/multi30k-transformer                          # PyTorch engine
    python scripts/bench_translate.py runs/multi30k-transformer --engine ctranslate2 --compute-type float32 int8
    python scripts/bench_translate.py runs/demo-ct2 --engine ctranslate2               # an `mtkit export` dir
    python scripts/bench_translate.py runs/multi30k-transformer --shortlist 0 20 --compute-type float32 int8
    python scripts/bench_translate.py runs/multi30k-transformer --split val --shortlist 10 20 50   # tune on val
    python scripts/bench_translate.py runs/multi30k-transformer --peer /tmp/mtkit-peer-opennmt  # x onmt_translate
    python scripts/bench_translate.py runs/multi30k-transformer --peer WORKDIR --turns 5  # median of 5 turns' ratios
    python scripts/bench_translate.py runs/multi30k-transformer --beams 5 --decode mbr mbr:mbr_epsilon=0,mbr_candidates=8

Both engines run in this process through the code `mtkit translate` uses (``translate_stream`` over the
model ``mtkit.load`` returns, on the torch engine or CTranslate2) with the run's decoding options (length penalty, a * len + b output limit,
batch size), the beam size set per row; each ``--decode`` adds a row decoded by another registered algorithm
(``ALGORITHM[:OPTION=VALUE,...]``, the beam column naming it). Only translation is timed (tokenizing, searching, detokenizing; after
a short warm-up), not model loading or conversion. Prints sentences/s, target subwords/s (EOS not counted) and
sacreBLEU BLEU / chrF against the references, with their signatures.
"""

from __future__ import annotations

import argparse
import io
import math
import os
import re
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from benchlib import describe, read_gz

ROOT = Path(__file__).resolve().parent.parent


class TokenCounter:
    """Counts the subwords of the best hypotheses a loaded model's engine returns."""

    def __init__(self, model):
        self.target_tokens = 0
        inner = model.engine.translate_ids

        def counting(ids, *args, **kwargs):
            results = inner(ids, *args, **kwargs)
            self.target_tokens += sum(len(hyps[0].tokens) for hyps in results if hyps)
            return results

        model.engine.translate_ids = counting


def direct_ct2(model, sources: list[str]) -> list[str]:
    """The test set through the CTranslate2 library alone: SentencePiece, ``translate_batch``, SentencePiece, with
    the batches, beam and output limit mtkit's engine uses (length-sorted batches; a batch's longest limit)."""
    from mtkit.inference.engine import batches

    engine = model.engine
    sp_src, sp_tgt = engine.tokenizer._src, engine.tokenizer._tgt
    pieces = sp_src.encode(sources, out_type=str)
    ids = [[0] * len(p) for p in pieces]  # batches() looks at lengths only
    out = [""] * len(sources)
    beam = engine.options.beam_size
    for idx in batches(ids, engine.options):
        results = engine.translator.translate_batch(
            [pieces[i] for i in idx],
            beam_size=beam,
            max_batch_size=engine.options.batch_size,
            max_decoding_length=max(engine.max_length(len(pieces[i]) + 1) for i in idx),
            max_input_length=0,
        )
        for i, text in zip(idx, sp_tgt.decode([r.hypotheses[0] for r in results])):
            out[i] = text
    return out


def peer_rows(workdir: Path, beams: list[int], threads: int, references: list[str], split: str) -> dict[int, float]:
    """``onmt_translate`` on the model ``benchmarks/peer_opennmt.sh MINUTES WORKDIR`` trained, at each beam, as that
    script runs it (64 sentences a batch): prints a row per beam, returns sentences/s per beam. Its time is the
    one onmt_translate reports for translating (model loading excluded, as in the rows above)."""
    import sentencepiece as spm

    from mtkit.scoring.score import corpus_scores

    venv, data = workdir / "venv", workdir / "data"
    source, spm_model = data / f"{split}.sp.en", data / "spm8k.model"
    for need in (venv / "bin" / "onmt_translate", source, spm_model):
        if not need.exists():
            raise SystemExit(f"--peer {workdir}: {need} not found; run benchmarks/peer_opennmt.sh MINUTES {workdir}")
    found = subprocess.run(
        [
            str(venv / "bin" / "python"),
            str(ROOT / "benchmarks" / "peer_opennmt.py"),
            "checkpoint",
            str(workdir / "run"),
        ],
        capture_output=True,
        text=True,
    )
    if found.returncode != 0:
        raise SystemExit(f"--peer {workdir}: {found.stderr.strip() or 'no checkpoint'}")
    checkpoint = found.stdout.strip()
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    env["TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD"] = "1"  # its own checkpoints, which torch.load restricts by default
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    sp = spm.SentencePieceProcessor(model_file=str(spm_model))
    speeds = {}
    with tempfile.TemporaryDirectory(prefix="mtkit-peer-") as tmp:
        for beam in beams:
            out = Path(tmp) / f"onmt.b{beam}"
            done = subprocess.run(
                ["onmt_translate", "-model", checkpoint, "-src", str(source), "-output", str(out)]
                + ["-beam_size", str(beam), "-batch_size", "64", "-batch_type", "sents", "-report_time"],
                capture_output=True,
                text=True,
                env=env,
            )
            match = re.search(r"Total translation time \(s\): ([0-9.]+)", done.stdout + done.stderr)
            if done.returncode != 0 or not match:
                tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
                raise SystemExit(f"--peer: onmt_translate failed at beam {beam}: {tail[0]}")
            seconds = float(match.group(1))
            hyps = [sp.decode(line.split()) for line in out.read_text(encoding="utf-8").splitlines()]
            scores = corpus_scores(hyps, [references], metrics=("bleu", "chrf"))
            speeds[beam] = len(hyps) / seconds
            print(
                f"{'onmt':<12} {'float32':<13} {beam:>4} {'':>9} {seconds:>8.2f} {speeds[beam]:>8.1f} {'':>10} "
                f"{scores['bleu']['score']:>6.2f} {scores['chrf']['score']:>6.2f}",
                flush=True,
            )
    print(f"  (onmt: OpenNMT-py's onmt_translate on {checkpoint}, 64 sentences a batch, {threads} threads)")
    return speeds


def build(
    run: Path,
    engine: str,
    compute_type: str,
    beam: int,
    threads: int,
    batch_size: int | None,
    stopping: str | None = None,
    shortlist: int | None = None,
    decode: dict | None = None,
):
    """The model for one row of the table, from ``mtkit.load`` (loading and conversion happen here, untimed)."""
    import mtkit
    from mtkit.interop.ct2_export import is_export_dir

    if engine != "ctranslate2" and is_export_dir(run):
        raise SystemExit(f"{run} is a CTranslate2 export: use --engine ctranslate2")
    return mtkit.load(
        run,
        engine=engine,
        beam_size=beam,
        batch_size=batch_size,
        nbest=1,
        threads=threads,
        device="cpu",
        dtype=compute_type,
        stopping=stopping,
        shortlist=shortlist,
        **(decode or {}),
    )


def decode_spec(spec: str) -> dict:
    """``ALGORITHM[:OPTION=VALUE,...]`` as ``mtkit.load``'s keywords (the values converted by the options' types)."""
    algorithm, _, rest = spec.partition(":")
    options = dict(item.split("=", 1) for item in rest.split(",") if item)
    return {"algorithm": algorithm, **options}


def run_row(
    args, row: str, compute_type: str, beam: int, shortlist, sources, references, peer, record, decode=None
) -> None:
    """Translate the split with one row's settings and print the row (with --direct, CTranslate2 called directly
    too), or say on its line why it cannot run on this machine. ``record`` holds the runs' signatures, ratio lines
    and ratios to ``onmt_translate`` per row, ``peer`` the latter's sentences/s per beam."""
    signatures, ratios, peer_ratios = record
    from mtkit.errors import MtkitError
    from mtkit.inference.translate import translate_stream
    from mtkit.scoring.score import corpus_scores

    try:
        translator = build(
            args.run,
            args.engine,
            compute_type,
            beam,
            args.threads,
            args.batch_size,
            args.stopping,
            shortlist,
            decode,
        )
        counter = TokenCounter(translator)
    except MtkitError as err:  # e.g. a compute type this CPU lacks: say so, go on with the next row
        print(f"{row}  skipped: {err}", flush=True)
        return
    translate_stream(translator, sources[: args.warmup], io.StringIO())
    if args.direct:
        direct_ct2(translator, sources[: args.warmup])
    seconds = direct_seconds = math.inf
    for _ in range(args.repeat):  # the fastest of the repeats; with --direct, the two take turns
        counter.target_tokens = 0
        sink = io.StringIO()
        start = time.perf_counter()
        translate_stream(translator, sources, sink)
        seconds = min(seconds, time.perf_counter() - start)
        if args.direct:
            start = time.perf_counter()
            direct_hyps = direct_ct2(translator, sources)
            direct_seconds = min(direct_seconds, time.perf_counter() - start)
    hyps = sink.getvalue().split("\n")[:-1]
    assert len(hyps) == len(sources), (len(hyps), len(sources))
    scores = corpus_scores(hyps, [references], metrics=("bleu", "chrf"))
    signatures.update({name: s["signature"] for name, s in scores.items()})
    print(
        f"{row} {seconds:>8.2f} {len(sources) / seconds:>8.1f} {counter.target_tokens / seconds:>10.0f} "
        f"{scores['bleu']['score']:>6.2f} {scores['chrf']['score']:>6.2f}",
        flush=True,
    )
    if beam in peer:
        ratio = len(sources) / seconds / peer[beam]
        peer_ratios.setdefault(row.strip(), []).append(ratio)
        ratios.append(f"{row.strip()}: {ratio:.2f}x onmt_translate")
    if args.direct:
        scores = corpus_scores(direct_hyps, [references], metrics=("bleu", "chrf"))
        print(
            f"{'ct2 direct':<12} {compute_type:<13} {beam:>4} {'':>9} {direct_seconds:>8.2f} "
            f"{len(sources) / direct_seconds:>8.1f} {'':>10} {scores['bleu']['score']:>6.2f} "
            f"{scores['chrf']['score']:>6.2f}",
            flush=True,
        )
        ratios.append(f"{row.strip()}: {direct_seconds / seconds:.3f}x CTranslate2 called directly")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("run", type=Path, help="run dir or checkpoint (torch, ctranslate2), or an export dir")
    parser.add_argument("--engine", choices=("torch", "ctranslate2"), default="torch")
    parser.add_argument(
        "--compute-type",
        nargs="+",
        default=None,
        help="torch: float32 int8 bfloat16; ctranslate2: float32 int8 int16 int8_float32 ... "
        "(default: float32, and int8 for ctranslate2)",
    )
    parser.add_argument("--beams", type=int, nargs="+", default=[5, 1])
    parser.add_argument(
        "--decode",
        nargs="+",
        default=[],
        metavar="ALGORITHM[:OPTION=VALUE,...]",
        help="a row decoded by this algorithm (beam size: the first of --beams), e.g. mbr:mbr_candidates=8",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=None, help="sentences per batch (default: the run's)")
    parser.add_argument(
        "--stopping",
        choices=("first", "beam_full", "exact"),
        default=None,
        help="beam search stopping rule (default: the run's decoding.stopping)",
    )
    parser.add_argument(
        "--shortlist",
        type=int,
        nargs="+",
        default=[None],
        help="torch engine: translations per source subword in the lexical shortlist, 0 = whole "
        "vocabulary (default: the run's decoding.shortlist); one row each",
    )
    parser.add_argument(
        "--data", type=Path, default=ROOT / "data" / "multi30k", help="folder holding SPLIT.en.gz and SPLIT.de.gz"
    )
    parser.add_argument("--split", default="test_2016_flickr", help="test_2016_flickr, or val to tune options")
    parser.add_argument("--warmup", type=int, default=20, help="sentences translated untimed before each row")
    parser.add_argument(
        "--repeat", type=int, default=1, help="translate the split this many times per row and report the fastest"
    )
    parser.add_argument(
        "--peer",
        type=Path,
        metavar="WORKDIR",
        help="first decode with OpenNMT-py's onmt_translate the model that benchmarks/peer_opennmt.sh MINUTES "
        "WORKDIR trained, at the same beams, and print each row's ratio to it",
    )
    parser.add_argument(
        "--turns",
        type=int,
        default=1,
        help="with --peer: run onmt_translate and every row this many times, taking turns, and print the median "
        "of each row's ratios (on a machine whose speed drifts)",
    )
    parser.add_argument(
        "--direct",
        action="store_true",
        help="ctranslate2: after each row, the same model, batches, beam and limit through the library alone",
    )
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))

    sources = read_gz(args.data / f"{args.split}.en.gz")
    references = read_gz(args.data / f"{args.split}.de.gz")
    compute_types = args.compute_type or (["float32", "int8"] if args.engine == "ctranslate2" else ["float32"])
    if args.engine == "ctranslate2" and args.shortlist != [None]:
        parser.error("--shortlist is for the torch engine")
    if args.direct and args.engine != "ctranslate2":
        parser.error("--direct compares with CTranslate2 called directly: use --engine ctranslate2")
    print(f"{time.strftime('%Y-%m-%d %H:%M')}; {describe()}")
    print(
        f"{args.run}: {len(sources)} sentences of {args.split}, engine {args.engine}, {args.threads} threads"
        + (f", the fastest of {args.repeat} runs per row" if args.repeat > 1 else "")
    )
    print(
        f"{'engine':<12} {'compute':<13} {'beam':>4} {'shortlist':>9} {'seconds':>8} {'sent/s':>8} "
        f"{'tgt tok/s':>10} {'BLEU':>6} {'chrF':>6}"
    )
    signatures, ratios, peer_ratios = record = {}, [], {}
    for turn in range(args.turns):  # with --turns, the peer and every row again, in the same order
        if args.turns > 1:
            print(f"== turn {turn + 1} of {args.turns}, {time.strftime('%H:%M:%S')}", flush=True)
        peer = peer_rows(args.peer, args.beams, args.threads, references, args.split) if args.peer else {}
        for compute_type in compute_types:
            for shortlist in args.shortlist:
                for beam in args.beams:
                    row = (
                        f"{args.engine:<12} {compute_type:<13} {beam:>4} {'run' if shortlist is None else shortlist:>9}"
                    )
                    run_row(args, row, compute_type, beam, shortlist, sources, references, peer, record)
                for spec in args.decode:
                    label = "run" if shortlist is None else shortlist
                    row = f"{args.engine:<12} {compute_type:<13} {spec:>4} {label:>9}"
                    beam = args.beams[0]
                    run_row(
                        args, row, compute_type, beam, shortlist, sources, references, {}, record, decode_spec(spec)
                    )
    for line in ratios:
        print(line)
    if args.turns > 1:  # each turn's ratio compares runs minutes apart at most: their median is the figure
        for row, values in peer_ratios.items():
            listed = ", ".join(f"{v:.2f}" for v in values)
            print(f"{row}: {statistics.median(values):.2f}x onmt_translate, median of {len(values)} turns ({listed})")
    for name, signature in signatures.items():
        print(f"{name}: {signature}")


if __name__ == "__main__":
    main()
