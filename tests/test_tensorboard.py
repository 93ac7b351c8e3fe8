"""`training.tensorboard: true`: the event files in RUN/tensorboard, read back with TensorBoard's own reader, hold
metrics.jsonl's numbers at metrics.jsonl's updates and each validation's sample translation; a resumed run
continues the same curves without repeating an update; without the package, one line and exit 2 before training.
"""

from __future__ import annotations

import json
import math
import struct
import sys
from pathlib import Path

import pytest
import torch
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

from conftest import TINY_TRANSFORMER, assert_one_line_error, prepared_toy_data, without_curves
from mtkit import checkpoint as ckpt
from mtkit.training import board as boardmod
from mtkit.training import step as stepmod
from mtkit.training.board import sample_markdown

TRAINING = {
    "devices": "cpu",
    "threads": 1,
    "batch_tokens": 600,
    "lr": 3e-3,
    "warmup_updates": 4,
    "max_updates": 24,
    "log_every": 2,
    "validate_every": 8,
    "valid_max_sentences": 5,
    "tensorboard": True,
}
DECODING = {"max_len_a": 1.0, "max_len_b": 4}  # an untrained model decodes to the length limit: keep it short
SAMPLE = "valid/sample/text_summary"  # torch's add_text("valid/sample", ...) stores it under this tag


@pytest.fixture(scope="module", autouse=True)
def _restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def data_section(tmp_path_factory) -> dict:
    """The toy corpus of conftest (train and valid), prepared once for this module."""
    return prepared_toy_data(tmp_path_factory.mktemp("toy"))


def make_config(folder: Path, data_section: dict, **training) -> Path:
    """folder/run.yaml for a run in folder/run; ``training`` overrides TRAINING."""
    tree = {
        "data": data_section,
        "model": TINY_TRANSFORMER,
        "training": {**TRAINING, "run_dir": str(folder / "run"), **training},
        "decoding": DECODING,
    }
    path = folder / "run.yaml"
    path.write_text(yaml.safe_dump(without_curves(tree), sort_keys=False), encoding="utf-8")
    return path


def records(run: Path, kind: str) -> list[dict]:
    lines = (run / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


def events(run: Path) -> EventAccumulator:
    """Every event of run/tensorboard as TensorBoard shows them (what a resume purges left out)."""
    acc = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def assert_curves_equal_metrics(run: Path) -> EventAccumulator:
    """Each number of each metrics.jsonl record is a scalar at the record's update, and no other point exists."""
    acc = events(run)
    expected: dict[str, list[tuple[int, float]]] = {}
    for kind in ("train", "valid"):
        for r in records(run, kind):
            for key, value in r.items():
                if key not in ("kind", "update", "best") and isinstance(value, (int, float)):
                    expected.setdefault(f"{kind}/{key}", []).append((r["update"], float(value)))
    assert sorted(acc.Tags()["scalars"]) == sorted(expected)
    for tag, points in expected.items():
        found = [(e.step, e.value) for e in acc.Scalars(tag)]
        assert [step for step, _ in found] == [step for step, _ in points], tag
        for (step, value), (_, want) in zip(found, points):
            assert value == pytest.approx(want, rel=1e-6, abs=1e-12), (tag, step)  # stored as float32
    return acc


def event_files(run: Path) -> list[Path]:
    return sorted((run / "tensorboard").glob("events.out.tfevents.*"))


def written_points(run: Path) -> list[tuple[str, int]]:
    """(tag, update) of every summary value in the event files as they are on disk, no reader's purge applied."""
    return [
        (value.tag, event.step)
        for path in event_files(run)
        for event in EventFileLoader(str(path)).Load()
        for value in event.summary.value
    ]


def samples(acc: EventAccumulator) -> list[tuple[int, str]]:
    return [(e.step, e.tensor_proto.string_val[0].decode("utf-8")) for e in acc.Tensors(SAMPLE)]


def test_event_files_hold_the_metrics_and_the_sample_translations(tmp_path, data_section, run_cli):
    result = run_cli("train", make_config(tmp_path, data_section))
    assert result.code == 0, result.err
    run = tmp_path / "run"
    train, valid = records(run, "train"), records(run, "valid")
    assert [r["update"] for r in train] == list(range(2, 25, 2))
    assert [r["update"] for r in valid] == [8, 16, 24]
    acc = assert_curves_equal_metrics(run)
    for tag in ("train/loss", "train/lr", "train/tgt_tokens_per_s", "valid/loss", "valid/ppl", "valid/bleu"):
        assert tag in acc.Tags()["scalars"], tag
    assert [e.value for e in acc.Scalars("train/lr")] == pytest.approx([r["lr"] for r in train], rel=1e-6)

    source = Path(data_section["splits"]["valid"]["src"]).read_text(encoding="utf-8").splitlines()[0]
    reference = Path(data_section["splits"]["valid"]["tgt"]).read_text(encoding="utf-8").splitlines()[0]
    texts = samples(acc)
    assert [step for step, _ in texts] == [8, 16, 24]
    for (_, text), r in zip(texts, valid):
        assert r["example"]["src"] == source and r["example"]["ref"] == reference  # the first valid sentence
        assert text == sample_markdown(r["example"])
        assert f"**source:** {source}" in text and f"**reference:** {reference}" in text
        assert f"**hypothesis:** {r['example']['hyp']}" in text


def test_sample_markdown_escapes_what_markdown_would_format():
    text = sample_markdown({"src": "a *b* <i>x</i>", "hyp": "c_d [e](f)", "ref": "g | h"})
    assert text.splitlines() == [
        r"**source:** a \*b\* \<i\>x\</i\>  ",
        r"**hypothesis:** c\_d \[e\](f)  ",
        r"**reference:** g \| h",
    ]


def test_resume_continues_the_curves_without_repeating_an_update(tmp_path, data_section, run_cli):
    """A run stopped at update 12 whose last checkpoint (12) is lost resumes from 8: the points it wrote after
    update 8 are replaced by the resumed run's, as metrics.jsonl's records are, and the curves go on to 20
    (validated at 16 and, as the run stops, at 20)."""
    config = make_config(tmp_path, data_section, max_updates=12, save_every=4, keep_last=3)
    assert run_cli("train", config).code == 0
    run = tmp_path / "run"
    ckpts = dict(ckpt.list_checkpoints(run / "checkpoints"))
    assert sorted(ckpts) == [4, 8, 12]
    ckpts[12].unlink()  # as if killed after update 12's events, before its checkpoint
    assert max(e.step for e in events(run).Scalars("train/loss")) == 12
    with open(event_files(run)[0], "ab") as f:  # and as if killed while writing an event: a cut record
        f.write(struct.pack("<Q", 200) + b"\0" * 30)

    result = run_cli("train", "--resume", run, "--set", "training.max_updates=20")
    assert result.code == 0, result.err
    assert "resumed from ckpt_0000008.safetensors" in result.out
    assert len(event_files(run)) == 2  # appended beside the first
    points = written_points(run)
    assert len(points) == len(set(points))  # on disk too, each tag once per update: the files were trimmed
    acc = assert_curves_equal_metrics(run)
    steps = [e.step for e in acc.Scalars("train/loss")]
    assert steps == list(range(2, 21, 2))  # each update once, in order
    assert [e.step for e in acc.Scalars("valid/loss")] == [8, 16, 20]  # the first run's 12 is gone
    assert [step for step, _ in samples(acc)] == [8, 16, 20]
    assert all(math.isfinite(e.value) for e in acc.Scalars("train/loss"))


def test_without_the_package_one_line_and_exit_2_before_training(tmp_path, data_section, run_cli, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import torch.utils.tensorboard fails
    config = make_config(tmp_path, data_section)
    result = run_cli("train", config)
    assert_one_line_error(result, str(config), "training.tensorboard", "pip install 'mtkit[tensorboard]'")
    assert not (tmp_path / "run").exists()  # nothing trained, nothing written

    monkeypatch.undo()  # a run without TensorBoard, resumed with it turned on, but the package missing
    assert run_cli("train", make_config(tmp_path, data_section, tensorboard=False, max_updates=4)).code == 0
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    result = run_cli("train", "--resume", tmp_path / "run", "--set", "training.tensorboard=true")
    assert_one_line_error(result, str(tmp_path / "run" / "config.yaml"), "pip install 'mtkit[tensorboard]'")
    assert not (tmp_path / "run" / "tensorboard").exists()


def test_an_interrupted_run_closes_its_event_file(tmp_path, data_section, run_cli, monkeypatch):
    """Stopped at once (a second Ctrl-C) during update 7: the points of updates 2, 4 and 6 reach the disk."""
    real, calls = stepmod.fused_output_loss, []

    def loss_then_interrupt(*args, **kw):
        if torch.is_grad_enabled():
            calls.append(1)
            if len(calls) == 7:
                raise KeyboardInterrupt
        return real(*args, **kw)

    closed, real_close = [], boardmod.Board.close

    def close(board):
        closed.append(board.logdir)
        real_close(board)

    monkeypatch.setattr(stepmod, "fused_output_loss", loss_then_interrupt)
    monkeypatch.setattr(boardmod.Board, "close", close)
    result = run_cli("train", make_config(tmp_path, data_section))
    assert result.code != 0
    assert closed == [tmp_path / "run" / "tensorboard"]
    run = tmp_path / "run"
    assert [r["update"] for r in records(run, "train")] == [2, 4, 6]
    assert_curves_equal_metrics(run)
