"""`mtkit translate`: a streaming stdin -> stdout pipeline, one output line per input line, always.

Lines are read lazily in chunks, each chunk is sorted by length and cut into batches for speed, and the
translations are written back in input order and flushed, so the command works inside a pipe.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from pathlib import Path
from typing import IO, Iterable, Iterator, Optional

import torch

from mtkit import checkpoint as ckpt
from mtkit import config as cfgmod
from mtkit.errors import MtkitError
from mtkit.models import EOS, PAD, Seq2Seq, State, build_model


# ------------------------------------------------------------------------------------------ loading
@dataclasses.dataclass
class Loaded:
    model: Seq2Seq
    tokenizer: object
    config: cfgmod.Config
    metadata: dict
    path: Path


def load_checkpoint(path: Path, device: torch.device = torch.device("cpu"), dtype: torch.dtype = torch.float32) -> Loaded:
    """A run dir or checkpoint file -> model in eval mode, its tokenizer and config (nothing else needed)."""
    from mtkit.tokenizer import Tokenizer

    file = ckpt.resolve(Path(path))
    bundle = ckpt.load(file)
    meta = bundle.metadata
    try:
        cfg = cfgmod.from_dict(meta["config"], f"{file} (embedded config)")
        src_v, tgt_v, joint = meta["src_vocab_size"], meta["tgt_vocab_size"], meta["joint_vocab"]
    except KeyError as err:
        raise MtkitError(f"{file}: checkpoint metadata lacks {err}; it was not written by mtkit train") from None
    if not bundle.tokenizer:
        raise MtkitError(f"{file}: checkpoint carries no tokenizer models")
    tokenizer = Tokenizer.from_model_bytes(bundle.tokenizer)
    if (tokenizer.src_vocab_size, tokenizer.tgt_vocab_size) != (src_v, tgt_v):
        raise MtkitError(f"{file}: embedded tokenizer vocab sizes {(tokenizer.src_vocab_size, tokenizer.tgt_vocab_size)} "
                         f"do not match the model's {(src_v, tgt_v)}")
    model = build_model(cfg.model, src_v, tgt_v, joint)
    ckpt.load_weights(model, bundle.model, file)
    model.to(device=device, dtype=dtype).eval()
    return Loaded(model, tokenizer, cfg, meta, file)


@dataclasses.dataclass
class EnsembleState(State):
    states: list


class Ensemble(Seq2Seq):
    """Several models with one target vocabulary: log of the averaged probabilities at each step."""

    def __init__(self, models: list[Seq2Seq]):
        super().__init__()
        self.models = torch.nn.ModuleList(models)
        self.src_vocab_size, self.tgt_vocab_size = models[0].src_vocab_size, models[0].tgt_vocab_size
        self.max_positions = min(m.max_positions for m in models)

    def encode(self, src, src_mask):
        return [m.encode(src, src_mask) for m in self.models]

    def init_state(self, memory, src_mask):
        return EnsembleState([m.init_state(mem, src_mask) for m, mem in zip(self.models, memory)])

    def step(self, prev_tokens, state, need_attention=False):
        outs = [m.step(prev_tokens, s, need_attention) for m, s in zip(self.models, state.states)]
        log_probs = torch.logsumexp(torch.stack([o[0] for o in outs]), dim=0) - math.log(len(outs))
        attn = [o[2] for o in outs if o[2] is not None]
        attention = torch.stack(attn).mean(0) if attn else None
        return log_probs, EnsembleState([o[1] for o in outs]), attention

    def forward(self, src, tgt_in):
        logps = torch.stack([m(src, tgt_in).float().log_softmax(-1) for m in self.models])
        return torch.logsumexp(logps, dim=0) - math.log(len(self.models))


# -------------------------------------------------------------------------------------------- input
def read_lines(stream: IO[bytes]) -> Iterator[str]:
    """Lines of a byte stream as text; invalid UTF-8 is replaced (U+FFFD), never fatal."""
    for raw in stream:
        yield raw.decode("utf-8", errors="replace").rstrip("\r\n")


def chunks(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


@dataclasses.dataclass
class Options:
    beam_size: int = 5
    length_penalty: float = 1.0
    max_len_a: float = 1.5
    max_len_b: int = 10
    batch_size: int = 64
    chunk_size: int = 2000
    nbest: int = 1
    sampling: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    need_attention: bool = False


class Translator:
    """Source lines -> list of n-best hypotheses (search.Hypothesis) per line, in order."""

    def __init__(self, model: Seq2Seq, tokenizer, options: Options, device: torch.device):
        self.model, self.tokenizer, self.opt, self.device = model, tokenizer, options, device
        self.max_src = model.max_positions - 1  # room for EOS
        self.truncated = 0
        self.generator = torch.Generator(device="cpu").manual_seed(options.seed) if options.sampling else None

    def encode(self, lines: list[str]) -> list[list[int]]:
        ids = self.tokenizer.encode_src([" ".join(line.split()) for line in lines])
        out = []
        for seq in ids:
            if len(seq) > self.max_src:
                self.truncated += 1
                seq = seq[: self.max_src]
            out.append(seq)
        return out

    @torch.inference_mode()
    def translate_ids(self, ids: list[list[int]]) -> list[list]:
        from mtkit import search

        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        results: list[list] = [[] for _ in ids]
        todo = [i for i in order if ids[i]]  # empty inputs give empty outputs without a model call
        o = self.opt
        for start in range(0, len(todo), o.batch_size):
            idx = todo[start : start + o.batch_size]
            width = max(len(ids[i]) for i in idx) + 1
            src = torch.full((len(idx), width), PAD, dtype=torch.long)
            for row, i in enumerate(idx):
                src[row, : len(ids[i])] = torch.tensor(ids[i], dtype=torch.long)
                src[row, len(ids[i])] = EOS
            src = src.to(self.device)
            common = dict(max_len_a=o.max_len_a, max_len_b=o.max_len_b)
            if o.sampling:
                out = search.sample(self.model, src, temperature=o.temperature, top_k=o.top_k, top_p=o.top_p,
                                    generator=self.generator, nbest=o.nbest, **common)
            elif o.beam_size == 1 and o.nbest == 1:
                out = search.greedy(self.model, src, need_attention=o.need_attention, **common)
            else:
                out = search.beam_search(self.model, src, beam_size=max(o.beam_size, o.nbest), length_penalty=o.length_penalty,
                                         nbest=o.nbest, need_attention=o.need_attention, **common)
            for i, hyps in zip(idx, out):
                results[i] = hyps
        return results


# ------------------------------------------------------------------------------------------- output
def format_text(hyps: list, texts: list[str], nbest: int) -> str:
    if nbest == 1:
        return (texts[0] if texts else "") + "\n"
    return "".join(f"{t}\t{h.score:.4f}\n" for h, t in zip(hyps, texts)) if hyps else "\n" * nbest


def format_jsonl(source: str, hyps: list, texts: list[str], pieces, alignments: bool) -> str:
    best = hyps[0] if hyps else None
    record = {
        "source": source,
        "hypothesis": texts[0] if texts else "",
        "score": best.score if best else None,
        "tokens": pieces,
        "token_log_probs": [round(x, 5) for x in best.token_log_probs] if best else [],
        "nbest": [{"hypothesis": t, "score": h.score, "log_prob": h.log_prob} for h, t in zip(hyps, texts)],
    }
    if alignments:
        record["alignment"] = best.attention.tolist() if best is not None and best.attention is not None else []
    return json.dumps(record, ensure_ascii=False) + "\n"


def translate_stream(translator: Translator, lines: Iterable[str], out: IO[str], *, fmt: str = "text",
                     alignments: bool = False, plot_dir: Optional[Path] = None) -> int:
    """Translate ``lines`` to ``out``; returns the number of lines written."""
    tok, opt = translator.tokenizer, translator.opt
    written = 0
    for chunk in chunks(lines, opt.chunk_size):
        ids = translator.encode(chunk)
        results = translator.translate_ids(ids)
        for line, src_ids, hyps in zip(chunk, ids, results):
            texts = tok.decode_tgt([h.tokens for h in hyps]) if hyps else []
            if fmt == "jsonl":
                pieces = tok.tgt_pieces(hyps[0].tokens) if hyps else []
                out.write(format_jsonl(line, hyps, texts, pieces, alignments))
            else:
                out.write(format_text(hyps, texts, opt.nbest))
            if plot_dir is not None and hyps and hyps[0].attention is not None:
                from mtkit.plots import plot_attention

                src_pieces = tok.src_pieces(src_ids) + ["</s>"]
                tgt_pieces = tok.tgt_pieces(hyps[0].tokens) + ["</s>"]
                plot_attention(hyps[0].attention.float().cpu().numpy(), src_pieces, tgt_pieces,
                               plot_dir / f"attention_{written + 1:06d}.png", title=texts[0][:80])
            written += 1
        out.flush()
    return written


def translate_main(*, paths: list[Path], input: Optional[Path], output: Optional[Path], overrides: dict,
                   sampling: bool, temperature: float, top_k: int, top_p: float, seed: int, fmt: str,
                   alignments: bool, plot_attention: Optional[Path], engine: str) -> None:
    from mtkit.distributed import pick_device

    if fmt not in ("text", "jsonl"):
        raise MtkitError(f"--format {fmt!r}: use text or jsonl")
    if engine == "ctranslate2":
        raise MtkitError("--engine ctranslate2 is not available yet in this version; use --engine torch")
    if engine != "torch":
        raise MtkitError(f"--engine {engine!r}: use torch")
    first_file = ckpt.resolve(paths[0])
    meta_cfg = cfgmod.from_dict(ckpt.read_metadata(first_file)["config"], str(first_file))
    dec = meta_cfg.decoding.model_copy(update={k: v for k, v in overrides.items() if v is not None})
    try:
        dec = cfgmod.DecodingConfig.model_validate(dec.model_dump())
    except Exception as err:  # pydantic ValidationError
        raise MtkitError(cfgmod.validation_message(err, "translate options")) from None
    if dec.threads:
        torch.set_num_threads(dec.threads)
    device = pick_device(dec.device)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dec.dtype]
    if dtype == torch.float16 and device.type != "cuda":
        raise MtkitError("--dtype float16 needs a CUDA GPU; use float32 (or bfloat16) on CPU")
    loaded = [load_checkpoint(p, device, dtype) for p in paths]
    tokenizer = loaded[0].tokenizer
    for other in loaded[1:]:
        if other.tokenizer.fingerprint() != tokenizer.fingerprint():
            raise MtkitError(f"{other.path}: uses another tokenizer than {loaded[0].path}; ensembles need one vocabulary")
    model = loaded[0].model if len(loaded) == 1 else Ensemble([x.model for x in loaded])
    options = Options(beam_size=dec.beam_size, length_penalty=dec.length_penalty, max_len_a=dec.max_len_a,
                      max_len_b=dec.max_len_b, batch_size=dec.batch_size, chunk_size=dec.chunk_size, nbest=dec.nbest,
                      sampling=sampling, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                      need_attention=alignments or plot_attention is not None)
    translator = Translator(model, tokenizer, options, device)
    if plot_attention is not None:
        plot_attention.mkdir(parents=True, exist_ok=True)
    if input is not None and not Path(input).is_file():
        raise MtkitError(f"{input}: input file not found")
    src = open(input, "rb") if input is not None else sys.stdin.buffer
    out_tmp = None
    if output is not None:
        out_tmp = Path(output).with_name(f".{Path(output).name}.tmp")
        sink = open(out_tmp, "w", encoding="utf-8")
    else:
        sys.stdout.reconfigure(encoding="utf-8", errors="replace")
        sink = sys.stdout
    ok = False
    try:
        translate_stream(translator, read_lines(src), sink, fmt=fmt, alignments=alignments, plot_dir=plot_attention)
        ok = True
    finally:
        if input is not None:
            src.close()
        if out_tmp is not None:
            sink.close()
            if ok:
                out_tmp.replace(output)
            else:
                out_tmp.unlink(missing_ok=True)
    if translator.truncated:
        print(f"mtkit: warning: {translator.truncated} input line(s) longer than the model's limit of "
              f"{translator.max_src} subwords were truncated", file=sys.stderr)
