"""`mtkit translate`: a streaming stdin -> stdout pipeline, one output line per input line, always.

Lines are read lazily in chunks, each chunk is sorted by length and cut into batches for speed, and the
translations are written back in input order and flushed, so the command works inside a pipe.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import select
import stat
import sys
from pathlib import Path
from typing import IO, Iterable, Iterator, Optional

import torch

from mtkit import checkpoint as ckpt
from mtkit import config as cfgmod
from mtkit.errors import MtkitError
from mtkit.files import atomic_open
from mtkit.models import BOS, EOS, PAD, UNK, Seq2Seq, State, build_model


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
    if dtype == torch.qint8:
        model = quantize_int8(model.eval())
    else:
        model.to(device=device, dtype=dtype).eval()
    return Loaded(model, tokenizer, cfg, meta, file)


def quantize_int8(model: Seq2Seq) -> Seq2Seq:
    """For CPU inference: every linear layer (the Transformer's tied output projection included) gets int8
    weights, quantized per output channel, with activations quantized per batch on the fly (PyTorch's dynamic
    quantization; x86/fbgemm kernels). Embeddings, attention and layer norms stay float32."""
    import warnings

    from torch import nn

    from mtkit.models.transformer import Transformer

    if isinstance(model, Transformer) and model.output is None:  # untie: the projection gets its own int8 copy
        model.output = nn.Linear(model.tgt_embed.weight.size(1), model.tgt_vocab_size, bias=False)
        model.output.weight = nn.Parameter(model.tgt_embed.weight.detach().clone())
    with warnings.catch_warnings():  # torch.ao's deprecation notices; the kernels are what we measured
        warnings.simplefilter("ignore")
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        return quantize_dynamic(model, {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8)


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


_DECODING = cfgmod.DecodingConfig()  # the schema holds the defaults; Options repeats none of them


@dataclasses.dataclass
class Options:
    beam_size: int = _DECODING.beam_size
    length_penalty: float = _DECODING.length_penalty
    max_len_a: float = _DECODING.max_len_a
    max_len_b: int = _DECODING.max_len_b
    batch_size: int = _DECODING.batch_size
    batch_tokens: Optional[int] = _DECODING.batch_tokens
    chunk_size: int = _DECODING.chunk_size
    nbest: int = _DECODING.nbest
    stopping: str = _DECODING.stopping
    sampling: bool = False
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    seed: int = 0
    need_attention: bool = False


def batches(ids: list[list[int]], options: Options) -> Iterator[list[int]]:
    """Indices of the non-empty ``ids``, shortest first, cut into batches of at most ``batch_size`` sentences and,
    with ``batch_tokens``, at most that many padded source tokens (sentences x longest, EOS included)."""
    batch: list[int] = []
    for i in sorted((i for i in range(len(ids)) if ids[i]), key=lambda i: len(ids[i])):  # empty: no model call
        width = len(ids[i]) + 1  # the longest so far, as the order is by length
        if batch and (len(batch) == options.batch_size or
                      (options.batch_tokens is not None and (len(batch) + 1) * width > options.batch_tokens)):
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


def max_chars_for(max_src: int) -> int:
    """Characters of a line beyond which it has more than ``max_src`` subwords: a SentencePiece piece spans at
    most 16 characters (its default ``max_sentencepiece_length``) and NFKC normalisation shrinks text at most a
    few times; 64 characters per subword leaves room for both. The one exception is a long run of characters
    the vocabulary lacks, which SentencePiece makes a single unknown subword: such a line is cut too, and
    words after the run may be lost, as they would be to truncation on a line of real subwords."""
    return 64 * (max_src + 1)


class Translator:
    """Source lines -> list of n-best hypotheses (search.Hypothesis) per line, in order."""

    def __init__(self, model: Seq2Seq, tokenizer, options: Options, device: torch.device):
        self.model, self.tokenizer, self.opt, self.device = model, tokenizer, options, device
        self.max_src = model.max_positions - 1  # room for EOS
        self.max_chars = max_chars_for(self.max_src)
        self.truncated = 0
        self.generator = torch.Generator(device="cpu").manual_seed(options.seed) if options.sampling else None

    def encode(self, lines: list[str]) -> list[list[int]]:
        # a line far over the limit is cut before SentencePiece sees it (cost bounded per line) and counts as
        # truncated; see max_chars_for for why that loses nothing but the tail any truncation loses
        cut = [len(line) > self.max_chars for line in lines]
        ids = self.tokenizer.encode_src([" ".join((line[: self.max_chars] if c else line).split())
                                         for line, c in zip(lines, cut)])
        out = []
        for seq, was_cut in zip(ids, cut):
            if len(seq) > self.max_src or was_cut:
                self.truncated += 1
                seq = seq[: self.max_src]
            out.append(seq)
        return out

    @torch.inference_mode()
    def translate_ids(self, ids: list[list[int]]) -> list[list]:
        from mtkit import search

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
                out = search.sample(self.model, src, temperature=o.temperature, top_k=o.top_k, top_p=o.top_p,
                                    generator=self.generator, nbest=o.nbest, length_penalty=o.length_penalty,
                                    need_attention=o.need_attention, **common)
            elif o.beam_size == 1 and o.nbest == 1:
                out = search.greedy(self.model, src, length_penalty=o.length_penalty, need_attention=o.need_attention,
                                    **common)
            else:
                out = search.beam_search(self.model, src, beam_size=max(o.beam_size, o.nbest), length_penalty=o.length_penalty,
                                         nbest=o.nbest, stopping=o.stopping, need_attention=o.need_attention, **common)
            for i, hyps in zip(idx, out):
                results[i] = hyps
        return results


class Ct2Translator:
    """The Translator surface (``encode``, ``translate_ids``, ``tokenizer``, ``opt``, ``truncated``) over a
    CTranslate2 model written by ``mtkit export``, so ``translate_stream`` serves both engines.

    Decoding keeps the torch engine's contract: PAD and BOS are never emitted, EOS may come first (empty output),
    at most ``ceil(a * src_len + b)`` tokens (``src_len`` with EOS, capped at max_positions - 1; CTranslate2 takes
    one limit per call: a batch runs under its longest limit, and a sentence whose output went past its own
    limit is cut there (greedy, sampling: the same as stopping there) or searched again under it (beam)), and
    scores are log-probabilities over the GNMT
    penalty ``((5 + n + 1) / 6) ** length_penalty``. Beam search stops a sentence once ``beam_size`` hypotheses
    have finished (the ``beam_full`` rule; ``stopping: exact`` is not available here) and ranks them with our
    penalty. Hypotheses carry no attention.

    CTranslate2 renormalises its log-probs over the tokens it may emit (all but PAD and BOS), so its scores
    sit slightly above the model's own (by the PAD and BOS mass, tiny in a trained model) and its beams are
    ranked by them: where that mass is not tiny, a near-tie may go another way than in the torch engine.
    With ``exact_scores`` the kept hypotheses are rescored by a teacher-forced pass (``score_batch``): their
    ``score``/``log_prob`` are then the model's and ``token_log_probs`` is filled (otherwise it is empty).
    ``translate_main`` asks for it where scores are shown (n-best lists, jsonl).
    """

    encode = Translator.encode  # the same normalisation and truncation
    # CTranslate2's beam search stops at beam_size finished hypotheses (our beam_full rule) only under a length
    # penalty (with none it exits once the top beam ends), keeps the beam_size best by score / length ** penalty
    # and ranks by that. A penalty this small keeps that stopping rule while ranking by log-probability, which
    # keeps the hypotheses our GNMT penalty would pick (ranked afterwards, on the raw log-probs) far more often
    # than CTranslate2's length ** alpha, which favours hypotheses cut at the length limit.
    _NEUTRAL_PENALTY = 1e-6

    def __init__(self, model_dir: Path, tokenizer, options: Options, *, max_positions: int, device: str = "cpu",
                 compute_type: str = "default", threads: int = 0, exact_scores: bool = False):
        from mtkit.export import import_ctranslate2

        ct2 = import_ctranslate2()
        try:
            self.engine = ct2.Translator(str(model_dir), device=device, compute_type=compute_type, inter_threads=1,
                                         intra_threads=threads)
        except (ValueError, RuntimeError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else err.__class__.__name__
            raise MtkitError(f"CTranslate2 cannot run this model on {device} as {compute_type} ({first})") from None
        self.tokenizer, self.opt, self.exact_scores = tokenizer, options, exact_scores
        self.where = f"{device} as {compute_type}"
        self.max_src = self.max_len_cap = max_positions - 1  # the source keeps room for EOS
        self.max_chars = max_chars_for(self.max_src)
        self.truncated = 0
        self.src_vocab = tokenizer.src_pieces(range(tokenizer.src_vocab_size))
        self.tgt_vocab = tokenizer.tgt_pieces(range(tokenizer.tgt_vocab_size))
        self.tgt_ids = {piece: i for i, piece in enumerate(self.tgt_vocab)}
        self.banned = [[self.tgt_vocab[PAD]], [self.tgt_vocab[BOS]]]
        if options.sampling:
            ct2.set_random_seed(options.seed)

    def max_length(self, src_len: int) -> int:
        """``search.max_lengths`` for one sentence of ``src_len`` tokens (EOS included)."""
        o = self.opt
        return min(max(math.ceil(o.max_len_a * src_len + o.max_len_b - 1e-6), 0), self.max_len_cap)

    def translate_ids(self, ids: list[list[int]]) -> list[list]:
        results: list[list] = [[] for _ in ids]  # empty in, empty out
        for idx in batches(ids, self.opt):  # batches of similar length, so of similar limits
            sources = [[self.src_vocab[t] for t in ids[i]] for i in idx]  # CTranslate2 appends </s>
            limits = [self.max_length(len(ids[i]) + 1) for i in idx]
            for i, hyps in zip(idx, self._search(sources, limits)):
                results[i] = hyps
        return results

    def _search(self, sources: list[list[str]], limits: list[int]) -> list[list]:
        """The n-best hypotheses of each source, each under its own output limit."""
        found = self._candidates(sources, max(limits))
        again: dict[int, list[int]] = {}  # limit -> sources whose beam search must run again under it
        for s, limit in enumerate(limits):
            if any(len(pieces) > limit for pieces, _ in found[s]):
                if self.opt.sampling or max(self.opt.beam_size, self.opt.nbest) == 1:
                    # a greedy or sampled output cut at the limit is what stopping there would have given
                    found[s] = [(pieces, lp) if len(pieces) < limit else (pieces[:limit], None)
                                for pieces, lp in found[s]]
                else:
                    again.setdefault(limit, []).append(s)
        for limit, group in again.items():
            for s, cands in zip(group, self._candidates([sources[s] for s in group], limit)):
                found[s] = cands
        return self._ranked(sources, found)

    def _candidates(self, sources: list[list[str]], limit: int) -> list[list[tuple[list[str], Optional[float]]]]:
        """Per source: CTranslate2's hypotheses under one output limit, as (pieces, log-prob), where the
        log-prob is None when CTranslate2 gives no usable one (``_ranked`` rescores those)."""
        o = self.opt
        found: list[list[tuple[list[str], Optional[float]]]] = []
        if limit == 0:  # only EOS may follow BOS
            found = [[([], None)] for _ in sources]
        else:
            if o.sampling:
                ct2_penalty = 0.0
                kwargs = dict(beam_size=1, num_hypotheses=o.nbest, sampling_topk=o.top_k, sampling_topp=o.top_p,
                              sampling_temperature=o.temperature)
            else:
                beam = max(o.beam_size, o.nbest)
                ct2_penalty = 0.0 if beam == 1 else self._NEUTRAL_PENALTY
                kwargs = dict(beam_size=beam, num_hypotheses=beam)
            out = self._run(self.engine.translate_batch, sources, max_batch_size=o.batch_size,
                            length_penalty=ct2_penalty, max_decoding_length=limit, min_decoding_length=0,
                            max_input_length=0, return_scores=True, suppress_sequences=self.banned, **kwargs)
            for result in out:
                # Undo CTranslate2's score / length ** penalty. Two kinds get no usable score (None): an empty
                # hypothesis under a penalty (-inf), and one cut at the limit, which CTranslate2 ends without
                # EOS where we force it (so its score lacks log p(EOS)).
                found.append([(pieces, score * len(pieces) ** ct2_penalty
                               if (pieces or not ct2_penalty) and len(pieces) < limit else None)
                              for pieces, score in zip(result.hypotheses, result.scores)])
        return found

    def _ranked(self, sources: list[list[str]], found: list[list[tuple[list[str], Optional[float]]]]) -> list[list]:
        """Hypotheses from ``_candidates``' output: missing log-probs filled in, GNMT-penalised, best first."""
        from mtkit.search import Hypothesis, length_penalty_of

        o = self.opt
        missing = [(s, c) for s, cands in enumerate(found) for c, (_, lp) in enumerate(cands) if lp is None]
        if missing:
            scored = self._score([sources[s] for s, _ in missing], [found[s][c][0] for s, c in missing])
            for (s, c), (log_prob, _) in zip(missing, scored):
                found[s][c] = (found[s][c][0], log_prob)
        results = []
        for cands in found:
            hyps = [Hypothesis([self.tgt_ids.get(p, UNK) for p in pieces],
                               log_prob / length_penalty_of(len(pieces) + 1, o.length_penalty), log_prob, [])
                    for pieces, log_prob in cands]
            hyps.sort(key=lambda h: h.score, reverse=True)
            results.append(hyps[: o.nbest])
        if self.exact_scores:
            kept = [(s, h) for s, hyps in enumerate(results) for h in hyps]
            targets = [[self.tgt_vocab[t] for t in h.tokens] for _, h in kept]
            scored = self._score([sources[s] for s, _ in kept], targets)
            for (_, h), (log_prob, token_log_probs) in zip(kept, scored):
                h.log_prob, h.token_log_probs = log_prob, token_log_probs
                h.score = log_prob / length_penalty_of(len(h.tokens) + 1, o.length_penalty)
            for hyps in results:
                hyps.sort(key=lambda h: h.score, reverse=True)
        return results

    def _run(self, method, *args, **kwargs):
        """A CTranslate2 call; its runtime failures (a missing CUDA library, out of memory) become one line."""
        try:
            return method(*args, **kwargs)
        except RuntimeError as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else err.__class__.__name__
            raise MtkitError(f"CTranslate2 failed running the model on {self.where} ({first}); on a GPU check "
                             "that the CUDA libraries CTranslate2 was built for are installed, or use --device cpu "
                             "or --engine torch") from None

    def _score(self, sources: list[list[str]], targets: list[list[str]]) -> list[tuple[float, list[float]]]:
        """(log-prob, token log-probs with EOS's last) of each target given its source: the model's own numbers."""
        scored = self._run(self.engine.score_batch, sources, targets, max_batch_size=self.opt.batch_size,
                           max_input_length=0)
        return [(math.fsum(r.log_probs), list(r.log_probs)) for r in scored]


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


def translate_chunks(translator: Translator, line_chunks: Iterable[list[str]], out: IO[str], *, fmt: str = "text",
                     alignments: bool = False, plot_dir: Optional[Path] = None) -> int:
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
                from mtkit.plots import plot_attention

                src_pieces = tok.src_pieces(src_ids) + ["</s>"]
                tgt_pieces = tok.tgt_pieces(hyps[0].tokens) + ["</s>"]
                plot_attention(hyps[0].attention.float().cpu().numpy(), src_pieces, tgt_pieces,
                               plot_dir / f"attention_{written + 1:06d}.png", title=texts[0][:80])
            written += 1
        out.flush()
    return written


def _decoding_config(base: cfgmod.DecodingConfig, overrides: dict) -> cfgmod.DecodingConfig:
    dec = base.model_copy(update={k: v for k, v in overrides.items() if v is not None})
    try:
        return cfgmod.DecodingConfig.model_validate(dec.model_dump())
    except Exception as err:  # pydantic ValidationError
        raise MtkitError(cfgmod.validation_message(err, "translate options")) from None


def _options(dec: cfgmod.DecodingConfig, **run_options) -> Options:
    return Options(beam_size=dec.beam_size, length_penalty=dec.length_penalty, max_len_a=dec.max_len_a,
                   max_len_b=dec.max_len_b, batch_size=dec.batch_size, batch_tokens=dec.batch_tokens,
                   chunk_size=dec.chunk_size, nbest=dec.nbest,
                   stopping=dec.stopping, **run_options)


def ct2_translator(paths: list[Path], overrides: dict, *, exact_scores: bool = False, **run_options) -> Ct2Translator:
    """The CTranslate2 engine for an export dir (``mtkit export``), or for a run dir / checkpoint converted on the fly.

    ``--dtype`` picks CTranslate2's compute type (int8, int16, float16, bfloat16, float32, ...); by default the
    type the model was exported with.
    """
    import shutil
    import tempfile

    from mtkit import export

    if len(paths) > 1:
        raise MtkitError("--engine ctranslate2 translates with one model; ensembles (--checkpoint) need --engine torch")
    if run_options.get("need_attention"):
        raise MtkitError("--alignments and --plot-attention need --engine torch")
    export.import_ctranslate2()
    compute_type = overrides.get("dtype") or "default"
    if compute_type not in ("default", "auto", *export.QUANTIZATIONS):
        raise MtkitError(f"--dtype {compute_type!r}: the ctranslate2 engine computes in one of "
                         f"{', '.join(export.QUANTIZATIONS)} (default: the exported type)")
    path, tmp = Path(paths[0]), None
    try:
        if export.is_export_dir(path):
            model_dir = path
        else:  # a run dir or checkpoint: convert to a temporary dir, which CTranslate2 reads once
            tmp = Path(tempfile.mkdtemp(prefix="mtkit-ct2-"))
            model_dir = tmp / "model"
            export.convert(path, model_dir, None)
        meta, tokenizer = export.read_export(model_dir)
        base = cfgmod.from_dict(meta["config"], f"{model_dir} (embedded config)").decoding
        dec = _decoding_config(base, {**overrides, "dtype": None})
        return Ct2Translator(model_dir, tokenizer, _options(dec, **run_options), max_positions=meta["max_positions"],
                             device=dec.device, compute_type=compute_type, threads=dec.threads or 0,
                             exact_scores=exact_scores or dec.nbest > 1)
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def translate_main(*, paths: list[Path], input: Optional[Path], output: Optional[Path], overrides: dict,
                   sampling: bool, temperature: float, top_k: int, top_p: float, seed: int, fmt: str,
                   alignments: bool, plot_attention: Optional[Path], engine: str) -> None:
    """``--engine ctranslate2``, or a dir written by ``mtkit export``, translates through CTranslate2."""
    from mtkit.export import is_export_dir

    if fmt not in ("text", "jsonl"):
        raise MtkitError(f"--format {fmt!r}: use text or jsonl")
    if engine not in ("torch", "ctranslate2"):
        raise MtkitError(f"--engine {engine!r}: use torch or ctranslate2")
    if input is not None and not Path(input).is_file():
        raise MtkitError(f"{input}: input file not found")
    run_options = dict(sampling=sampling, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed,
                       need_attention=alignments or plot_attention is not None)
    if engine == "ctranslate2" or is_export_dir(paths[0]):
        translator = ct2_translator(paths, overrides, exact_scores=fmt == "jsonl", **run_options)
    else:
        translator = _torch_translator(paths, overrides, **run_options)
    _write_translations(translator, input=input, output=output, fmt=fmt, alignments=alignments,
                        plot_attention=plot_attention)


def _torch_translator(paths: list[Path], overrides: dict, **run_options) -> Translator:
    from mtkit.distributed import pick_device

    first_file = ckpt.resolve(paths[0])
    meta_cfg = cfgmod.from_dict(ckpt.read_metadata(first_file)["config"], str(first_file))
    dec = _decoding_config(meta_cfg.decoding, overrides)
    if dec.threads:
        torch.set_num_threads(dec.threads)
    device = pick_device(dec.device)
    dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
             "int8": torch.qint8}[dec.dtype]
    if dtype == torch.float16 and device.type != "cuda":
        raise MtkitError("--dtype float16 needs a CUDA GPU; use float32 (or bfloat16) on CPU")
    if dtype == torch.qint8 and device.type != "cpu":
        raise MtkitError("--dtype int8 is for the CPU (--device cpu); on a GPU use float16 or bfloat16, "
                         "or --engine ctranslate2")
    loaded = [load_checkpoint(p, device, dtype) for p in paths]
    tokenizer = loaded[0].tokenizer
    for other in loaded[1:]:
        if other.tokenizer.fingerprint() != tokenizer.fingerprint():
            raise MtkitError(f"{other.path}: uses another tokenizer than {loaded[0].path}; ensembles need one vocabulary")
    model = loaded[0].model if len(loaded) == 1 else Ensemble([x.model for x in loaded])
    if dec.shortlist:
        from mtkit.shortlist import Shortlisted, check_model, load_lexicon

        check_model(model)
        run_dir = first_file.parent.parent if first_file.parent.name == "checkpoints" else first_file.parent
        lexicon = load_lexicon(run_dir, Path(meta_cfg.data.dir), tokenizer)
        model = Shortlisted(model, lexicon, per_source=dec.shortlist, frequent=dec.shortlist_frequent,
                            copy_source=meta_cfg.data.joint_vocab)
    return Translator(model, tokenizer, _options(dec, **run_options), device)


def _is_regular_file(stream) -> bool:
    try:
        return stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):  # no file descriptor (a test's in-memory stream)
        return True


def _write_translations(translator, *, input: Optional[Path], output: Optional[Path], fmt: str, alignments: bool,
                        plot_attention: Optional[Path]) -> None:
    if plot_attention is not None:
        try:
            plot_attention.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise MtkitError(f"--plot-attention {plot_attention}: cannot create the folder ({err.strerror or err})") from None
    with contextlib.ExitStack() as stack:
        if output is not None:  # whole or not at all
            try:
                sink = stack.enter_context(atomic_open(Path(output), "w", encoding="utf-8"))
            except OSError as err:
                raise MtkitError(f"{output}: cannot write ({err.strerror or err}); check the folder exists and is "
                                 "writable") from None
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
        print(f"mtkit: warning: {translator.truncated} input line(s) longer than the model's limit of "
              f"{translator.max_src} subwords were truncated", file=sys.stderr)
