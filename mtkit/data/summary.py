"""The table ``mtkit prepare`` prints when a data dir is built."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console
from rich.table import Table


def print_prepare_summary(manifest: dict, out_dir: Path, seconds: float):
    """The table `mtkit prepare` ends with: pairs read, kept and filtered, and tokens, per split."""
    vocab = manifest["vocab_size"]
    kind = "joint" if manifest["joint_vocab"] else "separate"
    table = Table(
        title=f"{out_dir} ({manifest['src_lang']}-{manifest['tgt_lang']})",
        caption=f"{kind} vocab {vocab['src']}/{vocab['tgt']}, built in {seconds:.1f}s",
    )
    for column in ("split", "read", "kept", "filtered", "bad UTF-8", "src tokens", "tgt tokens"):
        table.add_column(column, justify="left" if column == "split" else "right", no_wrap=True)
    reasons = []
    for split, entry in manifest["splits"].items():
        filtered = {r: n for r, n in entry["filtered"].items() if n}
        reasons += [f"{split} {r}: {n:,}" for r, n in filtered.items()]
        table.add_row(
            split,
            f"{entry['pairs_read']:,}",
            f"{entry['pairs_kept']:,}",
            f"{sum(filtered.values()):,}",
            f"{entry['bad_lines_skipped']:,}",
            f"{entry['src_tokens']:,}",
            f"{entry['tgt_tokens']:,}",
        )
    console = Console(highlight=False)
    console.print(table)
    if reasons:
        console.print("filtered: " + ", ".join(reasons))
    train = manifest["splits"]["train"]
    copies = train["files"].get("samples", [])
    if copies:
        mean = {side: sum(c[f"{side}_tokens"] for c in copies) / len(copies) for side in ("src", "tgt")}
        console.print(
            f"sampled segmentations: {len(copies)} copies of train, "
            + ", ".join(
                f"{side} tokens {mean[side]:,.0f} on average ({mean[side] / max(train[f'{side}_tokens'], 1) - 1:+.0%})"
                for side in ("src", "tgt")
            )
        )
