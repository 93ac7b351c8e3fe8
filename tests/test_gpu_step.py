"""The GPU's way of training (``step.StepPlan(gpu=True)``), run on the CPU: the same losses as the CPU's way, no
host read between log windows, batch widths in multiples of 8, target positions from the host, the next batches
collated ahead, TF32 for float32 on CUDA only.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from conftest import TINY_TRANSFORMER, write_toy_splits
from mtkit import config as cfgmod
from mtkit.data.batches import ParallelData, collate, make_batches
from mtkit.devices import float32_matmuls
from mtkit.errors import MtkitError
from mtkit.models import PAD
from mtkit.training import loop as trainmod
from mtkit.training import step as stepmod
from mtkit.training.console import Window, print_summary
from mtkit.training.loss import chunk_rows_for, fused_output_loss

GPU, CPU = stepmod.StepPlan(gpu=True), stepmod.StepPlan(gpu=False)


@pytest.fixture(scope="module")
def data_section(tmp_path_factory, one_thread) -> dict:
    from mtkit.data.prepare import prepare

    root = tmp_path_factory.mktemp("gpu-step")
    section = {"dir": str(root / "data"), "vocab_size": 100, "splits": write_toy_splits(root, (("train", 300, 0),))}
    prepare(cfgmod.from_dict({"data": section}).data)
    return section


def make_trainer(tmp_path: Path, data_section: dict, plan: stepmod.StepPlan, **training) -> trainmod.Trainer:
    cfg = cfgmod.from_dict(
        {
            "data": data_section,
            "model": {**TINY_TRANSFORMER, "dropout": 0.0},
            "training": {
                "run_dir": str(tmp_path / ("gpu" if plan.gpu else "cpu")),
                "devices": "cpu",
                "threads": 1,
                "batch_tokens": 300,
                "lr": 2e-3,
                "warmup_updates": 2,
                "clip_norm": 1.0,
                "valid_bleu": False,
                **training,
            },
        }
    )
    trainer = trainmod.Trainer(cfg)
    trainer.plan = plan
    return trainer


def test_gpu_plan_trains_as_the_cpu_plan(tmp_path, data_section):
    """Same example groups, same seed: the GPU plan's padded widths, host positions, device-side losses read
    once by settle() and large loss chunks give the CPU plan's losses and gradients within float tolerance."""
    cpu, gpu = (make_trainer(tmp_path, data_section, plan) for plan in (CPU, GPU))
    data = cpu.train_data
    groups = make_batches(data.src_lengths, data.tgt_lengths, 300, seed=1, epoch=1)[:6]
    assert any(collate(data, g).src.size(1) % 8 for g in groups)  # the GPU plan's padding does change shapes
    grads = {}
    for trainer in (cpu, gpu):  # the gradients each optimizer step sees
        real = trainer.optimizer.step
        seen = grads[trainer.plan.gpu] = []

        def step(*args, real=real, seen=seen, trainer=trainer, **kwargs):
            seen.append([p.grad.clone() for p in trainer.model.parameters()])
            return real(*args, **kwargs)

        trainer.optimizer.step = step
    window = Window()
    cpu_losses = []
    for g in groups:
        cpu_losses.append(stepmod.train_step(cpu, [g]).loss)
        cpu.state.update += 1
        step = stepmod.train_step(gpu, [g])
        assert isinstance(step.loss, torch.Tensor)  # not read back
        window.add(step, 1)
        gpu.state.update += 1
    pending = [float(loss) for _, loss, _ in window.pending]
    stepmod.settle(window, gpu)
    assert pending == pytest.approx(cpu_losses, rel=1e-5)
    assert window.loss == pytest.approx(math.fsum(cpu_losses), rel=1e-5) and not window.pending
    # the first update's gradients (later weights drift apart where Adam normalises gradients that are float
    # noise, such as the self-attention key biases', which the softmax cancels)
    for a, b in zip(grads[False][0], grads[True][0]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_gpu_chunks_equal_cpu_chunks():
    """The GPU's few large chunks and the CPU's 128-row chunks: the same loss and gradients."""
    torch.manual_seed(0)
    feats = torch.randn(300, 16, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    target = torch.randint(1, 50, (300,))
    assert chunk_rows_for(torch.device("cuda"), 50) >= 300 > chunk_rows_for(torch.device("cpu"), 50)
    results = []
    for rows in (chunk_rows_for(torch.device("cpu"), 50), chunk_rows_for(torch.device("cuda"), 50)):
        loss, nll = fused_output_loss(feats, weight, None, target, 0.1, rows)
        grads = torch.autograd.grad(loss, (feats, weight))
        results.append((loss.detach(), nll, *grads))
    for a, b in zip(*results):
        torch.testing.assert_close(a, b)


class HostReads(TorchDispatchMode):
    """Counts what would make the host wait for a GPU: a tensor's value read (``item``, ``bool``, ``tolist``,
    ``numpy``) and the ops whose output size depends on the data (boolean indexing, ``nonzero``)."""

    SIZED_BY_DATA = {"aten::nonzero", "aten::masked_select", "aten::unique_dim", "aten::_unique2"}

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        # a CPU tensor's own step counter (fused Adam) is a host value on a GPU too: only reads of real data count
        if name == "aten::_local_scalar_dense" and args[0].numel() == 1 and args[0].dtype != torch.float32:
            pass
        elif name == "aten::_local_scalar_dense" or name in self.SIZED_BY_DATA:
            self.count += 1
        elif name == "aten::index.Tensor" and any(i is not None and i.dtype == torch.bool for i in args[1]):
            self.count += 1
        return func(*args, **(kwargs or {}))


def test_no_host_read_between_log_windows(tmp_path, data_section, monkeypatch):
    """A run under the GPU plan reads the device at its log windows (and its last update) and nowhere else."""
    trainer = make_trainer(tmp_path, data_section, GPU, max_updates=12, log_every=4, validate_every=100)
    reads = HostReads()
    at_update: dict[int, int] = {}
    real_step, real_tolist, real_numpy = trainmod.train_step, torch.Tensor.tolist, torch.Tensor.numpy

    def train_step(tr, group, **kwargs):
        at_update[tr.state.update + 1] = reads.count
        return real_step(tr, group, **kwargs)

    def counted(real):
        def read(self, *args, **kwargs):
            reads.count += 1
            return real(self, *args, **kwargs)

        return read

    monkeypatch.setattr(trainmod, "train_step", train_step)
    monkeypatch.setattr(torch.Tensor, "tolist", counted(real_tolist))
    monkeypatch.setattr(torch.Tensor, "numpy", counted(real_numpy))
    with reads:
        trainer.run()
    at_update[13] = reads.count
    per_update = {u: at_update[u + 1] - at_update[u] for u in range(1, 13)}
    # the loss windows end at updates 4, 8 and 12: their reads (one settle, plus the checkpoint saved at 12)
    assert all(n == 0 for u, n in per_update.items() if u % 4), per_update
    assert all(n >= 1 for u, n in per_update.items() if u % 4 == 0), per_update
    assert per_update[4] == per_update[8] == 1, per_update


def test_cpu_plan_reads_every_update(tmp_path, data_section, monkeypatch):
    """The counter above sees the CPU plan's per-update reads: it can fail."""
    trainer = make_trainer(tmp_path, data_section, CPU, max_updates=3, log_every=4, validate_every=100)
    reads = HostReads()
    with reads:
        for g in trainer.epoch_batches()[:3]:
            before = reads.count
            stepmod.train_step(trainer, [g])
            trainer.state.update += 1
            assert reads.count - before >= 2  # the loss and the NLL, and the boolean index of the targets


def test_settle_names_the_first_non_finite_update(tmp_path, data_section):
    trainer = make_trainer(tmp_path, data_section, GPU)
    window = Window()
    for update, loss in ((1, 2.0), (2, float("nan")), (3, float("inf"))):
        step = stepmod.Step(update, torch.tensor(loss), torch.tensor(loss), 10.0, 10, 20, [], 1e-3)
        window.add(step, 1)
    with pytest.raises(MtkitError, match="loss became nan at update 2; stopped without saving"):
        stepmod.settle(window, trainer)


def test_window_refuses_a_record_with_losses_on_the_device():
    window = Window()
    window.add(stepmod.Step(1, torch.tensor(1.0), torch.tensor(1.0), 5.0, 5, 10, [], 1e-3), 1)
    with pytest.raises(RuntimeError, match="settle"):
        window.record(1, 1, 1e-3, 1.0)


def test_batches_padded_to_multiples_of_8(data_section):
    data = ParallelData(data_section["dir"], "train")
    batches = make_batches(data.src_lengths, data.tgt_lengths, 300, seed=1, epoch=1, multiple=8)
    assert sum(len(b) for b in batches) == len(data)
    widths, plain_widths = set(), set()
    for idx in batches:
        batch = collate(data, idx, multiple=8, positions=True)
        plain = collate(data, idx)
        assert batch.src.size(1) % 8 == 0 and batch.tgt_in.size(1) % 8 == 0
        assert len(idx) * max(batch.src.size(1), batch.tgt_in.size(1)) <= 300 or len(idx) == 1
        widths.add(batch.src.size(1))
        plain_widths.add(plain.src.size(1))
        # the padded tensors hold the plain ones, PAD beyond; the positions pick the same targets
        assert torch.equal(batch.src[:, : plain.src.size(1)], plain.src)
        assert bool((batch.src[:, plain.src.size(1) :] == PAD).all())
        assert torch.equal(batch.target, plain.tgt_out[plain.tgt_out.ne(PAD)])
        assert torch.equal(batch.tgt_out.flatten()[batch.keep], batch.target)
    assert len(widths) * 3 < len(plain_widths)  # few shapes
    # without a multiple the batches are the CPU's of before
    ones = make_batches(data.src_lengths, data.tgt_lengths, 300, seed=1, epoch=1, multiple=1)
    plain = make_batches(data.src_lengths, data.tgt_lengths, 300, seed=1, epoch=1)
    assert all(np.array_equal(a, b) for a, b in zip(ones, plain)) and len(ones) == len(plain)


def test_feed_collates_ahead_and_in_order(tmp_path, data_section):
    trainer = make_trainer(tmp_path, data_section, GPU)
    feed = trainer.feed
    batches = trainer.epoch_batches()
    feed.ahead(batches[1:3])
    assert len(feed.pending) == 2
    first = feed.take(batches[0])  # not asked for ahead: collated now
    second = feed.take(batches[1])
    assert not any(idx is batches[1] for idx, _ in feed.pending)
    for idx, batch in ((batches[0], first), (batches[1], second)):
        expected = collate(trainer.train_data, idx, multiple=8, positions=True)
        assert torch.equal(batch.src, expected.src) and torch.equal(batch.keep, expected.keep)
    feed.drop()
    assert feed.pending == []
    trainer.plan = CPU
    assert trainer.feed.pool is None  # the CPU plan collates in the loop


def test_tf32_only_on_cuda(tmp_path, data_section):
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    try:
        assert float32_matmuls(torch.device("cpu"), True) == "fp32"
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == before
        assert float32_matmuls(torch.device("cuda"), True) == "tf32"
        assert torch.backends.cuda.matmul.allow_tf32 and torch.backends.cudnn.allow_tf32
        assert float32_matmuls(torch.device("cuda"), False) == "fp32"
        assert not torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before
    assert make_trainer(tmp_path, data_section, GPU).t.tf32 is True  # the default


def test_summary_names_tf32(tmp_path, data_section, capsys):
    trainer = make_trainer(tmp_path, data_section, GPU)
    print_summary(trainer.cfg, trainer.model, trainer.manifest, trainer.dist, "tf32")
    assert "fp32 (TF32 matmuls)" in capsys.readouterr().out
    print_summary(trainer.cfg, trainer.model, trainer.manifest, trainer.dist, "fp32")
    assert "TF32" not in capsys.readouterr().out


@pytest.mark.parametrize("positions", ["sinusoidal", "learned", "relative", "rope", "alibi"])
def test_compile_sees_model_and_loss_as_one_graph(positions, one_thread):
    """training.compile compiles the teacher-forced model and its loss whole: no graph break (dropout on)."""
    from mtkit.config.schema import TransformerConfig
    from mtkit.models import build_model

    cfg = TransformerConfig(**{**TINY_TRANSFORMER, "dropout": 0.1, "positions": positions})
    net = stepmod.TeacherForcing(build_model(cfg, 100, 100, True)).train()
    src, tgt = torch.randint(4, 100, (8, 16)), torch.randint(4, 100, (8, 16))
    tgt[:, -3:] = PAD
    keep = torch.arange(tgt.numel()).view_as(tgt)[tgt.ne(PAD)]
    with torch.autocast("cpu", dtype=torch.bfloat16):
        explained = torch._dynamo.explain(net)(src, tgt, keep, tgt.flatten()[keep], 0.1)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0), explained.break_reasons
    torch._dynamo.reset()


def test_bench_gpu_smoke_runs_every_path(tmp_path):
    """scripts/bench_gpu.py --smoke on the CPU: a row per shape (mtkit beside the plain loop, FLOPs, profiled ops)
    and the decoding table (mtkit and transformers' generate of the export, beam 5 and greedy, two batch sizes)."""
    import re
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, str(root / "scripts/bench_gpu.py"), "--smoke", "--work", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**__import__("os").environ, "OMP_NUM_THREADS": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0].startswith("bench_gpu ") and "(smoke)" in lines[0]
    assert re.fullmatch(r"matmul: \d+\.\d TFLOP/s \(float32\)", lines[1])
    rows = {line.split()[0]: line.split() for line in lines if line.split()[0] in ("small", "base", "big")}
    assert list(rows) == ["small", "base", "big"] and rows["base"][1] == "bf16"
    for cells in rows.values():
        upd_s, tok_s, gflop, launches, plain = (float(cells[i].replace(",", "")) for i in (3, 4, 5, 9, 10))
        assert upd_s > 0 and tok_s > 0 and gflop > 0 and launches > 100 and plain > 0
        assert cells[8] == "n/a" and cells[11].endswith("x")
    decoded = [line.split() for line in lines if line.startswith(("mtkit ", "transformers "))]
    assert {(d[0], d[1] if d[1] == "greedy" else d[1] + d[2]) for d in decoded} == {
        (e, s) for e in ("mtkit", "transformers") for s in ("beam5", "greedy")
    }
    assert len(decoded) == 8
    assert sum(line.endswith("transformers' generate at its best batch") for line in lines) == 2
