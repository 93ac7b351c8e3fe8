"""TensorBoard event files of a training run (``training.tensorboard: true``), in RUN/tensorboard.

The main rank writes what it writes to metrics.jsonl, at the same updates: every number of a train record as
``train/KEY`` (loss, nll, ppl, lr, tgt_tokens_per_s, padding, batch_tokens, epoch, elapsed), every number of a
valid record as ``valid/KEY`` (each direction's of a multilingual model as ``valid/DIRECTION/KEY``), and the valid
record's example translation as the text ``valid/sample``. Watch it with ``tensorboard --logdir RUN/tensorboard``.

A resumed run appends to the same folder from the update after its checkpoint's. What an interrupted run had
written past that update is first cut from its event files (``trim_events``, as metrics.jsonl is trimmed), so
each update is there once; the writer's ``purge_step`` also tells TensorBoard to drop any such events.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Optional

from mtkit.errors import MtkitError
from mtkit.files import atomic_write_bytes

LOGDIR = "tensorboard"  # the event files' folder in the run dir
INSTALL = "pip install 'mtkit[tensorboard]'"
NOT_SCALARS = ("kind", "update", "best")  # record keys that are no curve (best: a flag)


def writer_class(source: str):
    """``torch.utils.tensorboard.SummaryWriter``.

    Args:
        source: where training.tensorboard was set (the config file), for the message.

    Raises:
        MtkitError: the tensorboard package is not installed (or does not import).
    """
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as err:
        raise MtkitError(
            f"{source}: training.tensorboard is true but TensorBoard does not import ({err}); "
            f"install it with {INSTALL}, or set training.tensorboard: false"
        ) from None
    return SummaryWriter


def scalars(record: dict, prefix: str) -> dict[str, float]:
    """The numbers of a metrics.jsonl ``record`` by TensorBoard tag: ``PREFIX/KEY``, nested dicts as
    ``PREFIX/NAME/KEY``; flags, strings and the update itself are left out."""
    out: dict[str, float] = {}
    for key, value in record.items():
        if key in NOT_SCALARS:
            continue
        if key == "directions" and isinstance(value, dict):  # a multilingual validation: each direction's
            for name, metrics in value.items():
                out.update(scalars(metrics, f"{prefix}/{name}"))
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            out[f"{prefix}/{key}"] = float(value)
    return out


_MARKDOWN = re.compile(r"([\\`*_\[\]<>|~#])")


def sample_markdown(example: dict) -> str:
    """A validation's example translation as the Markdown TensorBoard shows: source, hypothesis, reference on
    three lines, the characters Markdown would read backslash-escaped."""
    rows = [("source", example.get("src")), ("hypothesis", example.get("hyp")), ("reference", example.get("ref"))]
    return "  \n".join(f"**{label}:** {escape_markdown(text)}" for label, text in rows if text is not None)


def escape_markdown(text: str) -> str:
    """``text`` with the characters Markdown would read as formatting backslash-escaped."""
    return _MARKDOWN.sub(r"\\\1", text)


def trim_events(logdir: Path, update: int) -> None:
    """Keep the events of updates <= ``update`` in the event files of ``logdir``; a record cut by a kill goes too.

    An event file is a sequence of TFRecords (length: uint64, its CRC: uint32, the ``Event`` proto, its CRC:
    uint32); the records kept are copied as they are.
    """
    from google.protobuf.message import DecodeError
    from tensorboard.compat.proto.event_pb2 import Event

    for path in sorted(logdir.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        kept, pos = [], 0
        while pos + 12 <= len(data):
            (length,) = struct.unpack_from("<Q", data, pos)
            end = pos + 12 + length + 4
            if end > len(data):
                break
            try:
                step = Event.FromString(data[pos + 12 : pos + 12 + length]).step
            except DecodeError:
                break
            if step <= update:
                kept.append(data[pos:end])
            pos = end
        trimmed = b"".join(kept)
        if len(trimmed) == len(data):
            continue
        if kept:
            atomic_write_bytes(path, trimmed)
        else:
            path.unlink()


class Board:
    """The run's TensorBoard writer (main rank only); a ``Board`` of ``None`` writes nothing.

    Args:
        run_dir: the run directory; the events go to run_dir/tensorboard.
        start: the update the run starts from (0, or the resumed checkpoint's): events of later updates that an
            interrupted run left are dropped.
        source: where training.tensorboard was set, for the message of a missing package.

    Raises:
        MtkitError: TensorBoard does not import, or the folder cannot be created.
    """

    def __init__(self, run_dir: Path, start: int, source: str):
        self.logdir = Path(run_dir) / LOGDIR
        summary_writer = writer_class(source)
        try:
            if self.logdir.is_dir():
                trim_events(self.logdir, start)
            self.writer = summary_writer(log_dir=str(self.logdir), purge_step=start + 1, flush_secs=30)
        except OSError as err:
            raise MtkitError(
                f"{self.logdir}: cannot write TensorBoard events ({err.strerror or err}); "
                "choose another training.run_dir or set training.tensorboard: false"
            ) from None

    def train(self, record: dict) -> None:
        """A train record of metrics.jsonl, at its update."""
        for tag, value in scalars(record, "train").items():
            self.writer.add_scalar(tag, value, record["update"])

    def valid(self, record: dict) -> None:
        """A valid record of metrics.jsonl and its example translation, at its update; written to disk now."""
        for tag, value in scalars(record, "valid").items():
            self.writer.add_scalar(tag, value, record["update"])
        if isinstance(record.get("example"), dict):
            self.writer.add_text("valid/sample", sample_markdown(record["example"]), record["update"])
        self.writer.flush()

    def close(self) -> None:
        """Write what is queued and close the event file."""
        self.writer.close()


def open_board(cfg, start: int, source: Optional[str] = None) -> Optional[Board]:
    """The ``Board`` of a run whose config sets training.tensorboard, else None (call on the main rank only)."""
    if not cfg.training.tensorboard:
        return None
    return Board(Path(cfg.training.run_dir), start, source or "training.tensorboard")
