"""What `mtkit train` reports: a summary table, progress and the records of RUN/metrics.jsonl.

Progress is a rich bar on a terminal and plain lines otherwise.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Optional

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
from rich.progress import Progress as RichProgress
from rich.table import Table

from mtkit.files import atomic_write_text


def model_rows(cfg) -> list[tuple[str, str]]:
    """The summary table's (name, value) rows that describe ``cfg.model``."""
    m = cfg.model
    if m.arch == "transformer":
        return [
            (
                "layers",
                f"{m.encoder_layers}+{m.decoder_layers}" + (" (decoder: SSRU)" if m.decoder_self == "ssru" else ""),
            ),
            (
                "d_model / heads / ffn",
                f"{m.d_model} / {m.heads} / {m.ffn_dim}"
                + (f" (decoder {m.decoder_ffn_dim})" if m.decoder_ffn_dim else ""),
            ),
            ("norm / positions", f"{m.norm} / {m.positions}"),
            ("dropout", str(m.dropout)),
        ]
    if m.arch == "bahdanau":
        return [
            ("embed / hidden", f"{m.embed_dim} / {m.hidden_size}"),
            ("encoder", f"bi-GRU x{m.encoder_layers}"),
            ("attention", "additive"),
            ("dropout", str(m.dropout)),
        ]
    return [
        ("embed / hidden / layers", f"{m.embed_dim} / {m.hidden_size} / {m.layers}"),
        ("encoder", f"{m.encoder} LSTM"),
        ("attention", f"{m.attention} {m.score}" + (f" (D={m.window})" if m.attention == "local_p" else "")),
        ("input feeding", str(m.input_feeding)),
        ("dropout", str(m.dropout)),
    ]


def print_summary(cfg, model, manifest: dict, dist, matmuls: str = "fp32") -> None:
    """Print the run's table: model, vocabulary, data, device, batch, optimizer, stop conditions, run dir.
    ``matmuls``: what float32 products compute in ("tf32" on a GPU by default, ``devices.float32_matmuls``)."""
    t = cfg.training
    table = Table(title=f"mtkit train: {cfg.model.arch}", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column()
    n_params = model.num_parameters()
    table.add_row("parameters", f"{n_params:,} ({n_params / 1e6:.2f}M)")
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    if trained != n_params:  # training.lora, training.freeze_embeddings
        table.add_row("trained", f"{trained:,} ({trained / 1e6:.2f}M, {100 * trained / max(n_params, 1):.2f}%)")
    for k, v in model_rows(cfg):
        table.add_row(k, v)
    vocab = manifest.get("vocab_size", {})
    table.add_row("vocabulary", f"{vocab}{' joint' if manifest.get('joint_vocab') else ''}")
    train = manifest.get("splits", {}).get("train", {})
    table.add_row("training pairs", f"{train.get('pairs_kept', train.get('pairs', '?')):,}" if train else "?")
    precision = t.precision + (" (TF32 matmuls)" if t.precision == "fp32" and matmuls == "tf32" else "")
    table.add_row("device / precision", f"{dist.device} x{dist.world_size} / {precision}")
    table.add_row(
        "batch",
        f"{t.batch_tokens} tokens x update_freq {t.update_freq} x {dist.world_size} process(es) "
        f"= {t.batch_tokens * t.update_freq * dist.world_size} per update",
    )
    table.add_row(
        "optimizer",
        f"{t.optimizer} lr {t.lr} {t.schedule} warmup {t.warmup_updates}, label smoothing {t.label_smoothing}",
    )
    stops = [f"{k}={getattr(t, k)}" for k in ("max_updates", "max_epochs", "max_minutes") if getattr(t, k)]
    table.add_row("stops at", ", ".join(stops) or "never (Ctrl-C saves and stops)")
    table.add_row("run dir", t.run_dir)
    Console(highlight=False).print(table)


def format_record(r: dict) -> str:
    """The log line of one metrics.jsonl record (train or valid)."""
    if r["kind"] == "train":
        return (
            f"update {r['update']:>6}  epoch {r['epoch']:>3}  loss {r['loss']:.3f}  ppl {r['ppl']:7.2f}  "
            f"lr {r['lr']:.2e}  {r['tgt_tokens_per_s']:7.0f} tgt tok/s  pad {r['padding']:.1%}  "
            f"{r['elapsed'] / 60:6.1f} min"
        )
    parts = [f"valid @ {r['update']:>6}  loss {r['loss']:.3f}  ppl {r['ppl']:.2f}"]
    if "bleu" in r:
        parts.append(f"BLEU {r['bleu']:.2f}  chrF {r['chrf']:.2f}")
    parts.append(f"({r['seconds']:.1f}s){'  *best*' if r.get('best') else ''}")
    return "  ".join(parts)


class Progress:
    """Rich progress bar on a terminal; plain log lines when stdout is a pipe or file."""

    def __init__(self, enabled: bool, total: Optional[int], start: int):
        self.enabled = enabled
        self.bar = None
        self.started = time.perf_counter()
        if enabled and sys.stdout.isatty():
            self.bar = RichProgress(
                TextColumn("[bold]train"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[info]}"),
                TimeRemainingColumn(),
                transient=False,
            )
            self.bar.start()
            self.task = self.bar.add_task("train", total=total, completed=start, info="")

    def advance(self, update: int) -> None:
        if self.bar is not None:
            self.bar.update(self.task, completed=update)

    def log(self, record: dict) -> None:
        if not self.enabled:
            return
        line = format_record(record)
        if self.bar is not None:
            self.bar.console.print(line)
            if record["kind"] == "train":
                self.bar.update(
                    self.task,
                    info=f"loss {record['loss']:.3f} lr {record['lr']:.1e} {record['tgt_tokens_per_s']:.0f} tok/s",
                )
        else:
            print(line, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


class Window:
    """The training figures between two log lines.

    An update whose losses are still on the device (``step.StepPlan.losses_on_device``) waits in ``pending``
    until ``step.settle`` reads them all at once and adds them with ``add_losses``.
    """

    def __init__(self):
        self.loss = self.nll = self.tokens = self.src = self.padded = 0.0
        self.updates, self.time = 0, time.perf_counter()
        self.pending: list = []  # (update, loss, nll): 0-dim device tensors

    def add(self, step, world_size: int) -> None:
        """Count one update (a ``step.Step``)."""
        if isinstance(step.loss, float):
            self.add_losses(step.loss, step.nll)
        else:
            self.pending.append((step.update, step.loss, step.nll))
        self.tokens += step.tgt_tokens
        self.src += step.src_tokens * world_size
        self.padded += step.padded * world_size
        self.updates += 1

    def add_losses(self, loss: float, nll: float) -> None:
        """Add summed losses read back from the device (or one update's)."""
        self.loss += loss
        self.nll += nll

    def take_pending(self) -> list:
        """The updates whose losses are still on the device, which the window forgets."""
        pending, self.pending = self.pending, []
        return pending

    def record(self, update: int, epoch: int, lr: float, elapsed: float) -> dict:
        """The metrics.jsonl record of the window; the next window starts now."""
        if self.pending:
            raise RuntimeError("the window's losses are still on the device: step.settle() it first")
        now = time.perf_counter()
        record = {
            "kind": "train",
            "update": update,
            "epoch": epoch,
            "loss": self.loss / self.tokens,
            "nll": self.nll / self.tokens,
            "ppl": math.exp(min(self.nll / self.tokens, 50)),
            "lr": lr,
            "tgt_tokens_per_s": self.tokens / (now - self.time),
            "padding": 1 - (self.tokens + self.src) / max(self.padded, 1),
            "batch_tokens": self.tokens / self.updates,
            "elapsed": elapsed,
        }
        self.__init__()
        self.time = now
        return record


def trim_metrics(path: Path, update: int) -> None:
    """Keep the records of updates <= ``update``, the resumed checkpoint's, in the metrics file ``path``.

    A killed run's later records, and a line cut by the kill, would otherwise mix with their replay.
    """
    if not path.is_file():
        return
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and record.get("update", 0) <= update:
            kept.append(line + "\n")
    atomic_write_text(path, "".join(kept))


def append_jsonl(path: Path, record: dict) -> None:
    """Append ``record`` to ``path`` as one JSON line."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")
        f.flush()
