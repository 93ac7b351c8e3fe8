"""`mtkit translate`: a streaming stdin -> stdout pipeline, one output line per input line, always.

Lines are read lazily in chunks, each chunk is sorted by length and cut into batches for speed, and the
translations are written back in input order and flushed, so the command works inside a pipe. The torch engine
(``Translator``: one model, an ``Ensemble`` or a shortlisted model) and the CTranslate2 one (``ct2.Ct2Translator``)
share ``engine.Engine``; the output formats and the wiring of ``mtkit translate`` are here too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import select
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from typing import IO, Iterable, Iterator, Optional

import torch

from mtkit import checkpoint as ckpt
from mtkit import config as cfgmod
from mtkit import ct2, sampling, search
from mtkit.distributed import pick_device
from mtkit.engine import Engine, Options, batches
from mtkit.errors import MtkitError
from mtkit.files import atomic_open
from mtkit.models import EOS, PAD, Seq2Seq, State
from mtkit.plots import plot_attention
from mtkit.shortlist import Shortlisted, check_model, load_lexicon


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
def read_lines(stream: IO[bytes], max_bytes: Optional[int] = None) -> Iterator[str]:
    """Lines of a byte stream as text; invalid UTF-8 is replaced (U+FFFD), never fatal.

    With ``max_bytes``, a longer line is cut there and the rest of it is skipped without being held in
    memory, so one huge line (a 1 GB file without a newline) costs ``max_bytes``, not its size.
    """
    if max_bytes is None:
        for raw in stream:
            yield raw.decode("utf-8", errors="replace").rstrip("\r\n")
        return
    while raw := stream.readline(max_bytes):
        if len(raw) == max_bytes and not raw.endswith(b"\n"):
            while (rest := stream.readline(max_bytes)) and not rest.endswith(b"\n"):
                pass
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


def pipe_chunks(fd: int, size: int, max_bytes: int, wait: float = 0.05) -> Iterator[list[str]]:
    """``chunks(read_lines(...), size)`` for a pipe or terminal, read from its file descriptor: a chunk also
    ends when nothing more arrives within ``wait`` seconds, so a program that writes one line to
    ``mtkit translate`` and waits for the answer gets it at once (not at EOF or after ``size`` lines), while
    a piped file still fills whole chunks. Lines are split and cut at ``max_bytes`` exactly as ``read_lines``
    does; memory holds at most one chunk, one read block and one partial line.
    """
    pending = b""  # the start of a line whose end has not arrived yet
    skipping = False  # inside a line already cut at max_bytes and handed on
    chunk: list[str] = []

    def decode(raw: bytes) -> str:
        return raw.decode("utf-8", errors="replace").rstrip("\r\n")

    while True:
        if chunk and not _readable(fd, wait):
            yield chunk
            chunk = []
        block = os.read(fd, 1 << 16)
        if not block:
            if pending and not skipping:
                chunk.append(decode(pending))
            if chunk:
                yield chunk
            return
        *complete, pending = (pending + block).split(b"\n")
        for raw in complete:
            if skipping:
                skipping = False  # the rest of a line already cut
            else:
                chunk.append(decode(raw[:max_bytes]))
        if len(pending) >= max_bytes:
            if not skipping:
                chunk.append(decode(pending[:max_bytes]))
                skipping = True
            pending = b""
        while len(chunk) >= size:
            yield chunk[:size]
            chunk = chunk[size:]


def _readable(fd: int, wait: float) -> bool:
    try:
        return bool(select.select([fd], [], [], wait)[0])
    except (OSError, ValueError):  # not selectable: just read (blocking)
        return True


class Translator(Engine):
    """The torch engine: a model (or an ensemble, or a shortlisted model) decoded by ``mtkit.search``."""

    def __init__(self, model: Seq2Seq, tokenizer, options: Options, device: torch.device):
        super().__init__(tokenizer, options, model.max_positions)
        self.model, self.device = model, device
        self.generator = torch.Generator(device="cpu").manual_seed(options.seed) if options.sampling else None

    @torch.inference_mode()
    def translate_ids(self, ids: list[list[int]]) -> list[list]:
        results: list[list] = [[] for _ in ids]  # empty inputs give empty outputs without a model call
        o = self.opt
        for idx in batches(ids, o):
            width = max(len(ids[i]) for i in idx) + 1
            src = torch.full((len(idx), width), PAD, dtype=torch.long)
            for row, i in enumerate(idx):
                src[row, : len(ids[i])] = torch.tensor(ids[i], dtype=torch.long)
                src[row, len(ids[i])] = EOS
            src = src.to(self.device)
            common = dict(max_len_a=o.max_len_a, max_len_b=o.max_len_b)
            if o.sampling:
                out = sampling.sample(
                    self.model,
                    src,
                    temperature=o.temperature,
                    top_k=o.top_k,
                    top_p=o.top_p,
                    generator=self.generator,
                    nbest=o.nbest,
                    length_penalty=o.length_penalty,
                    need_attention=o.need_attention,
                    **common,
                )
            elif o.beam_size == 1 and o.nbest == 1:
                out = search.greedy(
                    self.model, src, length_penalty=o.length_penalty, need_attention=o.need_attention, **common
                )
            else:
                out = search.beam_search(
                    self.model,
                    src,
                    beam_size=max(o.beam_size, o.nbest),
                    length_penalty=o.length_penalty,
                    nbest=o.nbest,
                    stopping=o.stopping,
                    need_attention=o.need_attention,
                    **common,
                )
            for i, hyps in zip(idx, out):
                results[i] = hyps
        return results


# ------------------------------------------------------------------------------------------- output
_LINE_BREAKS = str.maketrans({"\n": " ", "\r": " "})


def one_line(text: str) -> str:
    """A hypothesis can never add an output line: CR / LF (were a subword to hold one) become spaces."""
    return text.translate(_LINE_BREAKS)


def format_text(hyps: list, texts: list[str], nbest: int) -> str:
    """One line per input line; with nbest > 1 exactly ``nbest`` lines "hypothesis<TAB>score" (empty when missing)."""
    if nbest == 1:
        return (one_line(texts[0]) if texts else "") + "\n"
    lines = [f"{one_line(t)}\t{h.score:.4f}" for h, t in zip(hyps[:nbest], texts)]
    return "".join(line + "\n" for line in lines) + "\n" * (nbest - len(lines))


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


def translate_stream(translator: Translator, lines: Iterable[str], out: IO[str], **kw) -> int:
    """Translate ``lines`` to ``out``; returns the number of lines written."""
    return translate_chunks(translator, chunks(lines, translator.opt.chunk_size), out, **kw)


def translate_chunks(
    translator: Translator,
    line_chunks: Iterable[list[str]],
    out: IO[str],
    *,
    fmt: str = "text",
    alignments: bool = False,
    plot_dir: Optional[Path] = None,
) -> int:
    """Translate each chunk of lines (sorted by length inside) to ``out`` in input order, flushing after each."""
    tok, opt = translator.tokenizer, translator.opt
    written = 0
    for chunk in line_chunks:
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
                src_pieces = tok.src_pieces(src_ids) + ["</s>"]
                tgt_pieces = tok.tgt_pieces(hyps[0].tokens) + ["</s>"]
                plot_attention(
                    hyps[0].attention.float().cpu().numpy(),
                    src_pieces,
                    tgt_pieces,
                    plot_dir / f"attention_{written + 1:06d}.png",
                    title=texts[0][:80],
                )
            written += 1
        out.flush()
    return written


def ct2_translator(
    paths: list[Path], overrides: dict, *, exact_scores: bool = False, **run_options
) -> ct2.Ct2Translator:
    """The CTranslate2 engine for an export dir (``mtkit export``), or for a run dir / checkpoint converted on the fly.

    ``--dtype`` picks CTranslate2's compute type (int8, int16, float16, bfloat16, float32, ...); by default the
    type the model was exported with.
    """
    if len(paths) > 1:
        raise MtkitError("--engine ctranslate2 translates with one model; ensembles (--checkpoint) need --engine torch")
    if run_options.get("need_attention"):
        raise MtkitError("--alignments and --plot-attention need --engine torch")
    ct2.import_ctranslate2()
    compute_type = overrides.get("dtype") or "default"
    if compute_type not in ("default", "auto", *ct2.QUANTIZATIONS):
        raise MtkitError(
            f"--dtype {compute_type!r}: the ctranslate2 engine computes in one of "
            f"{', '.join(ct2.QUANTIZATIONS)} (default: the exported type)"
        )
    path, tmp = Path(paths[0]), None
    try:
        if ct2.is_export_dir(path):
            model_dir = path
        else:  # a run dir or checkpoint: convert to a temporary dir, which CTranslate2 reads once
            tmp = Path(tempfile.mkdtemp(prefix="mtkit-ct2-"))
            model_dir = tmp / "model"
            ct2.convert(path, model_dir, None)
        meta, tokenizer = ct2.read_export(model_dir)
        base = cfgmod.from_dict(meta["config"], f"{model_dir} (embedded config)").decoding
        dec = cfgmod.decoding_with(base, {**overrides, "dtype": None})
        return ct2.Ct2Translator(
            model_dir,
            tokenizer,
            Options.from_config(dec, **run_options),
            max_positions=meta["max_positions"],
            device=dec.device,
            compute_type=compute_type,
            threads=dec.threads or 0,
            exact_scores=exact_scores or dec.nbest > 1,
        )
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def translate_main(
    *,
    paths: list[Path],
    input: Optional[Path],
    output: Optional[Path],
    overrides: dict,
    sampling: bool,
    temperature: float,
    top_k: int,
    top_p: float,
    seed: int,
    fmt: str,
    alignments: bool,
    plot_attention: Optional[Path],
    engine: str,
) -> None:
    """``--engine ctranslate2``, or a dir written by ``mtkit export``, translates through CTranslate2."""
    cfgmod.check_flags(format=fmt, engine=engine)
    if input is not None and not Path(input).is_file():
        raise MtkitError(f"{input}: input file not found")
    run_options = dict(
        sampling=sampling,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
        need_attention=alignments or plot_attention is not None,
    )
    if engine == "ctranslate2" or ct2.is_export_dir(paths[0]):
        translator = ct2_translator(paths, overrides, exact_scores=fmt == "jsonl", **run_options)
    else:
        translator = _torch_translator(paths, overrides, **run_options)
    _write_translations(
        translator, input=input, output=output, fmt=fmt, alignments=alignments, plot_attention=plot_attention
    )


def _torch_translator(paths: list[Path], overrides: dict, **run_options) -> Translator:
    first_file = ckpt.resolve(paths[0])
    meta_cfg = cfgmod.from_dict(ckpt.read_metadata(first_file)["config"], str(first_file))
    dec = cfgmod.decoding_with(meta_cfg.decoding, overrides)
    if dec.threads:
        torch.set_num_threads(dec.threads)
    device = pick_device(dec.device)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "int8": torch.qint8}[
        dec.dtype
    ]
    if dtype == torch.float16 and device.type != "cuda":
        raise MtkitError("--dtype float16 needs a CUDA GPU; use float32 (or bfloat16) on CPU")
    if dtype == torch.qint8 and device.type != "cpu":
        raise MtkitError(
            "--dtype int8 is for the CPU (--device cpu); on a GPU use float16 or bfloat16, or --engine ctranslate2"
        )
    loaded = [ckpt.load_checkpoint(p, device, dtype) for p in paths]
    tokenizer = loaded[0].tokenizer
    for other in loaded[1:]:
        if other.tokenizer.fingerprint() != tokenizer.fingerprint():
            raise MtkitError(
                f"{other.path}: uses another tokenizer than {loaded[0].path}; ensembles need one vocabulary"
            )
    model = loaded[0].model if len(loaded) == 1 else Ensemble([x.model for x in loaded])
    if dec.shortlist:
        check_model(model)
        run_dir = first_file.parent.parent if first_file.parent.name == "checkpoints" else first_file.parent
        lexicon = load_lexicon(run_dir, Path(meta_cfg.data.dir), tokenizer)
        model = Shortlisted(
            model,
            lexicon,
            per_source=dec.shortlist,
            frequent=dec.shortlist_frequent,
            copy_source=meta_cfg.data.joint_vocab,
        )
    return Translator(model, tokenizer, Options.from_config(dec, **run_options), device)


def _is_regular_file(stream) -> bool:
    try:
        return stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):  # no file descriptor (a test's in-memory stream)
        return True


def _write_translations(
    translator,
    *,
    input: Optional[Path],
    output: Optional[Path],
    fmt: str,
    alignments: bool,
    plot_attention: Optional[Path],
) -> None:
    if plot_attention is not None:
        try:
            plot_attention.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise MtkitError(
                f"--plot-attention {plot_attention}: cannot create the folder ({err.strerror or err})"
            ) from None
    with contextlib.ExitStack() as stack:
        if output is not None:  # whole or not at all
            try:
                sink = stack.enter_context(atomic_open(Path(output), "w", encoding="utf-8"))
            except OSError as err:
                raise MtkitError(
                    f"{output}: cannot write ({err.strerror or err}); check the folder exists and is writable"
                ) from None
        else:
            sys.stdout.reconfigure(encoding="utf-8", errors="replace")
            sink = sys.stdout
        src = stack.enter_context(open(input, "rb")) if input is not None else sys.stdin.buffer
        max_bytes = 4 * translator.max_chars  # UTF-8: at most 4 bytes per character
        if input is None and not _is_regular_file(src):  # a pipe or terminal: answer each pause at once
            line_chunks = pipe_chunks(src.fileno(), translator.opt.chunk_size, max_bytes)
        else:
            line_chunks = chunks(read_lines(src, max_bytes), translator.opt.chunk_size)
        translate_chunks(translator, line_chunks, sink, fmt=fmt, alignments=alignments, plot_dir=plot_attention)
    if translator.truncated:
        print(
            f"mtkit: warning: {translator.truncated} input line(s) longer than the model's limit of "
            f"{translator.max_src} subwords were truncated",
            file=sys.stderr,
        )
