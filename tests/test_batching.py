"""Token-budget batches and the collate layout (BOS / EOS / PAD positions); rank shards: test_distributed.py."""

from __future__ import annotations

import numpy as np
import pytest

from mtkit import config as cfgmod
from mtkit.data.batches import ParallelData, collate, make_batches
from mtkit.data.prepare import prepare
from mtkit.errors import MtkitError
from mtkit.tokenizer import BOS, EOS, PAD


def random_lengths(n=2000, seed=0, high=60):
    rng = np.random.default_rng(seed)
    return rng.integers(0, high, n), rng.integers(0, high, n)


def cost(batch, src, tgt):
    """n * max(padded src, padded tgt): the quantity batch_tokens bounds."""
    return len(batch) * max(int(src[batch].max()) + 1, int(tgt[batch].max()) + 1)


def test_batches_are_deterministic_per_seed_and_epoch():
    src, tgt = random_lengths()
    a = make_batches(src, tgt, 500, seed=3, epoch=1)
    b = make_batches(src, tgt, 500, seed=3, epoch=1)
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
    other_epoch = make_batches(src, tgt, 500, seed=3, epoch=2)
    other_seed = make_batches(src, tgt, 500, seed=4, epoch=1)
    for other in (other_epoch, other_seed):
        assert not (len(other) == len(a) and all(np.array_equal(x, y) for x, y in zip(a, other)))


@pytest.mark.parametrize("budget", [64, 500, 4096])
def test_every_index_once_and_budget_respected(budget):
    src, tgt = random_lengths(seed=budget)
    src[5], tgt[7] = 200, 300  # longer than the smallest budget on their own
    for epoch in range(3):
        batches = make_batches(src, tgt, budget, seed=0, epoch=epoch)
        flat = np.concatenate(batches)
        assert flat.dtype.kind == "i"
        assert np.array_equal(np.sort(flat), np.arange(len(src)))  # each exactly once
        for batch in batches:
            if cost(batch, src, tgt) > budget:  # only an example over budget on its own, alone
                assert len(batch) == 1 and max(src[batch[0]], tgt[batch[0]]) + 1 > budget


def test_batches_are_length_sorted_and_greedy():
    src, tgt = random_lengths(seed=5)
    batches = make_batches(src, tgt, 800, seed=0, epoch=0, shuffle=False)
    flat = np.concatenate(batches)
    keys = tgt[flat] * 1000 + src[flat]
    assert (np.diff(keys) >= 0).all()  # sorted by (target, source) length
    for batch, following in zip(batches, batches[1:]):  # greedy: the next example would not have fit
        assert cost(np.append(batch, following[0]), src, tgt) > 800
    shuffled = make_batches(src, tgt, 800, seed=0, epoch=0)
    assert sorted(map(tuple, shuffled)) == sorted(map(tuple, batches))  # same batches, another order
    assert [tuple(b) for b in shuffled] != [tuple(b) for b in batches]


def test_max_sentences():
    src, tgt = np.ones(100, int), np.ones(100, int)
    batches = make_batches(src, tgt, 10_000, seed=0, epoch=0, max_sentences=16)
    assert [len(b) for b in sorted(batches, key=len, reverse=True)] == [16] * 6 + [4]


# ----------------------------------------------------------------------------------------- collate
@pytest.fixture(scope="module")
def toy_dir(tmp_path_factory):
    from conftest import toy_pairs, write_lines

    root = tmp_path_factory.mktemp("batching")
    pairs = toy_pairs(300, seed=11)
    write_lines(root / "train.en", [s for s, _ in pairs])
    write_lines(root / "train.de", [t for _, t in pairs])
    write_lines(root / "valid.en", ["A dog .", "", "Two big red balls and a small cat sit on the bike ."])
    write_lines(root / "valid.de", ["Ein Hund .", "", "Zwei groß rot Ball und ein klein Katze sitzt auf der Fahrrad ."])
    cfg = cfgmod.from_dict(
        {
            "data": {
                "dir": str(root / "data"),
                "vocab_size": 100,
                "splits": {
                    "train": {"src": str(root / "train.en"), "tgt": str(root / "train.de")},
                    "valid": {"src": str(root / "valid.en"), "tgt": str(root / "valid.de")},
                },
            }
        }
    )
    prepare(cfg.data)
    return root / "data"


def test_parallel_data_is_memory_mapped(toy_dir):
    data = ParallelData(toy_dir, "train")
    assert len(data) == len(data.src_lengths) == len(data.tgt_lengths) == 300
    view = data.src(4)
    assert isinstance(view.base, np.memmap) or isinstance(view, np.memmap)
    assert len(view) == data.src_lengths[4] and view.dtype == np.uint16
    with pytest.raises(MtkitError, match="no split 'test'"):
        ParallelData(toy_dir, "test")


def test_collate_layout(toy_dir):
    torch = pytest.importorskip("torch")
    data = ParallelData(toy_dir, "valid")
    indices = np.array([2, 1, 0])
    batch = collate(data, indices)
    lengths = [len(data.src(i)) for i in indices]
    tgt_lengths = [len(data.tgt(i)) for i in indices]
    assert batch.src.dtype == batch.tgt_in.dtype == batch.tgt_out.dtype == torch.int64
    assert batch.src.shape == (3, max(lengths) + 1)
    assert batch.tgt_in.shape == batch.tgt_out.shape == (3, max(tgt_lengths) + 1)
    for row, i in enumerate(indices):
        src, tgt = data.src(i).astype(np.int64), data.tgt(i).astype(np.int64)
        n, m = len(src), len(tgt)
        assert batch.src[row, :n].tolist() == src.tolist() and batch.src[row, n] == EOS
        assert (batch.src[row, n + 1 :] == PAD).all()
        assert batch.tgt_in[row, 0] == BOS and batch.tgt_in[row, 1 : m + 1].tolist() == tgt.tolist()
        assert batch.tgt_out[row, :m].tolist() == tgt.tolist() and batch.tgt_out[row, m] == EOS
        assert (batch.tgt_in[row, m + 1 :] == PAD).all() and (batch.tgt_out[row, m + 1 :] == PAD).all()
    # the empty valid line becomes src [EOS], tgt_in [BOS], tgt_out [EOS]
    assert batch.src[1, 0] == EOS and batch.tgt_in[1, 0] == BOS and batch.tgt_out[1, 0] == EOS
    assert batch.src_tokens == int((batch.src != PAD).sum()) == sum(lengths) + 3
    assert batch.tgt_tokens == int((batch.tgt_out != PAD).sum()) == sum(tgt_lengths) + 3
    assert batch.src.size(0) == batch.tgt_in.size(0) == batch.tgt_out.size(0) == 3


def test_collate_every_batch_within_budget(toy_dir):
    pytest.importorskip("torch")
    data = ParallelData(toy_dir, "train")
    budget = 256
    for indices in make_batches(data.src_lengths, data.tgt_lengths, budget, seed=0, epoch=0):
        batch = collate(data, indices)
        width = max(batch.src.shape[1], batch.tgt_in.shape[1])
        rows = batch.src.size(0)
        assert rows * width <= budget or rows == 1
