"""The commands that build a model: prepare (the data), clean (a noisy corpus), train, distill (a teacher's
translations as data), backtranslate (monolingual text as a synthetic parallel corpus)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from mtkit.cli.base import (
    DeviceOption,
    DtypeOption,
    SetOption,
    _command,
    algorithm_option,
    choices,
    engine_option,
    with_algorithm_flags,
)
from mtkit.data.selection import SELECTIONS
from mtkit.inference import plain_fields


@_command
def prepare(
    config: Path = typer.Argument(..., help="Experiment YAML config (its data section is used)."),
    set_: Optional[List[str]] = SetOption,
    force: bool = typer.Option(False, "--force", help="Rebuild even if the inputs are unchanged."),
):
    """Clean parallel text, train SentencePiece and write binarised token arrays.

    Example: mtkit prepare configs/multi30k-transformer.yaml
    """
    from mtkit.config import load
    from mtkit.data.prepare import prepare as run_prepare

    cfg = load(config, set_ or [])
    run_prepare(cfg.data, force=force, init_from=cfg.model.init_from)


@_command
def clean(
    in_src: Path = typer.Argument(..., help="Source side: one sentence a line, plain or .gz (corpus.en)."),
    in_tgt: Path = typer.Argument(..., help="Target side, line-aligned with IN_SRC (corpus.de)."),
    output: Path = typer.Option(
        ..., "--output", "-o", help="Folder for the kept pairs (same file names) and report.json."
    ),
    filters: Optional[str] = typer.Option(
        None, "--filters", help="Comma-separated filter names (default: each that needs no model; docs/data.md)."
    ),
    option: Optional[List[str]] = typer.Option(
        None, "--option", help="A filter's option: --option language.min_letters=20 (repeatable)."
    ),
    source: Optional[str] = typer.Option(None, "--source", help="IN_SRC's language (default: its last suffix)."),
    target: Optional[str] = typer.Option(None, "--target", help="IN_TGT's language (default: its last suffix)."),
    skip_bad_lines: bool = typer.Option(False, "--skip-bad-lines", help="Drop pairs with invalid UTF-8."),
):
    """Filter a noisy parallel corpus: wrong-language, copied, repeated, duplicate pairs... (docs/data.md).

    Example: mtkit clean crawl.en.gz crawl.de.gz --output clean/ --filters language,copy,dedup
    """
    from mtkit.data.clean import clean as run_clean
    from mtkit.data.clean import parse_filters

    spec = parse_filters(filters, option or [])
    run_clean(in_src, in_tgt, output, src_lang=source, tgt_lang=target, filters=spec, skip_bad_lines=skip_bad_lines)


@_command
def train(
    config: Optional[Path] = typer.Argument(None, help="Experiment YAML config (not needed with --resume)."),
    set_: Optional[List[str]] = SetOption,
    resume: Optional[Path] = typer.Option(None, "--resume", help="Continue the run in this run directory."),
    force: bool = typer.Option(False, "--force", help="With --resume: accept a config that differs from the run's."),
    gpus: int = typer.Option(0, "--gpus", help="Launch this many processes on this machine with torchrun (DDP)."),
):
    """Train a model on the data `mtkit prepare` wrote; checkpoints land in training.run_dir.

    Examples: mtkit train configs/multi30k-transformer.yaml --set training.max_minutes=20
              mtkit train --resume runs/multi30k-transformer
    """
    import os

    from mtkit.training.launch import train_main

    cfg = train_main(config=config, overrides=set_ or [], resume=resume, force=force, gpus=gpus)
    if cfg.training.calibrate and "LOCAL_RANK" not in os.environ:  # once, by the launching process
        from mtkit.inference.calibrate import calibrate_main

        calibrate_main(run=Path(cfg.training.run_dir))


@_command
def distill(
    teachers: List[Path] = typer.Argument(
        ..., help="Teacher: a run dir, checkpoint or CTranslate2 export; several run dirs or checkpoints: an ensemble."
    ),
    config: Path = typer.Option(..., "--config", "-c", help="The student's config: its data section is distilled."),
    set_: Optional[List[str]] = SetOption,
    select: str = typer.Option(
        "chrf",
        "--select",
        help=choices(
            SELECTIONS,
            {
                "chrf": "the n-best hypothesis closest to the reference by chrF",
                "bleu": "the same by BLEU",
                "top": "the teacher's best",
                "mbr": "the one closest to the others, minimum Bayes risk by chrF",
            },
        )
        + ".",
    ),
    beam_size: Optional[int] = typer.Option(None, "--beam-size", "-b", help="Default: the teacher's decoding section."),
    keep_original: bool = typer.Option(
        False, "--keep-original", help="Keep the references too: each source twice, with the teacher's and its own."
    ),
    chunk_size: Optional[int] = typer.Option(
        None, "--chunk-size", help="Sentences per chunk of the work folder, the most an interrupt loses (2000)."
    ),
    engine: str = engine_option("auto", auto="CTranslate2 where it can run the teacher, converted on the fly"),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Sentences per batch."),
    device: Optional[str] = DeviceOption,
    dtype: Optional[str] = DtypeOption,
    threads: Optional[int] = typer.Option(None, "--threads"),
):
    """Translate the student's training split with a teacher into the student's data dir (docs/distillation.md).

    Example: mtkit distill runs/multi30k-transformer --config configs/multi30k-student.yaml
             && mtkit train configs/multi30k-student.yaml
    """
    from mtkit.inference.teacher import distill_main

    distill_main(
        teachers,
        config,
        set_ or [],
        select=select,
        chunk_size=chunk_size,
        keep_original=keep_original,
        engine=engine,
        beam_size=beam_size,
        batch_size=batch_size,
        device=device,
        dtype=dtype,
        threads=threads,
    )


@_command
@with_algorithm_flags
def backtranslate(
    run: Path = typer.Argument(..., help="The model translating MONO's language (de->en for more en->de data)."),
    mono: Path = typer.Argument(..., help="Monolingual text in RUN's source language, one sentence a line (or .gz)."),
    output: Path = typer.Option(
        ..., "--output", "-o", help="Folder of the corpus: bt.SRC (synthetic), bt.TGT (MONO's lines), report.json."
    ),
    tag: bool = typer.Option(False, "--tag", help="Tagged back-translation: each synthetic line starts with a tag."),
    tag_token: Optional[str] = typer.Option(
        None, "--tag-token", help="The tag (implies --tag; default <BT>); declare it in data.user_symbols."
    ),
    algorithm: Optional[str] = algorithm_option(plain_fields.DECODING["algorithm"]["default"]),
    beam_size: Optional[int] = typer.Option(None, "--beam-size", "-b", help="Default: RUN's decoding section."),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Sentences per batch."),
    batch_tokens: Optional[int] = typer.Option(
        None, "--batch-tokens", help="Also at most this many source tokens per batch (sentences x the longest)."
    ),
    chunk_size: Optional[int] = typer.Option(
        None, "--chunk-size", help="Sentences per chunk of the work folder, the most an interrupt loses (2000)."
    ),
    skip_bad_lines: bool = typer.Option(False, "--skip-bad-lines", help="Drop MONO's lines of invalid UTF-8."),
    engine: str = engine_option("auto", auto="CTranslate2 where it can run RUN and the algorithm does not draw"),
    device: Optional[str] = DeviceOption,
    dtype: Optional[str] = DtypeOption,
    threads: Optional[int] = typer.Option(None, "--threads"),
    **algorithm_options,
):
    """Translate monolingual text into a synthetic parallel corpus for the reverse direction (docs/data.md).

    Example: mtkit backtranslate runs/multi30k-de-en mono.de.gz --output work/bt --tag
    """
    from mtkit.data.backtranslate import DEFAULT_TAG
    from mtkit.inference.teacher import backtranslate_main

    backtranslate_main(
        run,
        mono,
        output,
        tag=tag_token if tag_token is not None else (DEFAULT_TAG if tag else None),
        chunk_size=chunk_size,
        skip_bad_lines=skip_bad_lines,
        engine=engine,
        algorithm=algorithm,
        beam_size=beam_size,
        batch_size=batch_size,
        batch_tokens=batch_tokens,
        device=device,
        dtype=dtype,
        threads=threads,
        **algorithm_options,
    )
