"""DDP training on the CPU: gloo processes started by torchrun (or given its environment), driven through the real
`mtkit train` CLI.

- two processes, each with half of every update's batches, give the weights of one process that accumulates
  both halves (Transformer and a Luong RNN), and metrics.jsonl logs the global (effective) batch
- rank shards are disjoint, together hold every example of the epoch, and give every rank the same count
- resume under two processes continues from the saved update and matches the uninterrupted run
- a rank that raises makes the run exit non-zero within a bounded time; the other rank says why

Every process runs with OMP_NUM_THREADS=1 so that two ranks fit on a two-core CI machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from conftest import TINY_TRANSFORMER, free_port, without_curves
from mtkit import checkpoint as ckpt
from mtkit import config as cfgmod
from mtkit.data.batches import ParallelData, make_batches, shard_batches
from mtkit.data.prepare import prepare
from mtkit.errors import MtkitError

pytestmark = pytest.mark.slow  # processes, training runs, benchmark scripts

TIMEOUT = 120  # seconds; a hang fails the test instead of stalling CI
SEED = 1  # training.seed; the trainer's first epoch is epoch 1

TRANSFORMER = dict(TINY_TRANSFORMER)
LUONG = {"arch": "luong", "embed_dim": 32, "hidden_size": 32, "layers": 1, "dropout": 0.0}


# ------------------------------------------------------------------------------------------ helpers
def env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def run(args: list, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    """Run a command to completion (stdout and stderr merged into .stdout)."""
    return subprocess.run(
        [str(a) for a in args], env=env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout
    )


def train_here(*args) -> None:
    """`mtkit train ARGS` in this process, on one thread: the one-process reference runs (no torch start-up)."""
    from mtkit.cli import main

    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}  # the trainer installs its own
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        code = main(["train", *map(str, args)])
    finally:
        torch.set_num_threads(threads)
        for s, handler in handlers.items():
            signal.signal(s, handler)
    assert code == 0


def mtkit(*args) -> list:
    return [sys.executable, "-m", "mtkit", *args]


def torchrun(*args, nproc: int = 2) -> list:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", *args]


def ranks(*args, nproc: int = 2, timeout: float = TIMEOUT) -> subprocess.CompletedProcess:
    """``python ARGS`` as ``nproc`` processes given the environment torchrun gives its workers (RANK, WORLD_SIZE,
    LOCAL_RANK, MASTER_ADDR, MASTER_PORT), without torchrun's own process (seconds of start-up): for the tests of
    what the ranks compute; the launch itself is tested with torchrun. The return code is the first non-zero one
    (or 0); stdout holds every rank's output and stderr, rank by rank."""
    common = {**env(), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()), "WORLD_SIZE": str(nproc)}
    common["LOCAL_WORLD_SIZE"] = str(nproc)
    logs = [tempfile.TemporaryFile("w+", encoding="utf-8") for _ in range(nproc)]  # no pipe to fill and block on
    procs = [
        subprocess.Popen(
            [sys.executable, *map(str, args)],
            env={**common, "RANK": str(rank), "LOCAL_RANK": str(rank)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        for rank, log in enumerate(logs)
    ]
    try:
        for proc in procs:
            proc.wait(timeout=timeout)
    finally:
        for proc in procs:
            proc.kill()
    outs = []
    for log in logs:
        log.seek(0)
        outs.append(log.read())
        log.close()
    code = next((proc.returncode for proc in procs if proc.returncode), 0)
    return subprocess.CompletedProcess(args, code, "".join(outs))


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stdout[-4000:]
    return result.stdout


def weights(run_dir: Path, update: int) -> dict[str, torch.Tensor]:
    return ckpt.load(run_dir / "checkpoints" / f"ckpt_{update:07d}.safetensors").model


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.allclose(a[name], b[name], rtol=0, atol=1e-5), (name, (a[name] - b[name]).abs().max().item())


def train_records(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == "train"]


# ------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """A prepared toy data dir, and a config writer whose batch budget gives an even batch count in epoch 1,
    so that the two ranks' shards are exactly the batches a single process sees (no batch is cut in two)."""
    from conftest import toy_pairs, write_lines

    root = tmp_path_factory.mktemp("ddp")
    splits = {}
    for split, n, seed in (("train", 300, 0), ("valid", 20, 1)):
        pairs = toy_pairs(n, seed)
        splits[split] = {
            "src": str(write_lines(root / f"{split}.en", [s for s, _ in pairs])),
            "tgt": str(write_lines(root / f"{split}.de", [t for _, t in pairs])),
        }
    data = {"dir": str(root / "data"), "vocab_size": 100, "splits": splits}
    prepare(cfgmod.from_dict({"data": data}).data)
    train = ParallelData(root / "data", "train")
    counts = {
        b: len(make_batches(train.src_lengths, train.tgt_lengths, b, seed=SEED, epoch=1)) for b in range(200, 400, 10)
    }
    budget = next(b for b, n in counts.items() if n % 2 == 0 and n >= 16)  # 4 updates x 4 batches in epoch 1

    def config(model: dict, name: str) -> Path:
        tree = {
            "data": data,
            "model": model,
            "training": {
                "run_dir": str(root / f"{name}-run"),
                "seed": SEED,
                "devices": "cpu",
                "batch_tokens": budget,
                "update_freq": 2,  # two ranks x 2 batches per update: accumulation under no_sync
                "max_updates": 4,
                "lr": 1e-3,
                "schedule": "constant",
                "warmup_updates": 0,
                "eps": 1e-3,  # Adam is blind to a constant gradient scale; a large eps makes a wrong scale visible
                "log_every": 1,
                "validate_every": 2,
                "valid_bleu": False,
                "best_metric": "loss",
                "keep_last": 10,
            },
        }
        path = root / f"{name}.yaml"
        path.write_text(yaml.safe_dump(without_curves(tree), sort_keys=False), encoding="utf-8")
        return path

    return config


@pytest.fixture(scope="module")
def transformer_runs(toy):
    """One process (update_freq 4, 4 updates) vs two ranks (update_freq 2, 2 updates), then the two-process run
    resumed by `mtkit train --gpus 2` (torchrun) up to update 4. Rank r gets batches r, r + 2, ..., so update k of
    the two ranks covers the same four batches as update k of the one process."""
    cfg = toy(TRANSFORMER, "transformer")
    root = cfg.parent
    single, double = root / "single", root / "double"
    train_here(cfg, "--set", "training.update_freq=4", "--set", f"training.run_dir={single}")
    first = ok(
        ranks("-m", "mtkit", "train", cfg, "--set", "training.max_updates=2", "--set", f"training.run_dir={double}")
    )
    first_ckpts = sorted(p.name for p in (double / "checkpoints").glob("ckpt_*"))
    first_weights = weights(double, 2)
    resumed = ok(run(mtkit("train", "--gpus", "2", "--resume", double, "--set", "training.max_updates=4")))
    return {
        "single": single,
        "double": double,
        "first": first,
        "first_ckpts": first_ckpts,
        "first_weights": first_weights,
        "resumed": resumed,
    }


# ------------------------------------------------------------------------------------------ shards
@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_shards_are_disjoint_equal_and_cover_the_epoch(world_size):
    rng = np.random.default_rng(9)
    src, tgt = rng.integers(0, 60, 2000), rng.integers(0, 60, 2000)
    uneven = 0
    for budget in (300, 310, 320, 330, 340):
        batches = make_batches(src, tgt, budget, seed=1, epoch=1)
        uneven += len(batches) % world_size != 0
        shards = [shard_batches(batches, rank, world_size) for rank in range(world_size)]
        assert len({len(s) for s in shards}) == 1  # the same number of steps on every rank
        assert len(shards[0]) == -(-len(batches) // world_size)  # nothing dropped: ceil(len / W) each
        seen = np.concatenate([np.concatenate(s) for s in shards])
        assert len(seen) == len(set(seen.tolist())) == len(src)  # disjoint, and every example of the epoch
        again = [shard_batches(batches, rank, world_size) for rank in range(world_size)]
        assert all(np.array_equal(x, y) for s, t in zip(shards, again) for x, y in zip(s, t))  # same on every rank
    assert world_size == 1 or uneven  # the cut-in-two path ran


def test_shards_keep_batch_order_when_the_count_divides():
    batches = [np.arange(i * 3, i * 3 + 3) for i in range(6)]
    assert [b.tolist() for b in shard_batches(batches, 1, 2)] == [b.tolist() for b in batches[1::2]]


def test_too_few_sentences_for_the_world():
    assert [b.tolist() for b in shard_batches([np.arange(3)], 1, 2)] == [[1, 2]]  # one batch cut in two
    with pytest.raises(MtkitError, match="only 1 training sentences for 2 processes"):
        shard_batches([np.arange(1)], 0, 2)
    with pytest.raises(ValueError):
        shard_batches([np.arange(3)], 2, 2)


# ------------------------------------------------------------------------------------------ training
def test_gpus_flag_launches_gloo_processes_on_the_cpu(transformer_runs):
    assert "cpu x2" in transformer_runs["first"] and "cpu x2" in transformer_runs["resumed"]  # device x world size
    for update in (2, 4):
        meta = ckpt.read_metadata(transformer_runs["double"] / "checkpoints" / f"ckpt_{update:07d}.safetensors")
        assert meta["world_size"] == 2


def test_two_processes_match_one_transformer(transformer_runs):
    single, double = transformer_runs["single"], transformer_runs["double"]
    assert_same_weights(transformer_runs["first_weights"], weights(single, 2))
    one, two = train_records(single)[:2], train_records(double)[:2]
    for a, b in zip(one, two):
        assert a["update"] == b["update"]
        assert b["batch_tokens"] == a["batch_tokens"]  # the global batch of both ranks, not one rank's half
        assert b["loss"] == pytest.approx(a["loss"], abs=1e-5)


def test_resume_under_two_processes_continues_from_the_saved_update(transformer_runs):
    single, double = transformer_runs["single"], transformer_runs["double"]
    assert transformer_runs["first_ckpts"] == ["ckpt_0000002.safetensors"]
    assert "resumed from ckpt_0000002.safetensors: update 2" in transformer_runs["resumed"]
    assert [r["update"] for r in train_records(double)] == [1, 2, 3, 4]  # no update repeated or skipped
    assert_same_weights(weights(double, 4), weights(single, 4))  # = the uninterrupted single process


def test_two_processes_match_one_rnn(toy):
    cfg = toy(LUONG, "luong")
    single, double = cfg.parent / "luong-single", cfg.parent / "luong-double"
    common = ["--set", "training.max_updates=2"]
    train_here(cfg, *common, "--set", "training.update_freq=4", "--set", f"training.run_dir={single}")
    ok(ranks("-m", "mtkit", "train", cfg, *common, "--set", f"training.run_dir={double}"))
    assert_same_weights(weights(double, 2), weights(single, 2))
    assert [r["batch_tokens"] for r in train_records(double)] == [r["batch_tokens"] for r in train_records(single)]


def test_two_processes_match_one_with_lora_frozen_embeddings_and_alibi_positions(toy):
    """training.lora on a base run with ALiBi positions, embeddings frozen: DDP over the adapters alone (the frozen
    base has no gradient) gives the adapters of one process, through a position scheme of no parameters."""
    pytest.importorskip("peft")
    base_cfg = toy({**TRANSFORMER, "positions": "alibi"}, "lora-base")
    base = base_cfg.parent / "lora-base"
    train_here(base_cfg, "--set", "training.max_updates=2", "--set", f"training.run_dir={base}")
    cfg = toy({"init_from": str(base)}, "lora")
    tree = yaml.safe_load(cfg.read_text(encoding="utf-8"))
    tree["training"].update(lora={"rank": 4}, freeze_embeddings=True)  # no dropout: the ranks draw their own
    cfg.write_text(yaml.safe_dump(without_curves(tree), sort_keys=False), encoding="utf-8")
    single, double = cfg.parent / "lora-single", cfg.parent / "lora-double"
    common = ["--set", "training.max_updates=2"]
    train_here(cfg, *common, "--set", "training.update_freq=4", "--set", f"training.run_dir={single}")
    ok(ranks("-m", "mtkit", "train", cfg, *common, "--set", f"training.run_dir={double}"))
    adapters = weights(single, 2)
    assert adapters and all(".lora_" in name for name in adapters)
    assert any(t.abs().max() > 0 for name, t in adapters.items() if ".lora_B." in name)  # they trained
    assert_same_weights(weights(double, 2), adapters)


# A worker that is `python -m mtkit` except that rank 1's third batch raises, as a crashing rank would.
FAILING_WORKER = textwrap.dedent("""
    import os, sys
    import mtkit.data.batches

    if os.environ["RANK"] == "1":
        real, calls = mtkit.data.batches.collate, []

        def collate(*args, **kwargs):
            calls.append(1)
            if len(calls) == 3:
                raise RuntimeError("injected failure on rank 1")
            return real(*args, **kwargs)

        mtkit.data.batches.collate = collate
    from mtkit.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def test_a_failing_rank_stops_the_run_in_bounded_time(toy):
    cfg = toy(TRANSFORMER, "failing")
    worker = cfg.parent / "failing_worker.py"
    worker.write_text(FAILING_WORKER)
    # the collectives' own timeout is 30 minutes: a run still waiting after 5 has missed the failure
    result = run(torchrun(worker, "train", cfg, "--set", "training.max_updates=50"), timeout=300)
    assert result.returncode != 0
    assert "injected failure on rank 1" in result.stdout
    # rank 0 was waiting for rank 1 in a gradient all-reduce: it stops by itself, with one readable line
    assert "mtkit: error: rank 0: another process of this run failed" in result.stdout, result.stdout[-4000:]
    assert not (cfg.parent / "failing-run" / "checkpoints" / "ckpt_0000003.safetensors").exists()


# A worker that is `python -m mtkit` except that rank 1 does not see the newest checkpoint, as a rank whose run dir
# is a stale copy on another machine would not.
STALE_COPY_WORKER = textwrap.dedent("""
    import os, sys
    import mtkit.checkpoint.store as store

    if os.environ["RANK"] == "1":  # the store's own listing, which finding the latest checkpoint reads
        real = store.list_checkpoints
        store.list_checkpoints = lambda folder: real(folder)[:-1]
    from mtkit.cli import main
    sys.exit(main(sys.argv[1:]))
""")


def test_ranks_that_resume_from_different_updates_are_refused(toy):
    cfg = toy(TRANSFORMER, "stale")
    run_dir = cfg.parent / "stale-run"
    train_here(cfg)  # one process, checkpoints at updates 2 and 4
    assert sorted(ckpt.list_checkpoints(run_dir / "checkpoints"))[-1][0] == 4
    worker = cfg.parent / "stale_worker.py"
    worker.write_text(STALE_COPY_WORKER)
    result = ranks(worker, "train", "--resume", run_dir, "--set", "training.max_updates=6")
    assert result.returncode != 0
    assert "the 2 processes found different latest checkpoints" in result.stdout, result.stdout[-4000:]
    assert "training.run_dir must be one shared directory" in result.stdout
    assert [u for u, _ in ckpt.list_checkpoints(run_dir / "checkpoints")] == [2, 4]  # nothing trained or saved


def test_a_cuda_device_keeps_attention_off_cudnn(monkeypatch):
    """cuDNN's SDPA backend builds a graph per new shape (0.15-0.6 s each on an H100, where PyTorch prefers it for
    bf16/fp16): choosing a CUDA device turns it off, choosing the CPU leaves the setting alone."""
    from mtkit.devices import pick_device

    if not hasattr(torch.backends.cuda, "enable_cudnn_sdp"):
        pytest.skip("this torch has no cuDNN attention backend")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    before = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        torch.backends.cuda.enable_cudnn_sdp(True)
        assert pick_device("cpu") == torch.device("cpu")
        assert torch.backends.cuda.cudnn_sdp_enabled()
        assert pick_device("cuda", local_rank=3) == torch.device("cuda", 0)
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)
