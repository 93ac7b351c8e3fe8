"""Paired significance tests between systems, through sacreBLEU's ``PairedTest``. Never imports torch.

``mtkit score REF -i A -i B --paired-bs`` (or ``--paired-ar``) compares every system with the first one, the
baseline, and prints the numbers the ``sacrebleu REF -i A B --paired-bs`` command prints: each system's score,
with paired bootstrap resampling its bootstrap mean and 95% confidence interval, and the p-value of each other
system against the baseline. sacreBLEU seeds its random generators from the SACREBLEU_SEED environment variable;
``paired_test`` sets it to the chosen seed while the test runs.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence

from rich.console import Console
from rich.table import Table

from mtkit.errors import MtkitError

DEFAULT_N = {"bs": 1000, "ar": 10000}  # sacreBLEU's resamples (bootstrap) and trials (approximate randomisation)
DEFAULT_SEED = "12345"  # sacreBLEU's
TEST_NAMES = {"bs": "Paired bootstrap resampling", "ar": "Paired approximate randomisation"}


@dataclass(frozen=True)
class PairedOptions:
    """A paired test as ``check_paired_options`` accepted it."""

    kind: str  # "bs" (paired bootstrap resampling) or "ar" (approximate randomisation)
    n: int  # resamples or trials
    seed: str  # a positive integer, or "none" for sacreBLEU's unseeded generators


def check_paired_options(
    n_systems: int,
    paired_bs: bool = False,
    paired_ar: bool = False,
    paired_bs_n: Optional[int] = None,
    paired_ar_n: Optional[int] = None,
    seed: str = DEFAULT_SEED,
) -> Optional[PairedOptions]:
    """Check the test flags against the number of systems.

    Args:
        n_systems: the number of hypothesis files.
        paired_bs: paired bootstrap resampling is asked for.
        paired_ar: paired approximate randomisation is asked for.
        paired_bs_n: the resamples of ``paired_bs`` (None: 1000).
        paired_ar_n: the trials of ``paired_ar`` (None: 10000).
        seed: a positive integer, or "none" for sacreBLEU's unseeded generators.

    Returns:
        The test's options, or None when no test is asked for (one system).

    Raises:
        MtkitError: both tests, a count without its test or below 1, several systems without a test, a test with
            fewer than two systems, or a bad seed.
    """
    if paired_bs and paired_ar:
        raise MtkitError("give --paired-bs or --paired-ar, not both")
    kind = "bs" if paired_bs else "ar" if paired_ar else None
    for k, value in (("bs", paired_bs_n), ("ar", paired_ar_n)):
        if value is not None and kind != k:
            raise MtkitError(f"--paired-{k}-n is for --paired-{k}; add --paired-{k} or drop it")
        if value is not None and value < 1:
            raise MtkitError(f"--paired-{k}-n must be at least 1 (got {value})")
    if kind is None:
        if n_systems > 1:
            raise MtkitError(f"{n_systems} systems given with -i; compare them with --paired-bs or --paired-ar")
        return None
    if n_systems < 2:
        raise MtkitError(f"--paired-{kind} compares systems: give the baseline and at least one more with -i")
    n = paired_bs_n if kind == "bs" else paired_ar_n
    return PairedOptions(kind, n or DEFAULT_N[kind], _check_seed(seed))


def _check_seed(seed) -> str:
    text = str(seed).strip()
    if text.lower() == "none":
        return "none"
    if text.isdigit() and int(text) > 0:  # sacreBLEU leaves its tests unseeded for seed 0
        return str(int(text))
    raise MtkitError(f"--seed must be a positive integer, or 'none' for unseeded tests (got {seed!r})")


@contextlib.contextmanager
def _sacrebleu_seed(seed: str):
    old = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = seed
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("SACREBLEU_SEED", None)
        else:
            os.environ["SACREBLEU_SEED"] = old


def paired_test(systems: Sequence[tuple[str, Sequence[str]]], metrics: Mapping[str, object], options: PairedOptions):
    """Run the paired test: every system against the first, the baseline.

    SACREBLEU_SEED is set to the test's seed while it runs.

    Args:
        systems: (name, hypotheses) pairs, the baseline first.
        metrics: mtkit's metric names -> sacreBLEU metric objects built with the references.
        options: the test, from ``check_paired_options``.

    Returns:
        {"test", "n", "seed", "metrics": {name: {"name", "signature"}}, "systems": [{"file", "baseline",
        name: {"score", "mean", "ci", "p_value"}}]}; mean and ci are None for approximate randomisation, p_value
        for the baseline.
    """
    from sacrebleu.significance import PairedTest

    with _sacrebleu_seed(options.seed):
        test = PairedTest(
            [(name, list(hyps)) for name, hyps in systems],
            dict(metrics),
            references=None,  # the metrics hold the references
            test_type=options.kind,
            n_samples=options.n,
        )
        signatures, table = test()
    labels = [label for label in table if label != "System"]  # sacreBLEU's names (BLEU, chrF2, TER), in order
    out_systems = []
    for i, (name, _) in enumerate(systems):
        row = {"file": name, "baseline": i == 0}
        for metric, label in zip(metrics, labels):
            result = table[label][i]
            row[metric] = {key: _number(getattr(result, key)) for key in ("score", "mean", "ci", "p_value")}
        out_systems.append(row)
    return {
        "test": f"paired-{options.kind}",
        "n": options.n,
        "seed": options.seed,
        "metrics": {m: {"name": label, "signature": signatures[label].format()} for m, label in zip(metrics, labels)},
        "systems": out_systems,
    }


def _number(value) -> Optional[float]:
    return None if value is None else float(value)


def print_table(result: dict, width: int, n_lines: int, n_refs: int) -> None:
    """Print ``paired_test``'s result: the test, then one row per system with each score (and the bootstrap mean
    ± 95% CI) and the p-value against the baseline, then the line count and the signatures.

    Args:
        result: what ``paired_test`` returned.
        width: the decimals of the scores.
        n_lines: the number of lines scored.
        n_refs: the number of reference streams.
    """
    bootstrap = result["test"] == "paired-bs"
    what = "resamples" if bootstrap else "trials"
    table = Table()
    table.add_column("system", overflow="fold")
    for m in result["metrics"].values():
        table.add_column(m["name"] + (" (μ ± 95% CI)" if bootstrap else ""), justify="right")
    for row in result["systems"]:
        cells = []
        for metric in result["metrics"]:
            r = row[metric]
            text = f"{r['score']:.{width}f}"
            if r["mean"] is not None:
                text += f" ({r['mean']:.{width}f} ± {r['ci']:.{width}f})"
            if r["p_value"] is not None:
                text += f"\np = {r['p_value']:.4f}" + ("*" if r["p_value"] <= 0.05 else " ")
            cells.append(text)
        table.add_row(("baseline: " if row["baseline"] else "") + row["file"], *cells)
    console = Console(highlight=False)
    console.print(f"{TEST_NAMES[result['test'][-2:]]}, {result['n']} {what}, seed {result['seed']}", soft_wrap=True)
    console.print(table)
    refs = f"{n_refs} reference{'s' if n_refs != 1 else ''}"
    console.print(f"{n_lines} lines, {refs}; p: against the baseline, * where p <= 0.05", soft_wrap=True)
    for m in result["metrics"].values():
        console.print(f"{m['name']}: {m['signature']}", soft_wrap=True)
