"""What the trainer reads from a data dir (see ``mtkit.data.prepare``): memory-mapped token arrays, token-budget
batches from length buckets, rank shards, and the padded tensors of one batch.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Optional, Sequence

import numpy as np
import torch

from mtkit.errors import MtkitError
from mtkit.manifest import read_manifest
from mtkit.tokenizer import BOS, EOS, PAD


class ParallelData:
    """One split of a data dir, memory-mapped: nothing is copied into Python lists.

    ``src_lengths`` / ``tgt_lengths``: (N,) int64 subword counts without BOS/EOS.
    ``src(i)`` / ``tgt(i)``: read-only numpy views of sentence i's ids.
    """

    def __init__(self, data_dir, split: str):
        self.data_dir = Path(data_dir)
        self.split = split
        self.manifest = read_manifest(self.data_dir)
        entry = self.manifest["splits"].get(split)
        if entry is None:
            raise MtkitError(
                f"{self.data_dir}: no split {split!r} (it has {', '.join(self.manifest['splits'])}); "
                "add it to data.splits and rerun `mtkit prepare`"
            )
        self.entry = entry
        self.samples = len(entry["files"].get("samples", []))  # sampled-segmentation copies (train only)
        self.sample: Optional[int] = None  # the copy in use; None: the deterministic segmentation
        self._load(entry["files"])

    def _load(self, files: dict, sentences: Optional[int] = None) -> None:
        """Map one copy's token files; ``sentences``: the count a sampled copy must hold (the split's own)."""
        self._tokens, self._offsets = {}, {}
        for side in ("src", "tgt"):
            offsets = np.fromfile(self.data_dir / files[side]["idx"], dtype=np.int64)  # (N + 1,)
            self._offsets[side] = offsets
            self._tokens[side] = _memmap(self.data_dir / files[side]["bin"], np.dtype(self.manifest["dtype"][side]))
            if len(self._tokens[side]) != offsets[-1]:
                raise MtkitError(
                    f"{self.data_dir / files[side]['bin']}: has {len(self._tokens[side])} tokens, index "
                    f"says {offsets[-1]}; rerun `mtkit prepare CONFIG --force`"
                )
        if len(self._offsets["src"]) != len(self._offsets["tgt"]):
            raise MtkitError(
                f"{self.data_dir}: {self.split} source and target counts differ; rerun `mtkit prepare --force`"
            )
        if sentences is not None and len(self._offsets["src"]) != sentences + 1:
            raise MtkitError(
                f"{self.data_dir}: sampled copy {self.sample} of {self.split} holds a different number "
                "of sentences; rerun `mtkit prepare CONFIG --force`"
            )
        self.src_lengths = np.diff(self._offsets["src"])  # (N,) int64
        self.tgt_lengths = np.diff(self._offsets["tgt"])  # (N,) int64

    def use_epoch(self, epoch: int) -> None:
        """Read the sampled copy of this epoch, (epoch - 1) % samples, when prepare wrote any (else no-op)."""
        if self.samples and (epoch - 1) % self.samples != self.sample:
            self.sample = (epoch - 1) % self.samples
            self._load(self.entry["files"]["samples"][self.sample], sentences=len(self))

    def __len__(self) -> int:
        return len(self.src_lengths)

    def arrays(self, side: str) -> tuple[np.ndarray, np.ndarray]:
        """(tokens, offsets) of ``side`` ('src' or 'tgt') in the copy in use: every id of the split concatenated,
        and (N + 1,) int64 offsets; sentence i is ``tokens[offsets[i]:offsets[i + 1]]``."""
        return self._tokens[side], self._offsets[side]

    def src(self, i: int) -> np.ndarray:
        return self._tokens["src"][self._offsets["src"][i] : self._offsets["src"][i + 1]]

    def tgt(self, i: int) -> np.ndarray:
        return self._tokens["tgt"][self._offsets["tgt"][i] : self._offsets["tgt"][i + 1]]

    def text_path(self, side: str) -> Optional[Path]:
        """Cleaned raw text of a non-train split (``side`` 'src' or 'tgt'), e.g. validation references."""
        text = self.entry["files"].get("text")
        return self.data_dir / text[side] if text else None

    def reference_lines(self) -> list[str]:
        """The cleaned target text of this (non-train) split, one entry per example, for BLEU."""
        path = self.text_path("tgt")
        if path is None:
            raise MtkitError(f"{self.data_dir}: split {self.split!r} keeps no text (only non-train splits do)")
        with open(path, encoding="utf-8", newline="\n") as f:
            lines = [line[:-1] if line.endswith("\n") else line for line in f]
        if len(lines) != len(self):
            raise MtkitError(
                f"{path}: {len(lines)} lines for {len(self)} examples; rerun `mtkit prepare CONFIG --force`"
            )
        if self.manifest.get("target_tag") == "decoder":  # the references without their language tag
            lines = [_TAG_AT_START.sub("", line, count=1) for line in lines]
        return lines

    def first_tokens(self, side: str) -> np.ndarray:
        """(N,) each example's first token on ``side`` (``src`` or ``tgt``); -1 for an empty one."""
        offsets = self._offsets[side]
        starts, empty = offsets[:-1], offsets[1:] == offsets[:-1]
        out = np.asarray(self._tokens[side][np.minimum(starts, max(len(self._tokens[side]) - 1, 0))], np.int64)
        out[empty] = -1
        return out


_TAG_AT_START = re.compile(r"^(?:<2[^<>\s]+>|>>[^<>\s]+<<) ?")


def _memmap(path: Path, dtype) -> np.ndarray:
    if path.stat().st_size == 0:  # np.memmap refuses empty files
        return np.zeros(0, dtype)
    return np.memmap(path, dtype=dtype, mode="r")


# ============================================================================================ batches
def make_batches(
    src_lengths,
    tgt_lengths,
    batch_tokens: int,
    *,
    seed: int,
    epoch: int,
    shuffle: bool = True,
    max_sentences: Optional[int] = None,
    multiple: int = 1,
) -> list[np.ndarray]:
    """Group example indices into length-bucketed batches under a token budget.

    A batch of n examples costs n * max(padded source length, padded target length), where a padded
    length counts the EOS (source) / BOS (target) that ``collate`` adds, rounded up to ``multiple`` (8 on a
    GPU: ``collate(..., multiple=8)`` pads to it, so the tensors' shapes suit tensor cores and take few
    values; 1 leaves the lengths as they are). Examples are sorted by
    (target length, source length), ties broken by a seeded shuffle, and cut greedily into batches of
    cost <= batch_tokens; an example over budget on its own gets a batch to itself. With ``shuffle``
    the batch order is permuted. Same seed and epoch -> same batches.
    """
    src_len = _round_up(np.asarray(src_lengths, dtype=np.int64) + 1, multiple)  # (N,)
    tgt_len = _round_up(np.asarray(tgt_lengths, dtype=np.int64) + 1, multiple)  # (N,)
    if src_len.shape != tgt_len.shape:
        raise ValueError("src_lengths and tgt_lengths differ in size")
    rng = np.random.default_rng([seed, epoch])
    order = np.lexsort((rng.random(len(src_len)), src_len, tgt_len))  # last key is primary
    cost = np.maximum(src_len, tgt_len)[order]  # (N,) padded width of each example, in batch order
    limit = max_sentences or len(order)
    batches, start, n_total = [], 0, len(order)
    while start < n_total:
        # at most batch_tokens // cost[start] examples fit, since the running max only grows
        window = cost[start : start + max(1, min(limit, batch_tokens // cost[start]))]
        width = np.maximum.accumulate(window)  # (w,) running max
        sizes = width * np.arange(1, len(window) + 1)  # cost of taking the first k, nondecreasing
        n = max(1, int(np.searchsorted(sizes, batch_tokens, side="right")))
        batches.append(order[start : start + n])
        start += n
    if shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def _round_up(lengths, multiple: int):
    """``lengths`` (an int or int array) rounded up to a multiple of ``multiple`` (1: unchanged)."""
    return lengths if multiple <= 1 else -(-lengths // multiple) * multiple


def direction_sample(first_tokens: np.ndarray, temperature: float, *, seed: int, epoch: int) -> np.ndarray:
    """The examples one epoch of a multilingual model trains on, its directions sampled by temperature.

    A direction is the examples whose first token is its language tag. Direction d, with n_d examples, gets
    N * p_d of the epoch's N, where p_d is proportional to n_d ** (1 / temperature) (1: as they come; 5: as
    M2M-100 and XLM-R sample): each of its examples that many whole times, the rest drawn without
    replacement. Same seed and epoch -> same sample.

    Args:
        first_tokens: (N,) each example's first token on the tagged side.
        temperature: T >= 1.
        seed: the run's seed.
        epoch: the epoch.

    Returns:
        (about N,) example indices, with repeats where a direction is sampled up.
    """
    rng = np.random.default_rng([seed, epoch, 1])
    groups = [np.flatnonzero(first_tokens == tag) for tag in np.unique(first_tokens)]
    sizes = np.array([len(g) for g in groups], dtype=np.float64)
    shares = sizes ** (1.0 / temperature)
    shares /= shares.sum()
    picked = []
    for group, share in zip(groups, shares):
        whole, rest = divmod(int(round(sizes.sum() * share)), len(group))
        picked += [group] * whole + [rng.choice(group, rest, replace=False)]
    return np.concatenate(picked)


def shard_batches(batches: Sequence, rank: int, world_size: int) -> list:
    """Rank r gets batches r, r + W, ... of the epoch: disjoint shards, together holding every example.

    Every rank must get the same number of batches (a rank that ran out would leave the others waiting in
    their next gradient all-reduce), so when len(batches) is not a multiple of W the batches with the most
    sentences are cut in two (in place, so the order stays the same on every rank) until it is.
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside world size {world_size}")
    batches = list(batches)
    sizes = [len(b) for b in batches]
    for _ in range(-len(batches) % world_size):
        i = int(np.argmax(sizes))
        if sizes[i] < 2:
            raise MtkitError(
                f"only {sum(sizes)} training sentences for {world_size} processes; use fewer processes or more data"
            )
        half = sizes[i] // 2
        batches[i : i + 1] = [batches[i][:half], batches[i][half:]]
        sizes[i : i + 1] = [half, sizes[i] - half]
    return batches[rank::world_size]


@dataclasses.dataclass
class Batch:
    src: torch.Tensor  # (B, S) int64: ids + [EOS], PAD-padded
    tgt_in: torch.Tensor  # (B, T) int64: [BOS] + ids, PAD-padded
    tgt_out: torch.Tensor  # (B, T) int64: ids + [EOS], PAD-padded
    src_tokens: int  # real (non-PAD) positions in src
    tgt_tokens: int  # real positions in tgt_out: the tokens the loss counts
    keep: Optional[torch.Tensor] = None  # (tgt_tokens,) int64 flat positions of tgt_out's real tokens (positions=True)
    target: Optional[torch.Tensor] = None  # (tgt_tokens,) int64: tgt_out at ``keep``, in the same order


def _padded_rows(
    tokens: np.ndarray, offsets: np.ndarray, indices: np.ndarray, *, bos: bool, multiple: int = 1
) -> tuple[np.ndarray, np.ndarray]:
    """Gather sentences into one PAD-filled (B, max_len + 1) int64 matrix without a per-sentence loop; its width
    rounded up to ``multiple``.

    bos=False: ids + [EOS]; bos=True: [BOS] + ids. Returns the matrix and the (B,) sentence lengths.
    """
    starts = offsets[indices]  # (B,)
    lengths = offsets[indices + 1] - starts  # (B,)
    batch, total = len(indices), int(lengths.sum())
    width = _round_up(int(lengths.max(initial=0)) + 1, multiple)
    out = np.full((batch, width), PAD, dtype=np.int64)  # (B, L + 1 rounded up)
    rows = np.repeat(np.arange(batch), lengths)  # (total,) row of each token
    cols = np.arange(total) - np.repeat(np.cumsum(lengths) - lengths, lengths)  # (total,) position in its row
    out[rows, cols + int(bos)] = tokens[np.repeat(starts, lengths) + cols]
    if bos:
        out[:, 0] = BOS
    else:
        out[np.arange(batch), lengths] = EOS
    return out, lengths


def collate(data: ParallelData, indices, device=None, *, multiple: int = 1, positions: bool = False) -> Batch:
    """Build the (B, S) / (B, T) int64 tensors of one batch.

    Args:
        data: the split.
        indices: the batch's example indices.
        device: where the tensors go (on CUDA: through pinned memory, without blocking); None: the CPU.
        multiple: pad both widths up to a multiple of this (the extra columns are PAD).
        positions: also give ``keep`` and ``target``, the flat positions of the real target tokens and their ids,
            worked out here on the host: the same rows as ``tgt_out[tgt_out != PAD]`` without a device-side
            boolean index, whose output size a GPU must report back to the host before it goes on.
    """
    indices = np.asarray(indices, dtype=np.int64)
    src, src_len = _padded_rows(*data.arrays("src"), indices, bos=False, multiple=multiple)
    tgt_in, tgt_len = _padded_rows(*data.arrays("tgt"), indices, bos=True, multiple=multiple)
    tgt_out, _ = _padded_rows(*data.arrays("tgt"), indices, bos=False, multiple=multiple)
    src_tokens, tgt_tokens = int(src_len.sum()) + len(indices), int(tgt_len.sum()) + len(indices)
    arrays = [src, tgt_in, tgt_out]
    if positions:
        keep = np.flatnonzero(tgt_out != PAD)  # (tgt_tokens,) row-major, as a boolean index orders them
        arrays += [keep, tgt_out.reshape(-1)[keep]]
    tensors = [torch.from_numpy(a) for a in arrays]
    if device is not None:
        device = torch.device(device)
        if device.type == "cuda":
            tensors = [t.pin_memory().to(device, non_blocking=True) for t in tensors]
        else:
            tensors = [t.to(device) for t in tensors]
    keep, target = tensors[3:] if positions else (None, None)
    return Batch(*tensors[:3], src_tokens=src_tokens, tgt_tokens=tgt_tokens, keep=keep, target=target)
