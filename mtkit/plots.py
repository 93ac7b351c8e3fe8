"""Pictures: training/validation curves of a run, and attention heatmaps (matplotlib, Agg backend)."""

from __future__ import annotations

import io
import json
from pathlib import Path

from mtkit.errors import MtkitError
from mtkit.files import atomic_write_bytes

MAX_LABELS = 80  # attention heatmaps label each subword up to this many per axis (positions beyond)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    atomic_write_bytes(path, buf.getvalue())


def read_metrics(run_dir: Path) -> tuple[list[dict], list[dict]]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise MtkitError(f"{run_dir}: no metrics.jsonl; is this a run directory of mtkit train?")
    train, valid = {}, {}
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a crash
        (train if r.get("kind") == "train" else valid)[r["update"]] = r  # a resumed run overwrites its replays
    return [train[k] for k in sorted(train)], [valid[k] for k in sorted(valid)]


def plot_curves(run_dir: Path) -> Path:
    """Write RUN/curves.png (loss per update, validation BLEU/chrF) and return its path."""
    train, valid = read_metrics(run_dir)
    plt = _pyplot()
    fig, (ax_loss, ax_bleu) = plt.subplots(1, 2, figsize=(11, 4))
    if train:
        ax_loss.plot([r["update"] for r in train], [r["loss"] for r in train], label="train loss (label-smoothed)")
    if valid:
        ax_loss.plot([r["update"] for r in valid], [r["loss"] for r in valid], "o-", label="valid loss")
    ax_loss.set_xlabel("update")
    ax_loss.set_ylabel("loss per target token")
    ax_loss.legend()
    ax_loss.grid(alpha=0.3)
    scored = [r for r in valid if "bleu" in r]
    if scored:
        ax_bleu.plot([r["update"] for r in scored], [r["bleu"] for r in scored], "o-", label="valid BLEU")
        ax_bleu.plot([r["update"] for r in scored], [r["chrf"] for r in scored], "s--", label="valid chrF")
        ax_bleu.legend()
    ax_bleu.set_xlabel("update")
    ax_bleu.set_ylabel("score")
    ax_bleu.grid(alpha=0.3)
    fig.suptitle(f"mtkit run {Path(run_dir).name}")
    out = Path(run_dir) / "curves.png"
    _save(fig, out)
    plt.close(fig)
    return out


def plot_attention(weights, src_tokens: list[str], tgt_tokens: list[str], path: Path, title: str = "") -> Path:
    """weights (tgt_len, src_len) -> heatmap PNG: source pieces on x, target pieces on y."""
    plt = _pyplot()
    w = weights[: len(tgt_tokens), : len(src_tokens)]
    # a readable size for a sentence, capped so a 1000-subword line still draws in a moment (40 in = 4400 px)
    fig, ax = plt.subplots(
        figsize=(min(40, max(4, 0.45 * len(src_tokens) + 2)), min(40, max(3, 0.4 * len(tgt_tokens) + 1.5)))
    )
    im = ax.imshow(w, cmap="viridis", aspect="auto", vmin=0.0)
    if len(src_tokens) <= MAX_LABELS:
        ax.set_xticks(range(len(src_tokens)), src_tokens, rotation=60, ha="right", fontsize=9)
    if len(tgt_tokens) <= MAX_LABELS:
        ax.set_yticks(range(len(tgt_tokens)), tgt_tokens, fontsize=9)
    ax.set_xlabel("source")
    ax.set_ylabel("target")
    if title:
        ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.03)
    _save(fig, Path(path))
    plt.close(fig)
    return Path(path)
