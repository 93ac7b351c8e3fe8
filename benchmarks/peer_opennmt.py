"""Helpers of benchmarks/peer_opennmt.sh, run with the Python of the peer's own virtual environment.

    python benchmarks/peer_opennmt.py machine
    python benchmarks/peer_opennmt.py prepare DATA_DIR OUT_DIR THREADS
    python benchmarks/peer_opennmt.py checkpoint RUN_DIR
    python benchmarks/peer_opennmt.py training TRAIN_LOG PAIRS_FILE CHECKPOINT
    python benchmarks/peer_opennmt.py onmt-row LOG HYPS SPM_MODEL REFS BEAM WALL_SECONDS
    python benchmarks/peer_opennmt.py ct2-rows CHECKPOINT OUT_DIR SRC SPM_MODEL REFS THREADS

Each command prints the lines of the report that peer_opennmt.sh shows; a failure is one line on stderr and
exit code 1. Needs sentencepiece, sacrebleu, torch and ctranslate2 (all in the peer's environment).
"""

from __future__ import annotations

import gzip
import os
import platform
import re
import sys
import time
from pathlib import Path

SPLITS = ("train", "val", "test_2016_flickr")
LANGS = ("en", "de")
VOCAB_SIZE = 8000  # configs/multi30k-transformer.yaml: data.vocab_size, joint BPE
CT2_BATCH = 32  # sentences per CTranslate2 batch
ROW = "{:<15} {:<8} {:>4} {:>8} {:>7} {:>6} {:>6}"


class Failure(Exception):
    pass


# ------------------------------------------------------------------------------------------------- machine
def machine() -> None:
    """The CPU the figures were measured on: model name, logical CPUs and the vector extensions that matter."""
    model, flags = platform.processor() or "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model in ("", "unknown CPU", platform.machine()):
                model = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    wanted = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile")
    extensions = " ".join(f for f in wanted if f in flags) or "none reported"
    print(f"{'cpu':<18}{model} ({os.cpu_count()} logical CPUs; {extensions})")


# ------------------------------------------------------------------------------------------------- prepare
def prepare(data_dir: str, out_dir: str, threads: str) -> None:
    """Plain-text splits, one joint SentencePiece BPE model, and every split as space-separated subwords."""
    import sentencepiece as spm

    src, out = Path(data_dir), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for split in SPLITS:
        for lang in LANGS:
            plain = out / f"{split}.{lang}"
            if not plain.exists():
                packed = src / f"{split}.{lang}.gz"
                if not packed.is_file():
                    raise Failure(f"{packed}: not found (the shipped Multi30k data)")
                with gzip.open(packed, "rt", encoding="utf-8") as f:
                    text = f.read()
                write_atomically(plain, text)
    model = out / "spm8k.model"
    if not model.exists():
        spm.SentencePieceTrainer.train(
            input=f"{out / 'train.en'},{out / 'train.de'}",
            model_prefix=str(out / "spm8k"),
            vocab_size=VOCAB_SIZE,
            model_type="bpe",
            character_coverage=1.0,
            num_threads=int(threads),
            minloglevel=2,
            unk_id=0,
            bos_id=-1,
            eos_id=-1,
            pad_id=-1,
        )
    sp = spm.SentencePieceProcessor(model_file=str(model))
    for split in SPLITS:
        for lang in LANGS:
            pieces = out / f"{split}.sp.{lang}"
            if not pieces.exists():
                lines = (out / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()
                write_atomically(pieces, "".join(" ".join(p) + "\n" for p in sp.encode(lines, out_type=str)))


def write_atomically(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


# ------------------------------------------------------------------------------------------------ training
def step_of(path: Path) -> int:
    match = re.search(r"_step_(\d+)\.pt$", path.name)
    return int(match.group(1)) if match else -1


def checkpoint(run_dir: str) -> None:
    """The newest checkpoint that loads (training is stopped by a signal, possibly while one is being saved)."""
    import torch

    for path in sorted(Path(run_dir).glob("model_step_*.pt"), key=step_of, reverse=True):
        try:
            torch.load(path, map_location="cpu", weights_only=False)
        except Exception:  # a file cut short by the stop: try the previous one
            continue
        print(path)
        return
    raise Failure(f"{run_dir}: no usable checkpoint (the first one is written at update 20): train for more minutes")


REPORT = re.compile(r"Step (\d+)/\s*\d+;.*?sents:\s*(\d+);.*?\s(\d+)/\s*(\d+) tok/s")


def training(log: str, pairs_file: str, ckpt: str) -> None:
    """Updates, throughput and epochs from OpenNMT-py's own progress reports (one every 20 updates)."""
    text = Path(log).read_text(encoding="utf-8", errors="replace")
    reports = [tuple(map(int, m.groups())) for m in REPORT.finditer(text)]
    if not reports:
        raise Failure(f"{log}: no progress report from onmt_train (is the run shorter than 20 updates?)")
    started = re.search(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d):\d\d", text, re.MULTILINE)
    params = re.search(r"number of parameters: (\d+)", text)
    pairs = sum(1 for _ in open(pairs_file, encoding="utf-8"))
    timed = reports[1:] or reports  # the first report includes start-up
    src = sum(r[2] for r in timed) / len(timed)
    tgt = sum(r[3] for r in timed) / len(timed)
    sentences = sum(r[1] for r in reports)
    print(f"{'training started':<18}{started.group(1) + ' (log time)' if started else 'unknown'}")
    print(f"{'parameters':<18}{int(params.group(1)):,}" if params else f"{'parameters':<18}unknown")
    print(f"{'updates':<18}{reports[-1][0]}  (decoded: {ckpt})")
    print(
        f"{'target tokens/s':<18}{tgt:.0f}  (mean of {len(timed)} reports after the first; OpenNMT-py counts BOS too)"
    )
    print(f"{'source tokens/s':<18}{src:.0f}")
    print(f"{'epochs':<18}{sentences / pairs:.2f}  ({sentences:,} sentences over {pairs:,} training pairs)")


# ------------------------------------------------------------------------------------------------ decoding
SIGNATURES: list[str] = []  # sacreBLEU's BLEU and chrF signatures of the last scoring


def detokenize_and_score(hyp_pieces: list[str], spm_model: str, refs: str, out_path: Path) -> tuple[float, float]:
    import sacrebleu
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=spm_model)
    hyps = [sp.decode(line.split()) for line in hyp_pieces]
    write_atomically(out_path, "".join(h + "\n" for h in hyps))
    references = Path(refs).read_text(encoding="utf-8").splitlines()
    if len(references) != len(hyps):
        raise Failure(f"{out_path}: {len(hyps)} hypotheses for {len(references)} references")
    global SIGNATURES
    metrics = sacrebleu.metrics.BLEU(), sacrebleu.metrics.CHRF()
    bleu, chrf = (metric.corpus_score(hyps, [references]).score for metric in metrics)
    SIGNATURES = [str(metric.get_signature()) for metric in metrics]  # a metric has a signature once it has scored
    return bleu, chrf


def header() -> None:
    print(ROW.format("engine", "compute", "beam", "seconds", "sent/s", "BLEU", "chrF"))


def onmt_row(log: str, hyps: str, spm_model: str, refs: str, beam: str, wall: str) -> None:
    """One row for onmt_translate: its own 'Total translation time' (model loading excluded), then the wall time."""
    text = Path(log).read_text(encoding="utf-8", errors="replace")
    match = re.search(r"Total translation time \(s\): ([0-9.]+)", text)
    if not match:
        raise Failure(f"{log}: onmt_translate printed no 'Total translation time' line")
    seconds = float(match.group(1))
    lines = Path(hyps).read_text(encoding="utf-8").splitlines()
    bleu, chrf = detokenize_and_score(lines, spm_model, refs, Path(hyps + ".detok"))
    if int(beam) == 5:
        header()
    print(
        ROW.format(
            "onmt_translate",
            "float32",
            beam,
            f"{seconds:.2f}",
            f"{len(lines) / seconds:.1f}",
            f"{bleu:.2f}",
            f"{chrf:.2f}",
        )
        + f"   (whole process {float(wall):.1f} s)"
    )


def ct2_rows(ckpt: str, out_dir: str, src: str, spm_model: str, refs: str, threads: str) -> None:
    """Convert the checkpoint for CTranslate2, then time float32 and int8 at beam 5 and 1."""
    import ctranslate2
    import torch
    from ctranslate2.converters import OpenNMTPyConverter

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # OpenNMT-py 3.5.1 records self_attn_type "scaled-dot-flash" (the same attention computed through torch's
    # fused kernel); CTranslate2's converter accepts only the name "scaled-dot".
    bundle = torch.load(ckpt, map_location="cpu", weights_only=False)
    bundle["opt"].self_attn_type = "scaled-dot"
    renamed = out / "checkpoint-for-ct2.pt"
    torch.save(bundle, renamed)
    model_dir = out / "model"
    try:
        OpenNMTPyConverter(str(renamed), unsafe_deserialization=True).convert(str(model_dir), force=True)
    except Exception as err:
        raise Failure(f"CTranslate2 could not convert {ckpt}: {type(err).__name__}: {err}") from None
    sources = [line.split() for line in Path(src).read_text(encoding="utf-8").splitlines()]
    for compute in ("float32", "int8"):
        translator = ctranslate2.Translator(
            str(model_dir), device="cpu", compute_type=compute, intra_threads=int(threads), inter_threads=1
        )
        for beam in (5, 1):
            start = time.perf_counter()
            hyps = ct2_translate(translator, sources, beam)
            seconds = time.perf_counter() - start
            bleu, chrf = detokenize_and_score(hyps, spm_model, refs, out / f"{compute}.b{beam}.de")
            print(
                ROW.format(
                    "ctranslate2",
                    compute,
                    beam,
                    f"{seconds:.2f}",
                    f"{len(hyps) / seconds:.1f}",
                    f"{bleu:.2f}",
                    f"{chrf:.2f}",
                )
            )
    print("bleu: " + SIGNATURES[0])
    print("chrf: " + SIGNATURES[1])


def ct2_translate(translator, sources: list[list[str]], beam: int) -> list[str]:
    """Hypotheses (subwords joined by spaces) in input order, CT2_BATCH length-sorted sentences a batch.

    The output cap is onmt_translate's, per batch: min(250, longest source x max_length_ratio 1.25 + 5); sorted
    batches hold sentences of similar length, so the cap fits each of them as it does in onmt_translate.
    """
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    hyps = [""] * len(sources)
    for first in range(0, len(order), CT2_BATCH):
        batch = order[first : first + CT2_BATCH]
        cap = int(min(250, max(len(sources[i]) for i in batch) * 1.25 + 5))
        results = translator.translate_batch([sources[i] for i in batch], beam_size=beam, max_decoding_length=cap)
        for i, result in zip(batch, results):
            hyps[i] = " ".join(result.hypotheses[0])
    return hyps


COMMANDS = {
    "machine": (machine, 0),
    "prepare": (prepare, 3),
    "checkpoint": (checkpoint, 1),
    "training": (training, 3),
    "onmt-row": (onmt_row, 6),
    "ct2-rows": (ct2_rows, 6),
}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS or len(argv) - 1 != COMMANDS[argv[0]][1]:
        print(
            f"peer_opennmt.py: expected one of {', '.join(COMMANDS)} with its arguments (see the docstring)",
            file=sys.stderr,
        )
        return 2
    try:
        COMMANDS[argv[0]][0](*argv[1:])
    except Failure as err:
        print(f"peer_opennmt.py {argv[0]}: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
