#!/usr/bin/env python
"""COMET-22 in mtkit against unbabel-comet: the same random checkpoint, the same sentences, the same threads.

    python scripts/bench_comet.py --comet-python COMET_VENV/bin/python                 # XLM-R large, 300 sentences
    python scripts/bench_comet.py --comet-python COMET_VENV/bin/python --size tiny --sentences 40   # a quick check
    python scripts/bench_comet.py --comet-python COMET_VENV/bin/python --device cuda   # also bf16 beside float32

unbabel-comet 2.2.7 runs in a virtual environment of its own (scripts/make_comet_fixtures.py says how to make one);
``--comet-python`` is its interpreter (or the COMET_PYTHON environment variable). There this script builds a
COMET-22 checkpoint with random weights in the shapes of ``Unbabel/wmt22-comet-da`` (XLM-R large: 24 layers of
1024 units, 250,002 embeddings; a SentencePiece model trained on the sentences, so both sides cut them alike) and
times its ``predict`` (float32, batch ``--batch-size``); then this process times mtkit on the same checkpoint. Speed
depends on the shapes and on the highest layer the (random) sparsemax mix weighs, where mtkit's encoder stops: the
first line of the table says which.

The sentences are the first ``--sentences`` of Multi30k's test_2016_flickr (English sources, German references);
the systems and MBR candidates are German references with words dropped and swapped. Rows: one system; three
systems (unbabel-comet: one ``predict`` each; mtkit: together, each source and reference encoded once); eight
candidates against the references; MBR over those eight candidates, each against the others (mtkit's
``comet_matrix``: 8 + 8 + 1 encodings and 64 estimator runs a sentence). Printed: seconds, sentences/s (MBR: source
sentences/s), mtkit's speed-up, and the largest difference of any sentence's score from unbabel-comet's. Loading is
not timed; each side scores a few sentences first.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SHAPES = {
    "large": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096, vocab=250002),
    "tiny": dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab=0),
}
HIDDEN_SIZES = {"large": [3072, 1024], "tiny": [24, 12]}
CANDIDATES = 8


# ------------------------------------------------------------------------------------ texts (either interpreter)
def variant(line: str, k: int) -> str:
    """Reference ``line`` degraded the ``k``-th way: a word in every ``k + 2`` dropped, and two words swapped."""
    words = line.split()
    kept = [w for i, w in enumerate(words) if (i + k) % (k + 2) != 0] or words[:1]
    if len(kept) > 2:
        j = k % (len(kept) - 1)
        kept[j], kept[j + 1] = kept[j + 1], kept[j]
    return " ".join(kept)


def texts(n: int) -> dict:
    import gzip

    def read(lang):
        with gzip.open(ROOT / "data" / "multi30k" / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as f:
            return f.read().splitlines()[:n]

    src, ref = read("en"), read("de")
    return {"src": src, "ref": ref, "candidates": [[variant(r, k) for r in ref] for k in range(CANDIDATES)]}


# ------------------------------------------------------------------------------------ the unbabel-comet side
def worker_build(out: Path, size: str, sentences: int) -> None:
    """In unbabel-comet's environment: an encoder (config, tokenizer) and a random COMET-22 checkpoint in ``out``."""
    import sentencepiece as spm
    import torch
    from comet.models import RegressionMetric
    from transformers import XLMRobertaConfig, XLMRobertaTokenizerFast

    sys.path.insert(0, str(HERE))
    from make_comet_fixtures import save

    data = texts(sentences)
    encoder = out / "encoder"
    encoder.mkdir(parents=True, exist_ok=True)
    corpus = out / "corpus.txt"
    corpus.write_text("\n".join(data["src"] + data["ref"]) + "\n", encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(out / "spm"),
        vocab_size=4000,
        model_type="unigram",
        hard_vocab_limit=False,
        bos_id=-1,
        eos_id=-1,
        unk_id=0,
    )
    tokenizer = XLMRobertaTokenizerFast(vocab_file=str(out / "spm.model"))
    tokenizer.model_max_length = 512
    tokenizer.save_pretrained(str(encoder))
    shape = dict(SHAPES[size])
    vocab = max(shape.pop("vocab"), len(tokenizer))
    XLMRobertaConfig(
        vocab_size=vocab,
        max_position_embeddings=514,
        type_vocab_size=1,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **shape,
    ).save_pretrained(str(encoder))
    torch.manual_seed(0)
    model = RegressionMetric(
        pretrained_model=str(encoder),
        load_pretrained_weights=False,
        local_files_only=True,
        layer_transformation="sparsemax",
        layer_norm=True,
        hidden_sizes=HIDDEN_SIZES[size],
    )
    with torch.no_grad():
        for p in model.layerwise_attention.scalar_parameters:
            p.fill_(float(torch.randn(1)))
    hparams = {k: v for k, v in dict(model.hparams).items() if k != "load_pretrained_weights"}
    save(model, hparams, out / "model")


def worker_score(model_dir: Path, out: Path, sentences: int, threads: int, batch_size: int, device: str) -> None:
    """In unbabel-comet's environment: time ``predict`` on each row's systems; write the scores and seconds."""
    import torch
    from comet import load_from_checkpoint

    torch.set_num_threads(threads)
    model = load_from_checkpoint(str(model_dir / "checkpoints" / "model.ckpt"), local_files_only=True)
    gpus = 1 if device == "cuda" else 0
    data = texts(sentences)

    def predict(mt):
        samples = [{"src": s, "mt": m, "ref": r} for s, m, r in zip(data["src"], mt, data["ref"])]
        return model.predict(samples, batch_size=batch_size, gpus=gpus, progress_bar=False).scores

    predict(data["candidates"][0][:batch_size])  # warm-up
    found = {}
    for row, systems in (("one", data["candidates"][:1]), ("three", data["candidates"][:3])):
        start = time.perf_counter()
        scores = [predict(mt) for mt in systems]
        found[row] = {"seconds": time.perf_counter() - start, "scores": scores}
    start = time.perf_counter()
    scores = [predict(mt) for mt in data["candidates"]]
    found["eight"] = {"seconds": time.perf_counter() - start, "scores": scores}
    out.write_text(json.dumps(found))


# ------------------------------------------------------------------------------------ the mtkit side
def mtkit_rows(model_dir: Path, args, dtype_name: str = "float32") -> dict:
    import torch

    from mtkit.decoding.mbr import comet_matrix
    from mtkit.scoring import comet

    dtype = {"float32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    model = comet.load(str(model_dir), device=args.device, dtype=dtype, batch_size=args.batch_size)
    data = texts(args.sentences)
    src, ref, cands = data["src"], data["ref"], data["candidates"]
    model.score_systems([cands[0][: args.batch_size]], src[: args.batch_size], ref[: args.batch_size])  # warm-up
    weighed = [i for i in range(model.n_states) if float(model.weights[i]) != 0.0]
    found = {"layers": (weighed, model.n_states, len(model.encoder.encoder.layer))}
    for row, systems in (("one", cands[:1]), ("three", cands[:3]), ("eight", cands)):
        start = time.perf_counter()
        scores = model.score_systems(systems, src, ref)
        found[row] = {"seconds": time.perf_counter() - start, "scores": scores}
    per_sentence = [[c[i] for c in cands] for i in range(len(src))]
    start = time.perf_counter()
    comet_matrix(per_sentence, per_sentence, src, model)
    found["mbr"] = {"seconds": time.perf_counter() - start, "scores": []}
    return found


def largest_difference(a: list, b: list) -> float:
    return max((abs(x - y) for sa, sb in zip(a, b) for x, y in zip(sa, sb)), default=float("nan"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--comet-python", default=os.environ.get("COMET_PYTHON"), help="unbabel-comet's interpreter")
    parser.add_argument("--size", choices=tuple(SHAPES), default="large")
    parser.add_argument("--sentences", type=int, default=300)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--workdir", type=Path, help="keep the checkpoint here (default: a temporary directory)")
    parser.add_argument(
        "--reuse-unbabel", action="store_true", help="take unbabel-comet's side from an earlier run in --workdir"
    )
    parser.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:  # in unbabel-comet's environment
        if args.worker[0] == "build":
            worker_build(Path(args.worker[1]), args.size, args.sentences)
        else:
            worker_score(Path(args.worker[1]), Path(args.worker[2]), args.sentences, args.threads, args.batch_size,
                         args.device)  # fmt: skip
        return
    if not args.comet_python:
        parser.error("give unbabel-comet's interpreter: --comet-python PATH (or COMET_PYTHON)")

    import torch

    sys.path.insert(0, str(ROOT))
    from benchlib import describe

    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        common = ["--size", args.size, "--sentences", str(args.sentences), "--threads", str(args.threads),
                  "--batch-size", str(args.batch_size), "--device", args.device]  # fmt: skip
        me = [args.comet_python, str(Path(__file__).resolve()), *common, "--worker"]
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": str(args.threads)}
        if not (work / "model" / "checkpoints" / "model.ckpt").is_file():
            subprocess.run([*me, "build", str(work)], check=True, env=env, capture_output=True)
        theirs_file = work / "unbabel.json"
        if not (args.reuse_unbabel and theirs_file.is_file()):
            subprocess.run(
                [*me, "score", str(work / "model"), str(theirs_file)], check=True, env=env, capture_output=True
            )
        theirs = json.loads(theirs_file.read_text())
        ours = mtkit_rows(work / "model", args)
        bf16 = mtkit_rows(work / "model", args, "bf16") if args.device == "cuda" else None

    print(f"{time.strftime('%Y-%m-%d')}; {describe() if args.device == 'cpu' else torch.cuda.get_device_name()}")
    print(f"COMET-22, XLM-R {args.size} shapes, random weights; {args.sentences} sentences of test_2016_flickr en-de, "
          f"batch {args.batch_size}, {args.threads} threads, {args.device}, float32")  # fmt: skip
    weighed, states, run = ours["layers"]
    print(f"the layer mix weighs hidden states {weighed} of {states}; mtkit's encoder runs {run} of {states - 1} layers, "
          f"unbabel-comet's all {states - 1}")  # fmt: skip
    if args.reuse_unbabel and theirs_file.is_file():
        print("unbabel-comet's times and scores: an earlier run's in this sitting, kept in --workdir")
    print(f"{'row':<34} {'unbabel s':>10} {'mtkit s':>9} {'sent/s':>9} {'speed-up':>9} {'max |diff|':>11}")
    n = args.sentences
    rows = (("one system", "one", 1), ("three systems", "three", 3), ("8 candidates vs references", "eight", 8))
    for label, key, systems in rows:
        t, o = theirs[key], ours[key]
        diff = largest_difference(t["scores"], o["scores"])
        print(f"{label:<34} {t['seconds']:>10.2f} {o['seconds']:>9.2f} {n * systems / o['seconds']:>9.1f} "
              f"{t['seconds'] / o['seconds']:>8.2f}x {diff:>11.2e}")  # fmt: skip
    mbr = ours["mbr"]["seconds"]
    print(f"{'MBR, 8 candidates x 8 (mtkit)':<34} {'':>10} {mbr:>9.2f} {n / mbr:>9.1f} "
          f"{mbr / ours['eight']['seconds']:>8.2f}x of the row above")  # fmt: skip
    if bf16 is not None:
        diff = largest_difference(ours["one"]["scores"], bf16["one"]["scores"])
        print(f"{'one system, mtkit bf16':<34} {'':>10} {bf16['one']['seconds']:>9.2f} "
              f"{n / bf16['one']['seconds']:>9.1f} {'':>9} {diff:>11.2e} (vs float32)")  # fmt: skip
    one = theirs["one"]["seconds"] / ours["one"]["seconds"]
    three = theirs["three"]["seconds"] / ours["three"]["seconds"]
    ratio = mbr / ours["eight"]["seconds"]
    worst = max(largest_difference(theirs[k]["scores"], ours[k]["scores"]) for k in ("one", "three", "eight"))
    print(f"goals: one system {one:.2f}x (>= 1.2x), three systems {three:.2f}x (>= 2x), "
          f"MBR {ratio:.2f}x of 8 candidates vs references (<= 1.5x), scores within {worst:.1e} (<= 1e-4)")  # fmt: skip


if __name__ == "__main__":
    main()
