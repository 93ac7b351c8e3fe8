#!/usr/bin/env python
"""Training and decoding on one GPU, beside a plain PyTorch loop and transformers' generate, in one run.

    python scripts/bench_gpu.py                 # on a CUDA GPU: every shape, then decoding (about 8 minutes)
    python scripts/bench_gpu.py --shapes base --no-decode --compile
    python scripts/bench_gpu.py --smoke         # on a CPU with tiny sizes: every code path, no figure to keep

Prints, first, the device and the card's own bf16 matmul rate (8192^3 products; float32 on a CPU). Then for each
shape of ``--shapes`` (small: the shipped configs/multi30k-transformer.yaml, 3+3 x 256, fp32; base: 6+6 x 512,
8 heads, FFN 2048, bf16; big: 6+6 x 1024, 16 heads, FFN 4096, bf16; batch_tokens 32768 for both) trained on
Multi30k en-de (prepared under --work):
  - mtkit: updates/s and target tokens/s over --updates timed updates after --warmup, read as the training loop
    reads them (a log window every training.log_every updates);
  - GFLOP per update (torch's FlopCounterMode: matmuls and attention) and the achieved TFLOP/s, with their share
    of the matmul rate above;
  - the GPU's busy share of the wall time and the kernels launched per update (torch.profiler over --profile
    updates; on a CPU: the aten ops per update, and no busy share);
  - the plain loop: ``nn.Transformer`` of the same size with tied embeddings, the same precision, fused AdamW,
    ``CrossEntropyLoss(label_smoothing=0.1)`` on float32 logits, fixed batches of batch_tokens // 17 sentences of
    16 source and 17 target tokens (Multi30k's mean lengths), and the ratio mtkit / plain.
Then decoding (unless --no-decode): the small shape trained for --decode-minutes, exported with
``mtkit export --format hf``, and test_2016_flickr translated by ``mtkit.load(run, device=...)`` and by
transformers' ``MarianMTModel.generate`` of the export, beam 5 and greedy, at the config's batch size and at
1,000 sentences: sentences/s (tokenizing and detokenizing included, after one warm-up pass) and BLEU of each.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import math
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from benchlib import describe  # noqa: E402
from torch import nn  # noqa: E402

CONFIG = ROOT / "configs/multi30k-transformer.yaml"
DATA = ROOT / "data/multi30k"
SHAPES = {
    "small": ([], "fp32", 4096),
    "base": (["d_model=512", "heads=8", "encoder_layers=6", "decoder_layers=6", "ffn_dim=2048"], "bf16", 32768),
    "big": (["d_model=1024", "heads=16", "encoder_layers=6", "decoder_layers=6", "ffn_dim=4096"], "bf16", 32768),
}
SMOKE_MODEL = ["d_model=32", "heads=2", "encoder_layers=1", "decoder_layers=1", "ffn_dim=64"]
SRC_LEN, TGT_LEN = 16, 17  # the plain loop's sentence lengths: Multi30k's mean in subwords (EOS / BOS included)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_line(device: torch.device) -> str:
    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}, CUDA {torch.version.cuda}"
    return f"{describe()}, torch {torch.__version__}"


def matmul_rate(device: torch.device, smoke: bool) -> float:
    """TFLOP/s of a square matmul: bf16 8192^3 on a GPU, float32 (512^3 under --smoke) on a CPU."""
    n = 512 if smoke or device.type == "cpu" else 8192
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a, b = torch.randn(n, n, device=device, dtype=dtype), torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(3):
        a @ b
    sync(device)
    reps = 5 if smoke else 50
    start = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync(device)
    return 2 * n**3 * reps / (time.perf_counter() - start) / 1e12


# ------------------------------------------------------------------------------------------------ data
def data_overrides(work: Path, smoke: bool) -> list[str]:
    """Prepare Multi30k en-de (8k joint BPE; under --smoke 600 pairs, 300 subwords) in ``work``; its overrides."""
    from mtkit import config as cfgmod
    from mtkit.data.prepare import prepare

    if smoke:
        corpus = work / "corpus"
        corpus.mkdir(parents=True, exist_ok=True)
        for split, n in (("train", 600), ("val", 60), ("test_2016_flickr", 40)):
            for lang in ("en", "de"):
                with gzip.open(DATA / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
                    lines = [line for _, line in zip(range(n), f)]
                with gzip.open(corpus / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                    f.writelines(lines)
        source = corpus
    else:
        source = DATA
    overrides = [
        f"data.dir={work / 'data'}",
        f"data.splits.train.src={source / 'train.en.gz'}",
        f"data.splits.train.tgt={source / 'train.de.gz'}",
        f"data.splits.valid.src={source / 'val.en.gz'}",
        f"data.splits.valid.tgt={source / 'val.de.gz'}",
        f"data.splits.test.src={source / 'test_2016_flickr.en.gz'}",
        f"data.splits.test.tgt={source / 'test_2016_flickr.de.gz'}",
        *(["data.vocab_size=300"] if smoke else []),
    ]
    with contextlib.redirect_stdout(sys.stderr):  # prepare's table: not part of the report
        prepare(cfgmod.load(str(CONFIG), overrides + ["training.run_dir=unused"]).data)
    return overrides


def shape_config(name: str, data: list[str], args, run_dir: Path, **training):
    from mtkit import config as cfgmod

    model, precision, batch_tokens = SHAPES[name]
    if args.smoke:
        model, batch_tokens = SMOKE_MODEL, 512
    sets = {
        "training.run_dir": str(run_dir),
        "training.devices": args.device,
        "training.precision": precision,
        "training.batch_tokens": str(batch_tokens),
        "training.compile": str(args.compile).lower(),
        "training.max_minutes": "null",
        **{f"training.{k}": str(v) for k, v in training.items()},
    }
    return cfgmod.load(str(CONFIG), data + [f"model.{m}" for m in model] + [f"{k}={v}" for k, v in sets.items()])


# --------------------------------------------------------------------------------------------- mtkit
class Updates:
    """The trainer's own updates, as the training loop runs them: batches asked for ahead, losses settled once
    per log window."""

    def __init__(self, trainer):
        from mtkit.training.console import Window

        self.trainer, self.window = trainer, Window()
        self.batches, self.position = trainer.epoch_batches(), 0

    def run(self, n: int) -> float:
        """Run ``n`` updates; returns their target tokens."""
        from mtkit.training.step import settle, train_step

        tr, tokens = self.trainer, 0.0
        for _ in range(n):
            if self.position >= len(self.batches):
                self.position = 0
            group = self.batches[self.position : self.position + 1]
            tr.feed.ahead(self.batches[self.position + 1 : self.position + 2])
            step = train_step(tr, group)
            self.position += 1
            tr.state.update += 1
            self.window.add(step, 1)
            tokens += step.tgt_tokens
            if tr.state.update % tr.t.log_every == 0:
                settle(self.window, tr)
                self.window.__init__()
        settle(self.window, tr)
        self.window.__init__()
        return tokens


def profile(updates: Updates, n: int, device: torch.device) -> tuple[float, float]:
    """(kernels launched per update (aten ops per update on a CPU), GPU busy share of the wall time or nan)."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sync(device)
    with torch_profile(activities=activities) as prof:
        start = time.perf_counter()
        updates.run(n)
        sync(device)
        wall = time.perf_counter() - start
    events = prof.events()
    if device.type != "cuda":
        return sum(1 for e in events if e.name.startswith("aten::")) / n, math.nan
    kernels = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA]
    launched = [e for e in kernels if not e.name.startswith(("Memcpy", "Memset"))]
    busy_us = sum(e.time_range.elapsed_us() for e in kernels)
    return len(launched) / n, busy_us / 1e6 / wall


def bench_mtkit(name: str, data: list[str], args, work: Path) -> dict:
    from torch.utils.flop_counter import FlopCounterMode

    from mtkit.training.loop import Trainer

    device = torch.device(args.device)
    cfg = shape_config(name, data, args, work / f"run-{name}")
    with contextlib.redirect_stdout(sys.stderr):
        trainer = Trainer(cfg)
    if cfg.training.compile:
        trainer.net = torch.compile(trainer.net)
    trainer.model.train()
    updates = Updates(trainer)
    updates.run(args.warmup)
    sync(device)
    start = time.perf_counter()
    tokens = updates.run(args.updates)
    sync(device)
    seconds = time.perf_counter() - start
    with FlopCounterMode(display=False) as counter:
        updates.run(2)
    launches, busy = profile(updates, args.profile, device)
    params = trainer.model.num_parameters()
    del trainer, updates
    return {
        "updates_s": args.updates / seconds,
        "tok_s": tokens / seconds,
        "gflop": counter.get_total_flops() / 2 / 1e9,
        "launches": launches,
        "busy": busy,
        "params": params,
        "precision": cfg.training.precision,
        "batch_tokens": cfg.training.batch_tokens,
    }


# --------------------------------------------------------------------------------------------- plain
class PlainTransformer(nn.Module):
    """``nn.Transformer`` with tied token embeddings scaled by sqrt(d) and sinusoidal positions."""

    def __init__(self, vocab: int, d: int, heads: int, layers: int, ffn: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.core = nn.Transformer(d, heads, layers, layers, ffn, dropout=0.1, batch_first=True)
        position = torch.arange(64)[:, None] * torch.exp(torch.arange(0, d, 2) * (-math.log(10000.0) / d))
        table = torch.zeros(64, d)
        table[:, 0::2], table[:, 1::2] = torch.sin(position), torch.cos(position)
        self.register_buffer("positions", table)
        self.scale = math.sqrt(d)

    def forward(self, src, tgt, causal):
        s = self.embed(src) * self.scale + self.positions[: src.size(1)]
        t = self.embed(tgt) * self.scale + self.positions[: tgt.size(1)]
        return nn.functional.linear(self.core(s, t, tgt_mask=causal, tgt_is_causal=True), self.embed.weight)


def bench_plain(name: str, args, vocab: int, batch_tokens: int, precision: str) -> dict:
    device = torch.device(args.device)
    model_sets, _, _ = SHAPES[name]
    dims = dict(s.split("=") for s in (SMOKE_MODEL if args.smoke else model_sets))
    d, heads, ffn = int(dims.get("d_model", 256)), int(dims.get("heads", 4)), int(dims.get("ffn_dim", 1024))
    layers = int(dims.get("encoder_layers", 3))
    torch.manual_seed(1)
    model = PlainTransformer(vocab, d, heads, layers, ffn).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=0.1)
    sentences = max(1, batch_tokens // TGT_LEN)
    src = torch.randint(4, vocab, (sentences, SRC_LEN), device=device)
    tgt = torch.randint(4, vocab, (sentences, TGT_LEN + 1), device=device)
    causal = nn.Transformer.generate_square_subsequent_mask(TGT_LEN, device=device)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)

    def update():
        with torch.autocast(device.type, dtype=dtype, enabled=dtype is not None):
            logits = model(src, tgt[:, :-1], causal)
        loss = loss_fn(logits.float().reshape(-1, vocab), tgt[:, 1:].reshape(-1))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        update()
    sync(device)
    start = time.perf_counter()
    for _ in range(args.updates):
        update()
    sync(device)
    seconds = time.perf_counter() - start
    return {"tok_s": sentences * TGT_LEN * args.updates / seconds, "updates_s": args.updates / seconds}


# ------------------------------------------------------------------------------------------ decoding
def bench_decoding(data: list[str], args, work: Path) -> list[tuple]:
    """Rows (engine, search, batch, sentences/s, BLEU) for mtkit and transformers on the test set."""
    import sacrebleu
    from transformers import MarianMTModel, MarianTokenizer

    import mtkit
    from mtkit.interop.marian_export import export_main
    from mtkit.training.loop import Trainer

    device = torch.device(args.device)
    run_dir = work / "run-decode"
    shutil.rmtree(run_dir, ignore_errors=True)
    limit = {"max_updates": 4} if args.smoke else {"max_minutes": args.decode_minutes}
    cfg = shape_config(
        "small", data, args, run_dir, validate_every=100000, save_every=100000, valid_bleu="false", **limit
    )
    with contextlib.redirect_stdout(sys.stderr):
        Trainer(cfg).run()
        hf_dir = export_main(run=run_dir, out=work / "hf-decode", force=True)
    split = Path(cfg.data.splits["test"].src).parent
    with gzip.open(split / "test_2016_flickr.en.gz", "rt", encoding="utf-8") as f:
        sources = f.read().splitlines()
    with gzip.open(split / "test_2016_flickr.de.gz", "rt", encoding="utf-8") as f:
        references = f.read().splitlines()
    hf_model = MarianMTModel.from_pretrained(hf_dir).to(device).eval()
    hf_model.generation_config.max_length = None  # max_new_tokens below, as mtkit's max_len_a * source + max_len_b
    hf_tok = MarianTokenizer.from_pretrained(hf_dir)
    max_len_a, max_len_b = cfg.decoding.max_len_a, cfg.decoding.max_len_b
    if args.smoke:  # 4 updates give no EOS: every line would run to its limit, which the paths do not need
        max_len_a, max_len_b = 0.0, 6

    def hf_translate(lines: list[str], beam: int, batch: int) -> list[str]:
        out = []
        with torch.inference_mode():
            for i in range(0, len(lines), batch):
                enc = hf_tok(lines[i : i + batch], return_tensors="pt", padding=True).to(device)
                longest = int(enc["attention_mask"].sum(1).max())
                ids = hf_model.generate(
                    **enc,
                    num_beams=beam,
                    do_sample=False,
                    max_new_tokens=int(max_len_a * longest + max_len_b),
                    length_penalty=cfg.decoding.length_penalty,
                )
                out += hf_tok.batch_decode(ids, skip_special_tokens=True)
        return out

    rows = []
    for batch in (cfg.decoding.batch_size, 1000):
        for beam in (5, 1):
            model = mtkit.load(
                run_dir, device=args.device, beam_size=beam, batch_size=batch, max_len_a=max_len_a, max_len_b=max_len_b
            )
            engines = (
                ("mtkit", lambda lines, m=model: m.translate(lines)),
                ("transformers", lambda lines, b=beam, n=batch: hf_translate(lines, b, n)),
            )
            for engine, translate in engines:
                translate(sources[:batch])  # warm-up: kernels, caches, autotuning
                sync(device)
                start = time.perf_counter()
                hyps = translate(sources)
                sync(device)
                rate = len(sources) / (time.perf_counter() - start)
                bleu = sacrebleu.corpus_bleu(hyps, [references]).score
                rows.append((engine, "greedy" if beam == 1 else f"beam {beam}", batch, rate, bleu))
    return rows


# ---------------------------------------------------------------------------------------------- main
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default=None, help="default: cuda when a GPU is visible, else cpu")
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--updates", type=int, default=60, help="timed updates per shape")
    ap.add_argument("--warmup", type=int, default=10, help="untimed updates first")
    ap.add_argument("--profile", type=int, default=10, help="updates under torch.profiler")
    ap.add_argument("--compile", action="store_true", help="training.compile: true")
    ap.add_argument("--no-decode", action="store_true")
    ap.add_argument("--decode-minutes", type=float, default=2.0, help="training of the model decoding runs on")
    ap.add_argument("--work", default="work/bench-gpu", help="prepared data and runs (reused)")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU: every path, no figure to keep")
    args = ap.parse_args()
    if args.smoke:
        args.device = args.device or "cpu"
        args.updates, args.warmup, args.profile = min(args.updates, 3), min(args.warmup, 1), min(args.profile, 2)
        torch.set_num_threads(1)
    args.device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    device = torch.device(args.device)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    print(f"bench_gpu {time.strftime('%Y-%m-%d %H:%M')}  {device_line(device)}{'  (smoke)' if args.smoke else ''}")
    peak = matmul_rate(device, args.smoke)
    print(f"matmul: {peak:.1f} TFLOP/s ({'bf16' if device.type == 'cuda' else 'float32'})", flush=True)
    data = data_overrides(work, args.smoke)
    from mtkit.tokenizer import Tokenizer

    vocab = Tokenizer.from_dir(work / "data").tgt_vocab_size
    launch_name = "kernels/update" if device.type == "cuda" else "aten ops/update"
    print(
        f"{'shape':6} {'prec':5} {'params':>7} {'upd/s':>7} {'mtkit tok/s':>12} {'GFLOP/upd':>9} {'TFLOP/s':>8} "
        f"{'of peak':>7} {'busy':>5} {launch_name:>15} {'plain tok/s':>12} {'mtkit/plain':>11}"
    )
    for name in args.shapes:
        m = bench_mtkit(name, data, args, work)
        p = bench_plain(name, args, vocab, m["batch_tokens"], m["precision"])
        achieved = m["gflop"] * m["updates_s"] / 1e3
        busy = "n/a" if math.isnan(m["busy"]) else f"{m['busy']:.0%}"
        print(
            f"{name:6} {m['precision']:5} {m['params'] / 1e6:6.2f}M {m['updates_s']:7.2f} {m['tok_s']:12,.0f} "
            f"{m['gflop']:9.1f} {achieved:8.2f} {achieved / peak:7.1%} {busy:>5} {m['launches']:15,.0f} "
            f"{p['tok_s']:12,.0f} {m['tok_s'] / p['tok_s']:10.2f}x",
            flush=True,
        )
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if not args.no_decode:
        rows = bench_decoding(data, args, work)
        print(f"{'decoding':12} {'search':7} {'batch':>5} {'sent/s':>9} {'BLEU':>6}")
        for engine, search, batch, rate, bleu in rows:
            print(f"{engine:12} {search:7} {batch:5} {rate:9,.1f} {bleu:6.2f}")
        for search in ("beam 5", "greedy"):
            best = {e: max(r[3] for r in rows if r[0] == e and r[1] == search) for e in ("mtkit", "transformers")}
            print(
                f"{search}: mtkit {best['mtkit'] / best['transformers']:.2f}x transformers' generate at its best batch"
            )


if __name__ == "__main__":
    main()
