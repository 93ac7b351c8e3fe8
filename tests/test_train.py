"""`mtkit train`: the pure pieces (LR schedule, label-smoothed loss), tiny end-to-end runs, exact resume, and
the faults: kill -9, SIGINT/SIGTERM, a second trainer, NaN, out of memory, a full disk, damaged or foreign
checkpoints, a changed config. Everything runs on the CPU with one thread and a model of ~25k parameters.
"""

from __future__ import annotations

import builtins
import errno
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml

from conftest import TINY_TRANSFORMER, assert_one_line_error, cli, prepared_toy_data
from mtkit import checkpoint as ckpt
from mtkit import config as cfgmod
from mtkit import files
from mtkit.models import PAD
from mtkit.training import loop as trainmod
from mtkit.training import step as stepmod
from mtkit.training.loss import fused_output_loss, label_smoothed_loss
from mtkit.training.optim import learning_rate

TRANSFORMER = {**TINY_TRANSFORMER, "dropout": 0.1}
LUONG = {"arch": "luong", "embed_dim": 16, "hidden_size": 32, "layers": 1, "dropout": 0.1}
BAHDANAU = {"arch": "bahdanau", "embed_dim": 16, "hidden_size": 32, "dropout": 0.1}
TRAINING = {
    "devices": "cpu",
    "threads": 1,
    "batch_tokens": 600,
    "lr": 2e-3,
    "warmup_updates": 4,
    "log_every": 1,
    "validate_every": 4,
    "valid_bleu": True,
    "valid_max_sentences": 10,
    "keep_last": 3,
    "keep_best": 1,
    "curves": False,  # but trained_run's, which draws RUN/curves.png as a run does by default
}
DECODING = {"max_len_a": 1.0, "max_len_b": 4}  # an untrained model decodes to the length limit: keep it short
SUBPROCESS_ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")


# ------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module", autouse=True)
def _restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def data_section(tmp_path_factory) -> dict:
    """The toy corpus of conftest, prepared once for this module (vocabulary 100, joint)."""
    return prepared_toy_data(tmp_path_factory.mktemp("toy"))


@pytest.fixture(scope="module")
def sampled_section(data_section, tmp_path_factory) -> dict:
    """The same corpus with BPE-dropout copies of train (3 samplings)."""
    from mtkit.data.prepare import prepare

    section = {
        **data_section,
        "dir": str(tmp_path_factory.mktemp("toy-sampled") / "data"),
        "src_subword_alpha": 0.2,
        "tgt_subword_alpha": 0.2,
        "subword_samples": 3,
    }
    prepare(cfgmod.from_dict({"data": section}).data)
    return section


def make_config(folder: Path, data_section: dict, name: str = "run", model: dict = TRANSFORMER, **training) -> Path:
    """Write folder/NAME.yaml for a run in folder/NAME; ``training`` overrides TRAINING."""
    tree = {
        "data": data_section,
        "model": model,
        "training": {**TRAINING, "run_dir": str(folder / name), **training},
        "decoding": DECODING,
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(tree, sort_keys=False), encoding="utf-8")
    return path


def checkpoints(run: Path) -> dict[int, Path]:
    return dict(ckpt.list_checkpoints(run / "checkpoints"))


def metrics(run: Path, kind: str) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def assert_same_state(a: Path, b: Path) -> None:
    """Two checkpoints hold bit-identical weights, optimizer moments and RNG states, and the same position."""
    x, y = ckpt.load(a, with_train=True), ckpt.load(b, with_train=True)
    assert sorted(x.model) == sorted(y.model) and sorted(x.train) == sorted(y.train)
    for k in x.model:
        assert torch.equal(x.model[k], y.model[k]), f"weights differ: {k}"
    for k in x.train:
        assert torch.equal(x.train[k], y.train[k]), f"training state differs: {k}"
    for k in ("update", "epoch", "position"):
        assert x.metadata[k] == y.metadata[k], k


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory, data_section) -> Path:
    """A tiny Transformer trained for 8 updates: checkpoints every 2, validation (loss, BLEU) every 4, the curves
    drawn at the end (training.curves' default)."""
    folder = tmp_path_factory.mktemp("trained")
    config = make_config(folder, data_section, save_every=2, keep_last=2, best_metric="loss", max_updates=8)
    tree = yaml.safe_load(config.read_text(encoding="utf-8"))
    del tree["training"]["curves"]
    config.write_text(yaml.safe_dump(tree, sort_keys=False), encoding="utf-8")
    assert cli("train", config) == 0
    return folder / "run"


@pytest.fixture
def run_copy(trained_run, tmp_path) -> Path:
    """A private copy of the trained run, with its config pointing at the copy, to damage or continue."""
    run = tmp_path / "run"
    shutil.copytree(trained_run, run)
    tree = yaml.safe_load((run / "config.yaml").read_text())
    tree["training"]["run_dir"] = str(run)
    (run / "config.yaml").write_text(yaml.safe_dump(tree, sort_keys=False))
    return run


# ------------------------------------------------------------------------------- learning rate
def schedule(**kw) -> cfgmod.TrainingConfig:
    return cfgmod.TrainingConfig(run_dir="unused", **kw)


@pytest.mark.parametrize(
    "update, expected",
    [
        (1, 1e-3 * 1 / 100),
        (50, 1e-3 * 50 / 100),
        (100, 1e-3),
        (400, 1e-3 * math.sqrt(100 / 400)),
        (10_000, 1e-3 * math.sqrt(100 / 10_000)),
    ],
)
def test_inverse_sqrt_schedule(update, expected):
    t = schedule(schedule="inverse_sqrt", lr=1e-3, warmup_updates=100)
    assert learning_rate(update, t, d_model=512) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("update", [1, 100, 3999, 4000, 4001, 16_000, 100_000])
def test_noam_schedule(update):
    t = schedule(schedule="noam", lr=2.0, warmup_updates=4000)
    expected = 2.0 * 512**-0.5 * min(update**-0.5, update * 4000**-1.5)
    assert learning_rate(update, t, d_model=512) == pytest.approx(expected, rel=1e-12)
    if update == 4000:  # the peak: both branches meet
        assert expected == pytest.approx(2.0 / math.sqrt(512 * 4000), rel=1e-12)


@pytest.mark.parametrize(
    "update, expected",
    [
        (5, 1e-3 * 5 / 10),
        (10, 1e-3),
        (60, 1e-5 + 0.5 * (1e-3 - 1e-5)),
        (35, 1e-5 + 0.5 * (1e-3 - 1e-5) * (1 + math.cos(math.pi * 0.25))),
        (110, 1e-5),
        (500, 1e-5),
    ],
)
def test_cosine_schedule(update, expected):
    t = schedule(schedule="cosine", lr=1e-3, min_lr=1e-5, warmup_updates=10, max_updates=110)
    assert learning_rate(update, t, d_model=512) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("update, expected", [(1, 3e-4 / 10), (5, 3e-4 * 5 / 10), (10, 3e-4), (12_345, 3e-4)])
def test_constant_schedule(update, expected):
    t = schedule(schedule="constant", lr=3e-4, warmup_updates=10)
    assert learning_rate(update, t, d_model=512) == pytest.approx(expected, rel=1e-12)


def test_cosine_without_max_updates_is_refused(tmp_path, data_section, run_cli):
    config = make_config(tmp_path, data_section, schedule="cosine", max_minutes=1)
    assert_one_line_error(run_cli("train", config), "training.max_updates", "cosine")


@pytest.mark.parametrize(
    "decay_over, update, minutes, progress",
    [
        ("updates", 60, 9.0, 0.5),  # the clock is ignored
        ("minutes", 60, 1.0, 0.25),  # a quarter of max_minutes: whatever the update
        ("minutes", 1000, 8.0, 1.0),
        ("both", 60, 1.0, 0.5),  # updates ahead
        ("both", 20, 3.0, 0.75),  # the clock ahead: a slow machine
    ],
)
def test_cosine_decays_over_updates_minutes_or_whichever_runs_out_first(decay_over, update, minutes, progress):
    t = schedule(schedule="cosine", lr=1e-3, min_lr=1e-5, warmup_updates=10, max_updates=110, max_minutes=4)
    t = t.model_copy(update={"decay_over": decay_over})
    expected = 1e-5 + 0.5 * (1e-3 - 1e-5) * (1 + math.cos(math.pi * progress))
    assert learning_rate(update, t, d_model=512, elapsed=60 * minutes) == pytest.approx(expected, rel=1e-12)
    assert learning_rate(5, t, d_model=512, elapsed=60 * minutes) == pytest.approx(1e-3 * 5 / 10)  # warmup first


@pytest.mark.parametrize(
    "training, needles",
    [
        ({"schedule": "cosine", "decay_over": "minutes", "max_updates": 10}, ("training.max_minutes", "decay_over")),
        ({"schedule": "cosine", "decay_over": "both", "max_minutes": 1}, ("training.max_updates", "decay_over both")),
        ({"schedule": "inverse_sqrt", "decay_over": "minutes", "max_minutes": 1}, ("decay_over", "cosine only")),
    ],
)
def test_decay_over_needs_its_budgets_and_the_cosine_schedule(tmp_path, data_section, run_cli, training, needles):
    config = make_config(tmp_path, data_section, **training)
    assert_one_line_error(run_cli("train", config), *needles)
    assert not (tmp_path / "run").exists()


def test_a_run_that_decays_over_minutes_stops_on_time_at_min_lr(tmp_path, data_section, run_cli):
    config = make_config(
        tmp_path,
        data_section,
        schedule="cosine",
        decay_over="both",
        lr=1e-3,
        min_lr=1e-5,
        warmup_updates=2,
        max_updates=1_000_000,  # never reached: the clock ends the run
        max_minutes=0.02,
        log_every=1,
        validate_every=1_000_000,
    )
    assert run_cli("train", config).code == 0
    lrs = [r["lr"] for r in metrics(tmp_path / "run", "train")]
    assert len(lrs) > 3 and lrs[-1] == pytest.approx(1e-5, rel=1e-9)  # the last update: 100% of the time spent
    after_warmup = lrs[2:]
    assert all(a >= b for a, b in zip(after_warmup, after_warmup[1:]))  # falling with the clock


# ---------------------------------------------------------------------------- label-smoothed loss
def hand_loss(rows: list[list[float]], targets: list[int], eps: float) -> tuple[float, float]:
    """(1 - eps) * -log p(y) + eps * mean_v(-log p(v)), summed over rows, with plain log and exp."""
    loss = nll = 0.0
    for row, y in zip(rows, targets):
        log_z = math.log(sum(math.exp(v) for v in row))
        log_p = [v - log_z for v in row]
        loss += (1 - eps) * -log_p[y] + eps * sum(-lp for lp in log_p) / len(row)
        nll += -log_p[y]
    return loss, nll


ROWS = [[2.0, -1.0, 0.5, 0.0], [0.1, 0.2, 3.0, -2.0], [-0.5, 1.5, 1.5, 0.25]]
TARGETS = [0, 3, 1]


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_label_smoothed_loss_matches_a_hand_computation(eps):
    logits = torch.tensor(ROWS, requires_grad=True)
    loss, nll = label_smoothed_loss(logits, torch.tensor(TARGETS), eps)
    want_loss, want_nll = hand_loss(ROWS, TARGETS, eps)
    assert loss.item() == pytest.approx(want_loss, rel=1e-6)
    assert nll.item() == pytest.approx(want_nll, rel=1e-6)
    assert not nll.requires_grad
    # gradient: the fused backward against autograd through the same formula written with exp / log / sum
    (2.5 * loss).backward()
    x = torch.tensor(ROWS, dtype=torch.float64, requires_grad=True)
    log_p = x - torch.log(torch.exp(x).sum(-1, keepdim=True))
    picked = log_p[torch.arange(3), torch.tensor(TARGETS)]
    (2.5 * ((1 - eps) * -picked + eps * -log_p.mean(-1)).sum()).backward()
    torch.testing.assert_close(logits.grad, x.grad.float(), rtol=1e-5, atol=1e-6)
    # and the library's own smoothing, which uses the same definition
    reference = F.cross_entropy(torch.tensor(ROWS), torch.tensor(TARGETS), label_smoothing=eps, reduction="sum")
    assert loss.item() == pytest.approx(reference.item(), rel=1e-6)


def test_label_smoothed_loss_skips_padding_positions():
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 5, requires_grad=True)  # (batch, tgt_len, vocab)
    target = torch.tensor([[4, 2, PAD], [3, PAD, PAD]])
    loss, nll = label_smoothed_loss(logits, target, 0.1)
    rows = [logits[0, 0], logits[0, 1], logits[1, 0]]
    want, want_nll = hand_loss([r.tolist() for r in rows], [4, 2, 3], 0.1)
    assert loss.item() == pytest.approx(want, rel=1e-6) and nll.item() == pytest.approx(want_nll, rel=1e-6)
    loss.backward()
    assert logits.grad[0, 2].abs().sum() == 0 and logits.grad[1, 1:].abs().sum() == 0
    assert logits.grad[0, 0].abs().sum() > 0


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("tokens", [1, 128, 300])  # one row, exactly one chunk, three chunks (the last partial)
@pytest.mark.compares
def test_fused_output_loss_equals_projection_then_loss(with_bias, tokens):
    torch.manual_seed(tokens)
    d, vocab, eps = 16, 37, 0.1
    features = torch.randn(tokens, d, dtype=torch.float64).float().requires_grad_()
    weight = (0.3 * torch.randn(vocab, d)).requires_grad_()
    bias = torch.randn(vocab).requires_grad_() if with_bias else None
    target = torch.randint(4, vocab, (tokens,))
    loss, nll = fused_output_loss(features, weight, bias, target, eps)
    (1.7 * loss).backward()
    got = [features.grad, weight.grad] + ([bias.grad] if with_bias else [])
    leaves = [t.detach().clone().requires_grad_() for t in [features, weight] + ([bias] if with_bias else [])]
    want_loss, want_nll = label_smoothed_loss(F.linear(*leaves), target, eps)
    (1.7 * want_loss).backward()
    assert loss.item() == pytest.approx(want_loss.item(), rel=1e-5)
    assert nll.item() == pytest.approx(want_nll.item(), rel=1e-5) and not nll.requires_grad
    for g, leaf in zip(got, leaves):
        torch.testing.assert_close(g, leaf.grad, rtol=1e-4, atol=1e-5)


def test_fused_output_loss_without_gradients_and_a_second_backward():
    torch.manual_seed(0)
    features, weight, target = torch.randn(200, 8), torch.randn(50, 8), torch.randint(4, 50, (200,))
    with torch.no_grad():
        loss, _ = fused_output_loss(features, weight, None, target, 0.2)
    assert loss.item() == pytest.approx(
        label_smoothed_loss(F.linear(features, weight), target, 0.2)[0].item(), rel=1e-5
    )
    weight.requires_grad_()
    loss, _ = fused_output_loss(features, weight, None, target, 0.2)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="one backward pass"):  # its gradient buffer went back to the pool
        loss.backward()


@pytest.mark.compares
def test_fused_output_loss_under_bf16_autocast_matches_the_unfused_one():
    torch.manual_seed(0)
    features, weight = torch.randn(150, 32), (0.2 * torch.randn(40, 32)).requires_grad_()
    target = torch.randint(4, 40, (150,))
    unfused = weight.detach().clone().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, _ = fused_output_loss(features, weight, None, target, 0.1)
        want, _ = label_smoothed_loss(F.linear(features, unfused), target, 0.1)
    assert loss.item() == pytest.approx(want.item(), rel=2e-3)
    loss.backward()
    want.backward()
    assert weight.grad.dtype == torch.float32
    torch.testing.assert_close(weight.grad, unfused.grad, rtol=0.05, atol=0.05)


# ---------------------------------------------------------------------------------- tiny runs
def test_tiny_transformer_trains_and_fills_the_run_dir(trained_run, data_section):
    run = trained_run
    saved = cfgmod.load(run / "config.yaml")  # the resolved config, loadable as is
    assert saved.training.max_updates == 8 and saved.model.d_model == 32
    assert (run / "spm.src.model").read_bytes() == (Path(data_section["dir"]) / "spm.model").read_bytes()
    train, valid = metrics(run, "train"), metrics(run, "valid")
    assert [r["update"] for r in train] == list(range(1, 9))
    assert all(math.isfinite(r["loss"]) for r in train)
    assert train[-1]["loss"] < train[0]["loss"]
    assert [r["update"] for r in valid] == [4, 8] and all("bleu" in r and "chrf" in r for r in valid)
    # keep_last 2 of the saves at 2, 4, 6, 8, plus the best (by valid loss) one
    best = min(valid, key=lambda r: r["loss"])["update"]
    assert set(checkpoints(run)) == {6, 8, best}
    last = ckpt.load(checkpoints(run)[8], with_train=True)
    assert last.metadata["update"] == 8 and last.metadata["config"]["model"]["d_model"] == 32
    assert any(k.endswith("exp_avg_sq") for k in last.train) and "rng.cpu.0" in last.train
    assert set(last.tokenizer) == {"src"}
    assert (run / "checkpoints" / "best.safetensors").is_file() and (run / "curves.png").is_file()


@pytest.mark.parametrize("model", [BAHDANAU], ids=["bahdanau"])  # Luong trains in the resume test below
def test_tiny_rnn_trains_a_few_updates(tmp_path, data_section, run_cli, model):
    config = make_config(tmp_path, data_section, model=model, max_updates=3, validate_every=3, batch_tokens=300)
    result = run_cli("train", config)
    assert result.code == 0, result.err
    run = tmp_path / "run"
    assert [r["update"] for r in metrics(run, "train")] == [1, 2, 3]
    assert all(math.isfinite(r["loss"]) for r in metrics(run, "train"))
    assert set(checkpoints(run)) == {3}
    assert ckpt.load(checkpoints(run)[3]).metadata["config"]["model"]["arch"] == model["arch"]


def test_keep_last_and_keep_best(tmp_path):
    from types import SimpleNamespace

    folder = tmp_path / "checkpoints"
    folder.mkdir()
    bleu = {1: 5.0, 2: 30.0, 3: 10.0, 4: 20.0, 5: 1.0, 6: None, 7: 2.0}
    for update, score in bleu.items():
        valid = {"bleu": score, "loss": 10.0 - (score or 0)} if score is not None else None
        bundle = ckpt.Bundle({"update": update, "valid": valid}, {"w": torch.ones(1)})
        ckpt.save(folder / f"ckpt_{update:07d}.safetensors", bundle)
    fake = SimpleNamespace(
        ckpt_dir=folder, valid_data=object(), t=SimpleNamespace(keep_last=2, keep_best=2, best_metric="bleu")
    )
    trainmod.Trainer.prune_checkpoints(fake)
    assert set(checkpoints(tmp_path)) == {6, 7, 2, 4}  # last two, and the two best BLEU
    fake.t = SimpleNamespace(keep_last=1, keep_best=1, best_metric="loss")
    trainmod.Trainer.prune_checkpoints(fake)
    assert set(checkpoints(tmp_path)) == {7, 2}  # lowest loss is BLEU 30's


# ------------------------------------------------------------------------------------ exact resume
@pytest.mark.parametrize(
    "model, k, batch_tokens, sampled",
    [(TRANSFORMER, 5, 700, False), (LUONG, 3, 1200, False), (TRANSFORMER, 5, 900, True)],
    ids=["transformer", "luong", "transformer-bpe-dropout"],
)
def test_resume_equals_uninterrupted_bitwise(tmp_path, request, run_cli, monkeypatch, model, k, batch_tokens, sampled):
    """k updates, then --resume to 2k == 2k straight: weights, Adam moments and RNG, tensor by tensor.

    update_freq 2 and 6-11 batches an epoch put an epoch boundary inside the resumed half; dropout is on, so
    the RNG state has to travel too. With sampled segmentations the resumed run must also pick up epoch 1's
    copy and move on to epoch 2's.
    """
    from mtkit.data.batches import ParallelData

    section = request.getfixturevalue("sampled_section" if sampled else "data_section")
    common = dict(
        model=model, update_freq=2, batch_tokens=batch_tokens, validate_every=k, save_every=k, valid_max_sentences=4
    )
    straight = make_config(tmp_path, section, name="straight", max_updates=2 * k, **common)
    split = make_config(tmp_path, section, name="split", max_updates=k, **common)
    assert run_cli("train", straight).code == 0
    assert run_cli("train", split).code == 0
    assert set(checkpoints(tmp_path / "split")) == {k}
    assert not (tmp_path / "split" / "curves.png").exists()  # training.curves: false (TRAINING)
    copies_read = []
    use_epoch = ParallelData.use_epoch

    def spy(self, epoch):
        use_epoch(self, epoch)
        copies_read.append((epoch, self.sample))

    monkeypatch.setattr(ParallelData, "use_epoch", spy)
    result = run_cli("train", "--resume", tmp_path / "split", "--set", f"training.max_updates={2 * k}")
    assert result.code == 0, result.err
    assert copies_read == ([(1, 0), (2, 1)] if sampled else [(1, None), (2, None)])
    assert f"resumed from ckpt_{k:07d}.safetensors" in result.out
    a, b = checkpoints(tmp_path / "straight"), checkpoints(tmp_path / "split")
    assert set(a) == set(b) == {k, 2 * k}
    assert ckpt.load(a[2 * k]).metadata["epoch"] == 2, "the resumed half should cross an epoch boundary"
    assert_same_state(a[k], b[k])
    assert_same_state(a[2 * k], b[2 * k])
    first, last = ckpt.load(a[k]).model, ckpt.load(a[2 * k]).model
    assert any(not torch.equal(first[n], last[n]) for n in first)  # the second half did train
    losses = lambda run: [(r["update"], r["loss"]) for r in metrics(run, "train")]  # noqa: E731
    assert losses(tmp_path / "straight") == losses(tmp_path / "split")


def test_resuming_a_finished_run_trains_nothing_more(run_copy, run_cli):
    before = ckpt.load(checkpoints(run_copy)[8], with_train=True)
    result = run_cli("train", "--resume", run_copy)
    assert result.code == 0, result.err
    assert max(checkpoints(run_copy)) == 8 and "already reached" in result.out
    after = ckpt.load(checkpoints(run_copy)[8], with_train=True)
    assert all(torch.equal(before.model[k], after.model[k]) for k in before.model)


# ----------------------------------------------------------------------------- signals and locks
def test_sigint_saves_a_checkpoint_and_exits_cleanly(tmp_path, data_section, run_cli, monkeypatch):
    config = make_config(tmp_path, data_section, max_updates=50, validate_every=4, save_every=4)
    real, calls = stepmod.fused_output_loss, []

    def loss_with_ctrl_c(*args, **kw):
        if torch.is_grad_enabled():
            calls.append(1)
            if len(calls) == 3:  # during update 3: Ctrl-C
                signal.raise_signal(signal.SIGINT)
        return real(*args, **kw)

    monkeypatch.setattr(stepmod, "fused_output_loss", loss_with_ctrl_c)
    before = signal.getsignal(signal.SIGINT)
    result = run_cli("train", config)
    assert result.code == 0, result.err
    assert "stopped at update 3 (SIGINT)" in result.out
    assert f"resume with: mtkit train --resume {tmp_path / 'run'}" in result.out
    assert set(checkpoints(tmp_path / "run")) == {3}
    assert ckpt.load(checkpoints(tmp_path / "run")[3], with_train=True).metadata["update"] == 3
    assert metrics(tmp_path / "run", "valid") == []  # a signal saves at once, without validating first
    assert signal.getsignal(signal.SIGINT) is before  # the caller's handler is back


# `python -m mtkit` that pauses once: at MTKIT_TEST_PAUSE=WHERE:UPDATE the trainer prints "paused: WHERE UPDATE"
# and waits there, until a SIGINT or SIGTERM has been handled or for good. A test that kills or signals it once
# that line is out knows where the trainer stands, however loaded the machine is.
PAUSING_WORKER = """
import os, sys, time
from pathlib import Path

from mtkit.training import loop

where, at = os.environ["MTKIT_TEST_PAUSE"].split(":")
at = int(at)


def pause(trainer=None):
    print(f"paused: {where} {at}", flush=True)
    while trainer is None or trainer.stop_signal is None:
        time.sleep(0.01)


if where == "update":  # before update AT; at 1: started (config.yaml written, run locked), nothing trained
    real_step = loop.train_step

    def train_step(trainer, *args, **kwargs):
        if trainer.state.update + 1 == at:
            pause(trainer)
        return real_step(trainer, *args, **kwargs)

    loop.train_step = train_step
elif where == "validate":  # inside the validation of update AT
    real_validate = loop.Trainer.validate

    def validate(self):
        if self.state.update == at:
            pause(self)
        return real_validate(self)

    loop.Trainer.validate = validate
elif where == "save":  # ckpt_AT written to its temp file and fsynced, not yet renamed into place
    real_replace = os.replace

    def replace(src, dst, *args, **kwargs):
        if Path(dst).name == f"ckpt_{at:07d}.safetensors":
            pause()
        return real_replace(src, dst, *args, **kwargs)

    os.replace = replace
from mtkit.cli import main

sys.exit(main(sys.argv[1:]))
"""
HANG_GUARD = 300  # seconds; only a trainer that never gets there takes this long


def start_paused(tmp_path: Path, args: list, pause: str, log) -> subprocess.Popen:
    """`mtkit train ARGS` in a child that pauses at ``pause`` (WHERE:UPDATE), its output going to ``log``."""
    worker = tmp_path / "pausing_worker.py"
    worker.write_text(PAUSING_WORKER, encoding="utf-8")
    return subprocess.Popen(
        [sys.executable, str(worker), "train", *map(str, args)],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**SUBPROCESS_ENV, "MTKIT_TEST_PAUSE": pause},
    )


def wait_until_paused(proc: subprocess.Popen, log_path: Path) -> None:
    """Return once the child has printed its "paused:" line; fail if it ends first."""
    deadline = time.monotonic() + HANG_GUARD
    while "paused: " not in log_path.read_text(encoding="utf-8"):
        if proc.poll() is not None:
            pytest.fail(f"the trainer ended before its pause:\n{log_path.read_text(encoding='utf-8')[-4000:]}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the trainer did not reach its pause:\n{log_path.read_text(encoding='utf-8')[-4000:]}")
        time.sleep(0.02)


@pytest.mark.slow
def test_second_trainer_is_refused_and_sigterm_saves_and_exits_0(tmp_path, data_section, run_cli):
    config = make_config(tmp_path, data_section, max_updates=100_000, validate_every=1000, save_every=1000)
    run, log_path = tmp_path / "run", tmp_path / "first.log"
    with open(log_path, "w") as log:
        first = start_paused(tmp_path, [config], "update:2", log)  # holds the run lock, update 1 done
        try:
            wait_until_paused(first, log_path)
            # a second trainer on the same run dir is refused while the first holds the lock
            second = run_cli("train", "--resume", run)
            assert_one_line_error(second, "another mtkit train", f"pid {first.pid}", str(run))
            first.send_signal(signal.SIGTERM)  # the first goes on with update 2, then saves and stops
            code = first.wait(timeout=HANG_GUARD)
        finally:
            if first.poll() is None:
                first.kill()
    out = log_path.read_text()
    assert code == 0, out
    assert "stopped at update 2 (SIGTERM)" in out and f"resume with: mtkit train --resume {run}" in out
    assert checkpoints(run) == {2: run / "checkpoints" / "ckpt_0000002.safetensors"}
    assert ckpt.load(checkpoints(run)[2], with_train=True).metadata["update"] == 2
    # the lock went with the process: the run continues
    result = run_cli("train", "--resume", run, "--set", "training.max_updates=4")
    assert result.code == 0, result.err
    assert max(checkpoints(run)) == 4


@pytest.mark.slow
def test_kill_9_at_chosen_moments_always_leaves_a_resumable_run(tmp_path, data_section, run_cli):
    """kill -9 at four moments: after start-up, before an update, while validating and between a checkpoint's
    write and its rename, the last three at seeded random updates. The trainer pauses at the moment and says so,
    and only then is killed. Each time every checkpoint on disk loads whole and --resume continues; the end
    result is bit-identical to an uninterrupted run."""
    n, save_every, validate_every = 40, 3, 6
    common = dict(max_updates=n, save_every=save_every, validate_every=validate_every, valid_max_sentences=5)
    config = make_config(tmp_path, data_section, keep_last=2, **common)
    reference = make_config(tmp_path, data_section, name="reference", keep_last=2, **common)
    assert run_cli("train", reference).code == 0
    run, rng = tmp_path / "run", random.Random(20240611)

    def after(every: int, upto: int) -> int:  # a seeded random multiple of ``every`` past the newest checkpoint
        latest = max(checkpoints(run), default=0)
        return rng.choice([u for u in range(latest + 1, upto + 1) if u % every == 0])

    moments = [
        lambda: "update:1",
        lambda: f"update:{after(1, 15)}",
        lambda: f"validate:{after(validate_every, 24)}",
        lambda: f"save:{after(save_every, n - save_every)}",
    ]
    for attempt, moment in enumerate(moments):
        pause = moment()
        where, at = pause.split(":")[0], int(pause.split(":")[1])
        args = ["--resume", run] if (run / "config.yaml").is_file() else [config]
        log_path = tmp_path / f"attempt-{attempt}.log"
        with open(log_path, "w") as log:
            proc = start_paused(tmp_path, args, pause, log)
            try:
                wait_until_paused(proc, log_path)
                proc.send_signal(signal.SIGKILL)
                assert proc.wait(timeout=HANG_GUARD) == -signal.SIGKILL
            finally:
                if proc.poll() is None:
                    proc.kill()
        out = log_path.read_text()
        assert f"paused: {pause.replace(':', ' ')}" in out and "Traceback" not in out, out
        for path in checkpoints(run).values():
            ckpt.load(path, with_train=True)
        assert max(checkpoints(run), default=0) == (at - 1) // save_every * save_every  # the last save done
        assert (run / "config.yaml").is_file()
        if where == "save":  # the killed save left its temp file, and the previous checkpoints whole
            assert [p for p in (run / "checkpoints").iterdir() if p.name.endswith(".tmp")]
    final = run_cli("train", "--resume", run)
    assert final.code == 0, final.err
    assert_same_state(checkpoints(run)[n], checkpoints(tmp_path / "reference")[n])
    assert [r["update"] for r in metrics(run, "train")] == list(range(1, n + 1))  # replays are not duplicated
    assert not [p for p in (run / "checkpoints").iterdir() if p.name.endswith(".tmp")]  # leftovers cleaned


# --------------------------------------------------------------------------------- bad numbers
@pytest.mark.parametrize("bad", ["nan", "inf"])
def test_nan_or_inf_loss_stops_naming_the_update_and_keeps_the_last_checkpoint(
    tmp_path, data_section, run_cli, monkeypatch, bad
):
    config = make_config(tmp_path, data_section, max_updates=20, save_every=2, validate_every=2)
    real, calls = stepmod.fused_output_loss, []

    def loss_turning_nan(*args, **kw):
        loss, nll = real(*args, **kw)
        if torch.is_grad_enabled():
            calls.append(1)
            if len(calls) == 5:  # update 5
                return loss * float(bad), nll
        return loss, nll

    monkeypatch.setattr(stepmod, "fused_output_loss", loss_turning_nan)
    line = assert_one_line_error(run_cli("train", config), f"loss became {bad} at update 5", "training.lr")
    run = tmp_path / "run"
    assert str(run / "checkpoints") in line
    assert set(checkpoints(run)) == {2, 4}
    assert ckpt.load(checkpoints(run)[4], with_train=True).metadata["update"] == 4
    monkeypatch.setattr(stepmod, "fused_output_loss", real)
    result = run_cli("train", "--resume", run, "--set", "training.max_updates=5")
    assert result.code == 0 and "resumed from ckpt_0000004.safetensors" in result.out


def test_out_of_memory_names_the_batch_size_to_lower(tmp_path, data_section, run_cli, monkeypatch):
    from mtkit.models.transformer import Transformer

    config = make_config(tmp_path, data_section, max_updates=3)

    def no_memory(self, *args, **kw):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(Transformer, "features", no_memory)
    assert_one_line_error(run_cli("train", config), "out of memory", "update 1", "training.batch_tokens", "600")


def test_out_of_memory_while_validating_names_the_batch_sizes(tmp_path, data_section, run_cli, monkeypatch):
    from mtkit.models.transformer import Transformer

    config = make_config(tmp_path, data_section, max_updates=3, validate_every=1)
    real = Transformer.forward

    def no_memory_in_eval(self, *args, **kw):
        if not torch.is_grad_enabled():
            raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory")
        return real(self, *args, **kw)

    monkeypatch.setattr(Transformer, "forward", no_memory_in_eval)
    assert_one_line_error(run_cli("train", config), "validating", "training.batch_tokens", "decoding.batch_size")


# --------------------------------------------------------------------------------- disk faults
def test_full_disk_fails_clearly_and_keeps_the_previous_checkpoint(tmp_path, data_section, run_cli, monkeypatch):
    config = make_config(tmp_path, data_section, max_updates=6, save_every=2, validate_every=100)
    real_open = builtins.open

    class FullDisk:
        """The disk fills up halfway through writing update 4's checkpoint."""

        def __init__(self, f):
            self.f = f

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

        def write(self, data):
            self.f.write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def open_on_full_disk(path, mode="r", *args, **kw):
        f = real_open(path, mode, *args, **kw)
        return FullDisk(f) if "ckpt_0000004" in str(path) and "w" in mode else f

    monkeypatch.setattr(files, "open", open_on_full_disk, raising=False)
    run = tmp_path / "run"
    target = run / "checkpoints" / "ckpt_0000004.safetensors"
    assert_one_line_error(run_cli("train", config), str(target), "No space left on device", "intact")
    assert set(checkpoints(run)) == {2}
    assert ckpt.load(checkpoints(run)[2], with_train=True).metadata["update"] == 2
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["ckpt_0000002.safetensors"]  # no temp left
    monkeypatch.undo()
    result = run_cli("train", "--resume", run)
    assert result.code == 0 and set(checkpoints(run)) >= {4, 6}


def test_unwritable_checkpoint_target_fails_clearly(run_copy, run_cli):
    """A target no one can write, root included: a folder sits where the temp file of update 10 would go."""
    blocker = run_copy / "checkpoints" / f".ckpt_0000010.safetensors.{os.getpid()}.tmp"
    blocker.mkdir()
    result = run_cli(
        "train", "--resume", run_copy, "--set", "training.max_updates=10", "--set", "training.validate_every=100"
    )
    assert_one_line_error(result, "cannot write", str(run_copy / "checkpoints" / "ckpt_0000010.safetensors"))
    assert max(checkpoints(run_copy)) == 8 and ckpt.load(checkpoints(run_copy)[8], with_train=True)
    assert blocker.is_dir()  # stale-temp clean-up removes files only


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_unwritable_checkpoint_folder_fails_clearly(run_copy, run_cli):
    folder = run_copy / "checkpoints"
    os.chmod(folder, 0o555)
    try:
        result = run_cli("train", "--resume", run_copy, "--set", "training.max_updates=10")
    finally:
        os.chmod(folder, 0o755)
    assert_one_line_error(result, "cannot write", "Permission denied", str(folder))  # best or ckpt_0000010
    assert max(checkpoints(run_copy)) == 8 and ckpt.load(checkpoints(run_copy)[8], with_train=True)


def test_run_dir_that_is_a_file_fails_clearly(tmp_path, data_section, run_cli):
    config = make_config(tmp_path, data_section, max_updates=2)
    (tmp_path / "run").write_text("not a folder")
    assert_one_line_error(run_cli("train", config), str(tmp_path / "run"), "training.run_dir")


# ------------------------------------------------------------------------- damaged checkpoints
def test_damaged_newest_checkpoint_falls_back_to_the_previous_one(run_copy, trained_run, run_cli):
    newest = checkpoints(run_copy)[8]
    newest.write_bytes(newest.read_bytes()[:1000])  # truncated
    result = run_cli("train", "--resume", run_copy)
    assert result.code == 0, result.err
    assert "resumed from ckpt_0000006.safetensors" in result.out
    assert "warning" in result.err and str(newest) in result.err and "Traceback" not in result.err
    assert_same_state(checkpoints(run_copy)[8], checkpoints(trained_run)[8])  # the replay is exact


def flip_a_weight_bit(path: Path) -> None:
    """Flip one bit inside the first model tensor's bytes: the file still parses, only the CRC can tell."""
    data = bytearray(path.read_bytes())
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + n])
    start, end = next(v["data_offsets"] for k, v in header.items() if k.startswith("model."))
    data[8 + n + (start + end) // 2] ^= 0x10
    path.write_bytes(bytes(data))


def test_only_damaged_checkpoints_fail_with_one_line(run_copy, run_cli):
    for path in checkpoints(run_copy).values():
        flip_a_weight_bit(path)
    newest = checkpoints(run_copy)[8]
    assert_one_line_error(run_cli("train", "--resume", run_copy), str(newest), "corrupted")
    assert_one_line_error(run_cli("average", run_copy, "--last", "2"), "corrupted")


def test_pickle_in_the_run_dir_is_refused_without_running_it(run_copy, tmp_path, run_cli):
    class Payload:
        def __reduce__(self):
            return (builtins.open, (str(tmp_path / "payload-ran"), "w"))

    evil = run_copy / "checkpoints" / "ckpt_0000009.safetensors"
    torch.save({"model.w": Payload()}, evil)
    result = run_cli("train", "--resume", run_copy)
    assert result.code == 0 and "resumed from ckpt_0000008.safetensors" in result.out
    assert "pickle" in result.err and str(evil) in result.err
    assert_one_line_error(run_cli("average", run_copy, "--last", "1"), str(evil), "pickle")
    assert not (tmp_path / "payload-ran").exists()


@pytest.mark.parametrize("damage", ["wrong shape", "missing key", "wrong vocab size"])
def test_checkpoint_not_matching_its_config_names_the_tensor(run_copy, run_cli, damage):
    path = checkpoints(run_copy)[8]
    bundle = ckpt.load(path, with_train=True)
    weights = dict(bundle.model)
    if damage == "wrong vocab size":
        name = next(k for k, v in weights.items() if v.shape[0] == 100)
        weights[name] = torch.zeros(120, *weights[name].shape[1:])
    else:
        name = next(k for k, v in weights.items() if k.startswith("encoder.") and v.dim() == 2)
        if damage == "wrong shape":
            weights[name] = weights[name][:-1]
        else:
            del weights[name]
    ckpt.save(path, ckpt.Bundle(bundle.metadata, weights, bundle.tokenizer, bundle.train))
    assert_one_line_error(
        run_cli("train", "--resume", run_copy, "--set", "training.max_updates=9"), f"'{name}'", str(path)
    )


# ------------------------------------------------------------------------------ changed configs
def test_resume_refuses_a_different_config_unless_forced(run_copy, tmp_path, run_cli):
    tree = yaml.safe_load((run_copy / "config.yaml").read_text())
    tree["training"]["lr"] = 0.01
    tree["training"]["max_updates"] = 10  # stopping keys may change freely
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(tree))
    assert_one_line_error(run_cli("train", changed, "--resume", run_copy), "training.lr", "--force")
    assert_one_line_error(run_cli("train", "--resume", run_copy, "--set", "training.lr=0.01"), "training.lr", "--force")
    assert_one_line_error(run_cli("train", "--resume", run_copy, "--set", "model.d_model=64"), "model.d_model")
    assert max(checkpoints(run_copy)) == 8  # nothing trained
    result = run_cli("train", changed, "--resume", run_copy, "--force")
    assert result.code == 0, result.err
    assert max(checkpoints(run_copy)) == 10
    assert cfgmod.load(run_copy / "config.yaml").training.lr == 0.01


def test_fresh_start_on_a_run_with_checkpoints_points_to_resume(run_copy, run_cli):
    assert_one_line_error(run_cli("train", run_copy / "config.yaml"), "already holds checkpoints", "--resume")
    assert_one_line_error(run_cli("train", "--resume", run_copy / "nowhere"), "not a run directory")


# -------------------------------------------------------------------------------- average, plot
def test_average_writes_the_mean_of_the_last_two(trained_run, tmp_path, run_cli):
    out = tmp_path / "average.safetensors"
    result = run_cli("average", trained_run, "--last", "2", "--output", out)
    assert result.code == 0, result.err
    a, b = ckpt.load(checkpoints(trained_run)[6]).model, ckpt.load(checkpoints(trained_run)[8]).model
    avg = ckpt.load(out)
    assert sorted(avg.model) == sorted(a)
    for k in a:
        assert torch.equal(avg.model[k], ((a[k].double() + b[k].double()) / 2).to(a[k].dtype)), k
    assert any(not torch.equal(avg.model[k], a[k]) and not torch.equal(avg.model[k], b[k]) for k in a)
    assert avg.train == {} and avg.metadata["averaged"] == ["ckpt_0000006.safetensors", "ckpt_0000008.safetensors"]
    assert_one_line_error(run_cli("average", trained_run, "--last", "0"), "--last")


def test_plot_writes_a_png(run_copy, run_cli):
    (run_copy / "curves.png").unlink()
    result = run_cli("plot", run_copy)
    assert result.code == 0, result.err
    assert (run_copy / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert str(run_copy / "curves.png") in result.out
    assert_one_line_error(run_cli("plot", run_copy / "nowhere"), "metrics.jsonl")
