"""The training state: its checkpoint metadata, the validation verdict, patience and best.safetensors, and a resume
that carries the best score and the patience counter on."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
import yaml

from conftest import TINY_TRANSFORMER, prepared_toy_data, without_curves
from mtkit import checkpoint as ckpt
from mtkit.errors import MtkitError
from mtkit.training import loop as trainmod
from mtkit.training.distributed import Dist
from mtkit.training.state import TrainState
from mtkit.training.validate import is_better, validation

# The metadata keys of the state, as every checkpoint since the first has written them.
STATE_KEYS = ["update", "epoch", "position", "elapsed", "best", "bad_validations"]


def test_state_metadata_keeps_its_keys_and_round_trips():
    state = TrainState(update=12, epoch=3, position=5, elapsed=7.5, best=2.25, bad_validations=1)
    meta = state.to_metadata()
    assert list(meta) == STATE_KEYS
    assert TrainState.from_metadata({**meta, "world_size": 2}, world_size=2) == state


def test_state_position_is_rescaled_to_another_world_size():
    meta = {**TrainState(update=4, position=6).to_metadata(), "world_size": 2}
    assert TrainState.from_metadata(meta, world_size=4).position == 3  # 12 batches of the epoch done
    assert TrainState.from_metadata(meta, world_size=1).position == 12


def test_state_of_minimal_metadata_takes_defaults():
    state = TrainState.from_metadata({"update": 8, "epoch": 2, "position": 1}, world_size=1)
    assert state == TrainState(update=8, epoch=2, position=1)
    with pytest.raises(KeyError):
        TrainState.from_metadata({"update": 8}, world_size=1)


def test_state_counts_updates_epochs_and_validations():
    state = TrainState()
    state.advance(2, elapsed=1.5)
    state.advance(1, elapsed=2.0)
    assert (state.update, state.position, state.elapsed) == (2, 3, 2.0)
    state.next_epoch()
    assert (state.epoch, state.position) == (2, 0)
    state.record_validation(False, None)
    state.record_validation(True, 3.0)
    assert (state.best, state.bad_validations) == (3.0, 0)
    state.record_validation(False, 3.5)
    assert (state.best, state.bad_validations) == (3.0, 1)


@pytest.mark.parametrize(
    "score, best, metric, expected",
    [
        (2.0, None, "loss", True),
        (2.0, 3.0, "loss", True),
        (3.0, 3.0, "loss", False),
        (4.0, 3.0, "loss", False),
        (30.0, 20.0, "bleu", True),
        (20.0, 20.0, "chrf", False),
        (None, None, "bleu", False),
    ],
)
def test_is_better(score, best, metric, expected):
    assert is_better(score, best, metric) is expected


def _cfg(best_metric: str = "loss"):
    return SimpleNamespace(
        training=SimpleNamespace(best_metric=best_metric, batch_tokens=600), decoding=SimpleNamespace(batch_size=16)
    )


def test_validation_returns_its_verdict_without_touching_a_trainer():
    result = validation(lambda: {"loss": 2.0, "nll": 1.9}, update=4, best=2.5, cfg=_cfg(), dist=Dist())
    assert result.score == 2.0 and result.improved and result.metrics["loss"] == 2.0 and "seconds" in result.metrics
    unscored = validation(lambda: {"loss": 2.0}, update=4, best=None, cfg=_cfg("bleu"), dist=Dist())
    assert unscored.score is None and not unscored.improved


def test_validation_out_of_memory_names_the_batch_sizes():
    def no_memory():
        raise torch.OutOfMemoryError("CUDA out of memory")

    with pytest.raises(MtkitError, match="update 7.*training.batch_tokens.*600.*decoding.batch_size.*16"):
        validation(no_memory, update=7, best=None, cfg=_cfg(), dist=Dist())


# ------------------------------------------------------------------------------------------ in a run
@pytest.fixture(scope="module")
def data_section(tmp_path_factory) -> dict:
    return prepared_toy_data(tmp_path_factory.mktemp("state"), (("train", 120, 0), ("valid", 10, 1)))


# validation losses by update: improves at 1 and 2, then not at 3, 4 (patience 2 stops at 4)
LOSSES = {1: 3.0, 2: 2.0, 3: 2.5, 4: 2.75, 5: 2.0}


@pytest.fixture
def scripted_validation(monkeypatch):
    """Trainer.validate returns LOSSES[update] instead of measuring."""

    def fake(self):
        return {"loss": LOSSES[self.state.update], "nll": 0.0, "ppl": 1.0}

    monkeypatch.setattr(trainmod.Trainer, "validate", fake)


def _config(tmp_path, data_section, model: dict = TINY_TRANSFORMER, name: str = "run", **training) -> str:
    tree = {
        "data": data_section,
        "model": model,
        "training": {
            "run_dir": str(tmp_path / name),
            "devices": "cpu",
            "threads": 1,
            "batch_tokens": 400,
            "log_every": 1,
            "validate_every": 1,
            "valid_bleu": False,
            "best_metric": "loss",
            "keep_last": 10,
            "keep_best": 0,
            **training,
        },
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(without_curves(tree), sort_keys=False), encoding="utf-8")
    return str(path)


def _meta(run, update: int) -> dict:
    return ckpt.read_metadata(run / "checkpoints" / f"ckpt_{update:07d}.safetensors")


def test_patience_stops_and_best_is_saved_from_the_verdicts(tmp_path, data_section, run_cli, scripted_validation):
    result = run_cli("train", _config(tmp_path, data_section, max_updates=20, patience=2))
    assert result.code == 0, result.err
    assert "stopped at update 4 (no improvement in 2 validations (patience))" in result.out
    run = tmp_path / "run"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [(r["update"], r["best"]) for r in records if r["kind"] == "valid"] == [
        (1, True),
        (2, True),
        (3, False),
        (4, False),
    ]
    assert [(_meta(run, u)["best"], _meta(run, u)["bad_validations"]) for u in (1, 2, 3, 4)] == [
        (3.0, 0),
        (2.0, 0),
        (2.0, 1),
        (2.0, 2),
    ]
    best = ckpt.read_metadata(run / "checkpoints" / "best.safetensors")
    assert (best["update"], best["best"], best["bad_validations"], best["valid"]["loss"]) == (2, 2.0, 0, 2.0)


def test_resume_carries_the_best_score_and_the_patience_counter(tmp_path, data_section, run_cli, scripted_validation):
    assert run_cli("train", _config(tmp_path, data_section, max_updates=3, patience=2)).code == 0
    run = tmp_path / "run"
    result = run_cli("train", "--resume", run, "--set", "training.max_updates=20")
    assert result.code == 0, result.err
    assert "resumed from ckpt_0000003.safetensors" in result.out
    assert "stopped at update 4 (no improvement in 2 validations (patience))" in result.out  # 1 + 1 bad
    assert (_meta(run, 4)["best"], _meta(run, 4)["bad_validations"]) == (2.0, 2)
    assert ckpt.read_metadata(run / "checkpoints" / "best.safetensors")["update"] == 2  # 2.75 did not replace it


# -------------------------------------------------------------------------------- student architectures
@pytest.mark.parametrize(
    "student",
    [dict(encoder_layers=2, decoder_layers=1, decoder_ffn_dim=32), dict(decoder_self="ssru")],
    ids=["deep-encoder-narrow-decoder", "ssru-decoder"],
)
def test_student_architectures_resume_bit_for_bit(tmp_path, data_section, run_cli, student):
    """3 updates, then --resume to 6 == 6 straight, tensor by tensor (weights, Adam moments, RNG; dropout on)."""
    model = {**TINY_TRANSFORMER, "dropout": 0.1, **student}
    common = dict(model=model, validate_every=3, keep_last=2)
    assert run_cli("train", _config(tmp_path, data_section, name="straight", max_updates=6, **common)).code == 0
    assert run_cli("train", _config(tmp_path, data_section, name="split", max_updates=3, **common)).code == 0
    resumed = run_cli("train", "--resume", tmp_path / "split", "--set", "training.max_updates=6")
    assert resumed.code == 0 and "resumed from ckpt_0000003.safetensors" in resumed.out, resumed.err
    a = ckpt.load(tmp_path / "straight" / "checkpoints" / "ckpt_0000006.safetensors", with_train=True)
    b = ckpt.load(tmp_path / "split" / "checkpoints" / "ckpt_0000006.safetensors", with_train=True)
    assert a.metadata["config"]["model"] == b.metadata["config"]["model"] and sorted(a.model) == sorted(b.model)
    assert any(".self_attn.forget." in k for k in a.model) == (student.get("decoder_self") == "ssru")
    for k in a.model:
        assert torch.equal(a.model[k], b.model[k]), k
    assert sorted(a.train) == sorted(b.train) and all(torch.equal(a.train[k], b.train[k]) for k in a.train)
    first = ckpt.load(tmp_path / "straight" / "checkpoints" / "ckpt_0000003.safetensors")
    assert any(not torch.equal(first.model[k], a.model[k]) for k in a.model)  # the second half did train
