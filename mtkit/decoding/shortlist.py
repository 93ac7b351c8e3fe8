"""Lexical shortlists: score each sentence's likely target subwords instead of the whole vocabulary.

At every decoding step a Transformer spends about as much time on the output layer (projection onto the
target vocabulary, log-softmax, top-k over it) as on all its decoder layers. Most of those subwords cannot
appear in a given sentence's translation. With a shortlist (Marian's ``--shortlist``, CTranslate2's vocabulary
map), each sentence is scored over a candidate set of a few hundred subwords:

- EOS (always column 0) and UNK;
- the ``frequent`` most frequent target subwords of the training data;
- for each subword of the source sentence, its ``per_source`` best translations: the target subwords that
  co-occur with it in the training pairs, ranked by Dice's coefficient 2 c(s, t) / (c(s) + c(t)), where c
  counts sentence pairs;
- with a joint vocabulary, the source subwords themselves (names and numbers are copied).

Log-probabilities are then normalised over the candidate set, so scores are those of the shortlisted model.
The table of translations is built once from the run's training data and kept as ``RUN_DIR/lexicon.safetensors``.
"""

from __future__ import annotations

import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from safetensors import SafetensorError, safe_open
from safetensors.torch import save as st_save
from torch import Tensor

from mtkit.data.batches import ParallelData
from mtkit.errors import MtkitError
from mtkit.files import atomic_write_bytes
from mtkit.manifest import MANIFEST
from mtkit.models.base import Seq2Seq, State
from mtkit.models.transformer import Transformer
from mtkit.tokenizer import BOS, EOS, PAD, UNK, Tokenizer

LEXICON_FILE = "lexicon.safetensors"
LEXICON_FORMAT = "mtkit-lexicon-1"
STORED_PER_SOURCE = 100  # translations kept per source subword; decoding uses the first `per_source`
STORED_FREQUENT = 1000  # most frequent target subwords kept; decoding uses the first `frequent`
MAX_PAIRS = 1_000_000  # sentence pairs counted (evenly spaced over the corpus): plenty for a lexical table
SOURCE_BLOCK = 1024  # source subwords whose co-occurrence rows are made dense at a time


@dataclass
class Lexicon:
    translations: Tensor  # (src_vocab, STORED_PER_SOURCE) int64 target ids, best first; -1 where none
    frequent: Tensor  # (STORED_FREQUENT,) int64 target ids, most frequent first
    tokenizer: str  # fingerprint of the tokenizer the ids belong to


def _sampled_tokens(tokens: np.ndarray, offsets: np.ndarray, rows: np.ndarray) -> tuple[Tensor, Tensor]:
    """The tokens of the sentences ``rows``: (nnz,) row number (0..len(rows)-1) and (nnz,) id, int64."""
    lengths = offsets[rows + 1] - offsets[rows]  # (n,)
    row_of_token = np.repeat(np.arange(len(rows), dtype=np.int64), lengths)  # (nnz,)
    first_of_row = np.cumsum(lengths) - lengths  # (n,) where each sentence starts among the sampled tokens
    positions = offsets[rows][row_of_token] + np.arange(int(lengths.sum())) - first_of_row[row_of_token]
    return torch.from_numpy(row_of_token), torch.from_numpy(np.asarray(tokens[positions], dtype=np.int64))


def _distinct(rows: Tensor, ids: Tensor, vocab: int) -> tuple[Tensor, Tensor]:
    """(row, id) pairs without repeats: a subword counts once per sentence."""
    keys = torch.unique(rows * vocab + ids)
    return keys // vocab, keys % vocab


def build_lexicon(data, src_vocab: int, tgt_vocab: int, tokenizer: str) -> Lexicon:
    """Count sentence-level co-occurrences in ``data`` (a train ``ParallelData``) and rank translations by Dice."""
    n = len(data)
    rows = np.unique(np.linspace(0, n - 1, min(n, MAX_PAIRS)).astype(np.int64)) if n else np.zeros(0, np.int64)
    src_rows, src_ids = _distinct(*_sampled_tokens(*data.arrays("src"), rows), src_vocab)
    tgt_rows, all_tgt_ids = _sampled_tokens(*data.arrays("tgt"), rows)
    token_count = torch.bincount(all_tgt_ids, minlength=tgt_vocab).double()  # (tgt_vocab,) occurrences
    tgt_rows, tgt_ids = _distinct(tgt_rows, all_tgt_ids, tgt_vocab)
    src_count = torch.bincount(src_ids, minlength=src_vocab).double()  # (src_vocab,) pairs holding s
    tgt_count = torch.bincount(tgt_ids, minlength=tgt_vocab).double()  # (tgt_vocab,) pairs holding t
    targets = torch.sparse_coo_tensor(
        torch.stack([tgt_rows, tgt_ids]), torch.ones(len(tgt_ids)), (len(rows), tgt_vocab), check_invariants=False
    ).coalesce()
    translations = torch.full((src_vocab, STORED_PER_SOURCE), -1, dtype=torch.int64)
    excluded = torch.tensor([PAD, UNK, BOS, EOS])
    k = min(STORED_PER_SOURCE, tgt_vocab)
    for first in range(0, src_vocab, SOURCE_BLOCK):
        last = min(first + SOURCE_BLOCK, src_vocab)
        in_block = (src_ids >= first) & (src_ids < last)
        sources = torch.sparse_coo_tensor(
            torch.stack([src_ids[in_block] - first, src_rows[in_block]]),
            torch.ones(int(in_block.sum())),
            (last - first, len(rows)),
            check_invariants=False,
        ).coalesce()
        with warnings.catch_warnings():  # "sparse CSR support is in beta": the product is checked by the tests
            warnings.simplefilter("ignore")
            together = torch.sparse.mm(sources, targets).to_dense().double()  # (block, tgt_vocab) c(s, t)
        dice = 2 * together / (src_count[first:last, None] + tgt_count[None, :]).clamp(min=1)
        dice[:, excluded] = 0
        best, ids = dice.topk(k, dim=1)  # (block, k)
        translations[first:last, :k] = ids.masked_fill(best <= 0, -1)
    token_count[excluded] = -1
    frequent = token_count.argsort(descending=True, stable=True)[: min(STORED_FREQUENT, tgt_vocab - len(excluded))]
    return Lexicon(translations, frequent, tokenizer)


def save_lexicon(path: Path, lexicon: Lexicon) -> None:
    tensors = {"translations": lexicon.translations.to(torch.int32), "frequent": lexicon.frequent.to(torch.int32)}
    atomic_write_bytes(path, st_save(tensors, metadata={"format": LEXICON_FORMAT, "tokenizer": lexicon.tokenizer}))


def read_lexicon(path: Path) -> Lexicon:
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            if meta.get("format") != LEXICON_FORMAT:
                raise MtkitError(f"{path}: not an mtkit lexicon; delete it and it is rebuilt from the training data")
            translations, frequent = f.get_tensor("translations").long(), f.get_tensor("frequent").long()
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise MtkitError(
            f"{path}: unreadable lexicon ({str(err).splitlines()[0] if str(err) else err!r}); delete it "
            "and it is rebuilt from the training data"
        ) from None
    if translations.dim() != 2 or frequent.dim() != 1:
        raise MtkitError(f"{path}: malformed lexicon tensors; delete it and it is rebuilt from the training data")
    return Lexicon(translations, frequent, meta.get("tokenizer", ""))


def load_lexicon(run_dir: Path, data_dir: Path, tokenizer) -> Lexicon:
    """``run_dir``'s lexicon, built from ``data_dir``'s training split (and saved) the first time it is needed."""
    path = run_dir / LEXICON_FILE
    fingerprint = tokenizer.fingerprint()
    if path.is_file():
        lexicon = read_lexicon(path)
        if lexicon.tokenizer == fingerprint and lexicon.translations.size(0) == tokenizer.src_vocab_size:
            return lexicon
    if not (data_dir / MANIFEST).is_file():
        raise MtkitError(
            f"{run_dir}: a shortlist needs {LEXICON_FILE}, built from the training data in {data_dir}, "
            "which is not there; run `mtkit prepare` with the run's config, or translate without a "
            "shortlist (--shortlist 0)"
        )
    if Tokenizer.from_dir(data_dir).fingerprint() != fingerprint:
        raise MtkitError(
            f"{data_dir}: its SentencePiece models are not the run's, so it cannot give {run_dir} a "
            "shortlist; translate without one (--shortlist 0)"
        )
    started = time.perf_counter()
    lexicon = build_lexicon(
        ParallelData(data_dir, "train"), tokenizer.src_vocab_size, tokenizer.tgt_vocab_size, fingerprint
    )
    try:
        save_lexicon(path, lexicon)
        where = f"saved to {path}"
    except MtkitError as err:  # a read-only run dir: use it in memory, say why it is not kept
        where = f"not saved: {err}"
    print(
        f"mtkit: built the shortlist lexicon from {data_dir} in {time.perf_counter() - started:.1f}s ({where})",
        file=sys.stderr,
    )
    return lexicon


def candidates(lexicon: Lexicon, src: Tensor, *, per_source: int, frequent: int, copy_source: bool) -> Tensor:
    """src (batch, src_len) -> (batch, columns) int64 candidate target ids per sentence: EOS in column 0, then
    distinct ids in increasing order, PAD filling the rest of rows with fewer candidates."""
    batch = src.size(0)
    parts = [
        lexicon.frequent[:frequent].to(src.device).expand(batch, -1),
        lexicon.translations[:, :per_source].to(src.device)[src].reshape(batch, -1),
    ]  # PAD's row is all -1
    if copy_source:
        parts.append(src)
    ids = torch.cat(parts, dim=1)  # (batch, many)
    ids = ids.masked_fill((ids < 0) | (ids == PAD) | (ids == BOS) | (ids == EOS), PAD)
    ids = torch.cat([ids, torch.full((batch, 1), UNK, dtype=ids.dtype, device=ids.device)], dim=1)
    ids, _ = ids.sort(dim=1)
    repeated = torch.zeros_like(ids, dtype=torch.bool)
    repeated[:, 1:] = ids[:, 1:] == ids[:, :-1]
    ids = ids.masked_fill(repeated, PAD)
    kept = ids.ne(PAD)  # (batch, many)
    width = int(kept.sum(dim=1).max())
    # kept ids first, in increasing order (a stable sort on "not kept" keeps them sorted)
    order = (~kept).to(torch.int8).argsort(dim=1, stable=True)[:, :width]
    ids = ids.gather(1, order)
    return torch.cat([torch.full((batch, 1), EOS, dtype=ids.dtype, device=ids.device), ids], dim=1)


def check_model(model) -> None:
    """The shortlist is offered for one Transformer model (int8 included), the case it is built and tested for."""
    if not isinstance(model, Transformer):
        name = "an ensemble" if hasattr(model, "models") else f"{model.__class__.__name__} models"
        raise MtkitError(
            f"--shortlist works with one Transformer model, not {name}; translate without it (--shortlist 0)"
        )
    if model.logits_bias is not None:
        raise MtkitError("--shortlist does not support model.final_logits_bias; translate without it (--shortlist 0)")


@dataclass
class ShortlistState(State):
    inner: State  # the model's own decoder state
    ids: Tensor  # (rows, columns) int64 candidate target ids of each row's sentence: EOS first, PAD fillers
    index: Tensor  # (rows, columns) int64 where each candidate is in ``union``
    weight: Tensor  # (union, d) the output layer's rows for every candidate id of the batch, shared by all rows

    def reorder(self, index: Tensor) -> "ShortlistState":
        return ShortlistState(
            self.inner.reorder(index), self.ids.index_select(0, index), self.index.index_select(0, index), self.weight
        )


class Shortlisted(Seq2Seq):
    """A Transformer decoding over per-sentence shortlists: each step projects onto the union of the batch's
    candidates only (the model's ``output_rows`` of that union, taken once per batch), normalises every row over
    its own sentence's candidates and returns log-probs over the whole vocabulary, -inf outside the shortlist,
    so search needs nothing special."""

    def __init__(self, model, lexicon: Lexicon, *, per_source: int, frequent: int, copy_source: bool):
        super().__init__()
        check_model(model)
        if lexicon.translations.size(0) != model.src_vocab_size:
            raise MtkitError(
                f"the shortlist lexicon covers {lexicon.translations.size(0)} source subwords, the "
                f"model {model.src_vocab_size}; delete {LEXICON_FILE} and it is rebuilt"
            )
        self.model, self.lexicon = model, lexicon
        self.per_source, self.frequent, self.copy_source = per_source, frequent, copy_source
        self.src_vocab_size, self.tgt_vocab_size = model.src_vocab_size, model.tgt_vocab_size
        self.max_positions = model.max_positions

    def encode(self, src: Tensor, src_mask: Tensor):
        return self.model.encode(src, src_mask), src

    def encode_parts(self, src: Tensor, src_mask: Tensor, sizes):
        return self.model.encode_parts(src, src_mask, sizes), src

    def init_state(self, memory, src_mask: Tensor) -> ShortlistState:
        memory, src = memory
        ids = candidates(
            self.lexicon, src, per_source=self.per_source, frequent=self.frequent, copy_source=self.copy_source
        )  # (batch, columns)
        union, index = torch.unique(ids, sorted=True, return_inverse=True)  # (union,), (batch, columns)
        weight, _ = self.model.output_rows(union)  # (union, d_model); the Transformer's output layer has no bias
        return ShortlistState(self.model.init_state(memory, src_mask), ids, index, weight)

    def step(self, prev_tokens: Tensor, state: ShortlistState, need_attention: bool = False):
        hidden, inner, attention = self.model.step_features(prev_tokens, state.inner, need_attention)
        logits = F.linear(hidden.to(state.weight.dtype), state.weight).float().gather(1, state.index)  # (rows, cols)
        log_probs = logits.masked_fill(state.ids.eq(PAD), float("-inf")).log_softmax(dim=-1)  # fillers: -inf
        full = log_probs.new_full((log_probs.size(0), self.tgt_vocab_size), float("-inf"))  # (rows, vocab)
        full.scatter_(1, state.ids, log_probs)  # every filler column writes -inf to PAD
        return full, ShortlistState(inner, state.ids, state.index, state.weight), attention

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        return self.model(src, tgt_in)
