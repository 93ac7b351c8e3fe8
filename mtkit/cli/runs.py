"""The commands that take a trained run further: average its checkpoints, plot its curves, export it, import one
from Hugging Face and extend an import's vocabulary, serve runs over HTTP."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from mtkit.cli.base import (
    _LIMITS,
    _OUTPUT,
    DeviceOption,
    DtypeOption,
    _command,
    algorithm_option,
    choices,
    engine_option,
    with_algorithm_flags,
)
from mtkit.errors import MtkitError
from mtkit.flags import check_flags, serve_limits
from mtkit.inference import plain_fields
from mtkit.interop.ct2_export import QUANTIZATIONS


@_command
def average(
    run: Path = typer.Argument(..., help="Run directory."),
    last: int = typer.Option(5, "--last", help="Average the last N checkpoints."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Default: RUN/checkpoints/average.safetensors"),
):
    """Average the weights of the last N checkpoints of a run.

    Example: mtkit average runs/multi30k-transformer --last 5
    """
    from mtkit.checkpoint import average_main

    average_main(run, last=last, output=output)


@_command
def merge_lora(
    run: Path = typer.Argument(..., help="A training.lora run directory or checkpoint."),
    output: Path = typer.Option(..., "--output", "-o", help="The new run directory."),
    force: bool = typer.Option(False, "--force", help="Replace an earlier run directory at --output."),
):
    """Merge a LoRA run's adapters into its base weights: a run directory that needs neither PEFT nor the base.

    Example: mtkit merge-lora runs/opus-mt-en-de-lora --output runs/opus-mt-en-de-merged
    """
    from mtkit.training.lora_merge import merge_main

    merge_main(run, output, force=force)


@_command
def calibrate(
    run: Path = typer.Argument(..., help="Run directory."),
    split: str = typer.Option("valid", "--split", help="The data dir's split to calibrate on (not train)."),
    max_sentences: Optional[int] = typer.Option(None, "--max-sentences", help="Only its first N sentences."),
    samples: int = typer.Option(
        0,
        "--samples",
        help="Also measure each translation's agreement with this many epsilon samples of the model (0: none); "
        "every later translation with scores then draws them too.",
    ),
    device: Optional[str] = DeviceOption,
    threads: Optional[int] = typer.Option(None, "--threads"),
):
    """Fit the run's translation confidence on its validation split: RUN/calibration.json (docs/decoding.md).

    Example: mtkit calibrate runs/multi30k-transformer --samples 8
    """
    from mtkit.inference.calibrate import calibrate_main

    calibrate_main(run=run, split=split, max_sentences=max_sentences, samples=samples, device=device, threads=threads)


@_command
def plot(run: Path = typer.Argument(..., help="Run directory.")):
    """Draw the training / validation curves of a run to RUN/curves.png.

    Example: mtkit plot runs/demo
    """
    from mtkit.plots import plot_curves

    typer.echo(plot_curves(run))


@_command
def export(
    run: Path = typer.Argument(..., help="Run directory or checkpoint file (the checkpoint translate would use)."),
    output: Path = typer.Option(
        ..., "--output", "-o", help="Directory to write the exported model to (--format argos: the package file)."
    ),
    fmt: str = typer.Option(
        _OUTPUT.export_format,
        "--format",
        help=choices(
            plain_fields.OUTPUT["export_format"]["choices"],
            {
                "ctranslate2": 'needs the extra: pip install "mtkit\\[ct2]"',
                "hf": "a MarianMT directory for transformers",
                "argos": "an Argos Translate / LibreTranslate package, .argosmodel; needs ctranslate2 too",
                "web": 'a static web page translating in the browser; needs the extra: pip install "mtkit\\[web]"',
            },
        )
        + ".",
    ),
    quantization: Optional[str] = typer.Option(
        None,
        "--quantization",
        "-q",
        help=f"--format ctranslate2 and argos: {choices(QUANTIZATIONS)}; --format web: float32 or int8 (default: "
        "float32).",
        show_default=False,
    ),
    source: Optional[str] = typer.Option(
        None, "--source", help="--format argos and web, a multilingual run with several sources: the source."
    ),
    target: Optional[str] = typer.Option(
        None, "--target", help="--format argos and web, a multilingual run: the target (one export per direction)."
    ),
    npm_dir: Optional[Path] = typer.Option(
        None,
        "--npm-dir",
        help="--format web: a folder holding the npm tarballs of transformers.js and onnxruntime-web, instead of "
        "the npm registry (docs/browser.md).",
    ),
    force: bool = typer.Option(False, "--force", help="Replace an earlier export in --output."),
):
    """Export a trained Transformer for CTranslate2, as a Hugging Face MarianMT directory, as an Argos Translate
    package (which LibreTranslate serves), or as a web page that translates in the browser, with its tokenizer.

    Examples: mtkit export runs/demo --output runs/demo-ct2 --quantization int8 && mtkit translate runs/demo-ct2
              mtkit export runs/demo --format hf --output runs/demo-hf
              mtkit export runs/demo --format argos --output en_de.argosmodel --quantization int8
              mtkit export runs/demo --format web --output demo-web && mtkit serve --web demo-web
    """
    export_format = check_flags(export_format=fmt).export_format
    if export_format not in ("argos", "web") and (source is not None or target is not None):
        raise MtkitError("--source and --target are for --format argos and web (one export per direction)")
    if export_format != "web" and npm_dir is not None:
        raise MtkitError("--npm-dir is for --format web")
    if export_format == "web":
        from mtkit.interop.web_export import export_main as export_web

        export_web(
            run=run, out=output, quantization=quantization, force=force, source=source, target=target, npm_dir=npm_dir
        )
        return
    if export_format == "hf":
        from mtkit.interop.marian_export import export_main as export_hf

        if quantization is not None:
            raise MtkitError("--quantization is for --format ctranslate2 and argos; --format hf writes float32 weights")
        export_hf(run=run, out=output, force=force)
        return
    if export_format == "argos":
        from mtkit.interop.argos_export import export_main as export_argos

        export_argos(run=run, out=output, quantization=quantization, force=force, source=source, target=target)
        return
    from mtkit.interop.ct2_export import export_main

    export_main(run=run, fmt=fmt, out=output, quantization=quantization, force=force)


@_command
def import_hf(
    hf_dir: Path = typer.Argument(
        ..., help="A local model directory written by save_pretrained: OPUS-MT (MarianMT), M2M-100 or NLLB-200."
    ),
    output: Path = typer.Option(..., "--output", "-o", help="The run directory to write."),
    source: Optional[str] = typer.Option(
        None, "--source", help="OPUS-MT: the source language (default: from an opus-mt-SRC-TGT name)."
    ),
    target: Optional[str] = typer.Option(
        None, "--target", help="OPUS-MT: the target language (default: from an opus-mt-SRC-TGT name)."
    ),
    force: bool = typer.Option(False, "--force", help="Replace an earlier run directory in --output."),
):
    """Import a Hugging Face OPUS-MT (Marian), M2M-100 or NLLB-200 model as an mtkit run directory (translate,
    serve, fine-tune with init_from). M2M-100 and NLLB-200 read their languages per translation (mtkit translate
    --source, --target).

    Example: mtkit import-hf opus-mt-en-de --output runs/opus-mt-en-de
             && echo "Hello." | mtkit translate runs/opus-mt-en-de
    """
    from mtkit.interop.marian_import import import_main

    import_main(hf_dir, output, src_lang=source, tgt_lang=target, force=force)


@_command
def extend_vocab(
    run: Path = typer.Argument(..., help="A run directory made by mtkit import-hf (OPUS-MT, M2M-100, NLLB-200)."),
    add_tokens: Optional[Path] = typer.Option(
        None, "--add-tokens", help="A UTF-8 file of new subwords, one a line (▁ where one starts a word)."
    ),
    add_language: Optional[List[str]] = typer.Option(
        None, "--add-language", help="A new language code, as the model writes its own (xxx_Latn); repeatable."
    ),
    output: Optional[Path] = typer.Option(
        None, "--output", "-o", help="The new run directory (default: RUN-extended); never RUN itself."
    ),
):
    """Add subwords and language codes to an imported model's vocabulary, as a new run directory.

    The new rows are the mean of the rows of the pieces that spelled each subword (of the model's language codes,
    for a code); old ids keep theirs. Example: mtkit extend-vocab runs/nllb-200-600M --add-tokens terms.txt
    --add-language xxx_Latn --output runs/nllb-200-600M-xxx
    """
    from mtkit.interop.extend_vocab import extend_main

    extend_main(run, out=output, tokens_file=add_tokens, languages=list(add_language or []))


@_command
@with_algorithm_flags
def serve(
    runs: Optional[List[Path]] = typer.Argument(
        None, help="Run directories, checkpoint files or CTranslate2 exports (one model each).", show_default=False
    ),
    models: Optional[Path] = typer.Option(
        None, "--models", help="A YAML list of models: path, and optionally name, languages, engine, decoding."
    ),
    max_models: Optional[int] = typer.Option(
        None, "--max-models", help="Models in memory at once; the least recently used is unloaded (default: all)."
    ),
    preload: bool = typer.Option(False, "--preload", help="Load the models at start, not on first use."),
    parallel_models: int = typer.Option(
        1,
        "--parallel-models",
        help="Models that may translate at once, each on a thread of its own and its share of the cores.",
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (0.0.0.0: every interface)."),
    port: int = typer.Option(8000, "--port"),
    api_key: Optional[str] = typer.Option(
        None,
        "--api-key",
        envvar="MTKIT_API_KEY",
        help="Require this key (api_key field, X-API-Key header, or DeepL's DeepL-Auth-Key).",
    ),
    cors_origin: Optional[List[str]] = typer.Option(
        None, "--cors-origin", help="Allow browsers on this origin (repeatable; default: no CORS)."
    ),
    max_wait_ms: float = typer.Option(
        _LIMITS.max_wait * 1000,
        "--max-wait-ms",
        help="Gather a batch as large as the last while each next sentence comes within this many ms.",
    ),
    max_delay_ms: float = typer.Option(
        _LIMITS.max_delay * 1000, "--max-delay-ms", help="Hold a batch back at most this long in all."
    ),
    queue_size: int = typer.Option(_LIMITS.queue_size, "--queue-size", help="Sentences that may wait; beyond: 503."),
    timeout: float = typer.Option(
        _LIMITS.timeout, "--timeout", help="Seconds a request may wait for its translations; then 504."
    ),
    max_sentences: int = typer.Option(
        _LIMITS.max_sentences, "--max-sentences", help="Sentences per request; beyond: 413."
    ),
    max_hypotheses: int = typer.Option(
        _LIMITS.max_hypotheses,
        "--max-hypotheses",
        help="Hypotheses a request may ask per sentence (nbest, samples, MBR references); beyond: 422.",
    ),
    max_chars: int = typer.Option(_LIMITS.max_chars, "--max-chars", help="Characters per request; beyond: 413."),
    max_body_bytes: int = typer.Option(
        _LIMITS.max_body_bytes, "--max-body-bytes", help="Bytes per request body; beyond: 413."
    ),
    max_file_bytes: int = typer.Option(
        _LIMITS.max_file_bytes, "--max-file-bytes", help="Bytes per document sent to /translate_file; beyond: 413."
    ),
    char_limit: Optional[int] = typer.Option(
        None, "--char-limit", help="Characters DeepL's routes translate in all; beyond: 456 (default: no limit)."
    ),
    glossary_dir: Optional[Path] = typer.Option(
        None, "--glossary-dir", help="Keep the glossaries in this folder, across restarts (default: in memory)."
    ),
    algorithm: Optional[str] = algorithm_option("each model's decoding.algorithm"),
    beam_size: Optional[int] = typer.Option(None, "--beam-size", "-b"),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Sentences per batch."),
    device: Optional[str] = DeviceOption,
    dtype: Optional[str] = DtypeOption,
    threads: Optional[int] = typer.Option(None, "--threads"),
    engine: str = engine_option(),
    access_log: bool = typer.Option(False, "--access-log", help="Log every request (default: /metrics only)."),
    qe_model: Optional[str] = typer.Option(
        None, "--qe-model", help="CometKiwi model: each scored hypothesis's qe (docs/evaluation.md)."
    ),
    rerank: Optional[str] = typer.Option(None, "--rerank", help="qe: order each line's hypotheses by --qe-model's qe."),
    web: Optional[Path] = typer.Option(
        None,
        "--web",
        help="Serve a page made by mtkit export --format web instead of models, cross-origin isolated so that it "
        "translates on several threads (docs/browser.md).",
    ),
    **algorithm_options,
):
    """Serve models over HTTP: POST /v1/translate, LibreTranslate's /translate and /languages, DeepL's API v2 (its
    clients take a server_url), /health, /metrics.

    Each request goes to the model of its language pair (or through a pivot language); GET / is a web page over the
    same routes. Example: mtkit serve runs/en-de runs/de-en --port 8000, then open http://127.0.0.1:8000/ (needs
    the extra: pip install "mtkit\\[serve]"). mtkit serve --web DIR serves an exported web page instead.
    """
    if web is not None:
        if runs or models is not None:
            raise MtkitError("--web serves an exported web page alone; leave out the runs and --models")
        from mtkit.serving.web_site import serve_site

        serve_site(web, host, port)
        return
    limits = serve_limits(
        {
            "max_sentences": ("--max-sentences", max_sentences),
            "max_hypotheses": ("--max-hypotheses", max_hypotheses),
            "max_chars": ("--max-chars", max_chars),
            "max_body_bytes": ("--max-body-bytes", max_body_bytes),
            "max_file_bytes": ("--max-file-bytes", max_file_bytes),
            "queue_size": ("--queue-size", queue_size),
            "max_wait": ("--max-wait-ms", max_wait_ms),
            "max_delay": ("--max-delay-ms", max_delay_ms),
            "timeout": ("--timeout", timeout),
            "char_limit": ("--char-limit", char_limit),
        },
        max_sentences=max_sentences,
        max_hypotheses=max_hypotheses,
        max_chars=max_chars,
        max_body_bytes=max_body_bytes,
        max_file_bytes=max_file_bytes,
        queue_size=queue_size,
        max_wait=max_wait_ms / 1000,
        max_delay=max_delay_ms / 1000,
        timeout=timeout,
        char_limit=char_limit,
    )
    try:
        from mtkit.serving.main import serve_main
    except ImportError as err:
        raise MtkitError(f'mtkit serve needs {err.name}: pip install "mtkit[serve]"') from None

    if max_models is not None and max_models < 1:
        raise MtkitError(f"--max-models {max_models}: keep at least one model in memory")
    if parallel_models < 1:
        raise MtkitError(f"--parallel-models {parallel_models}: give at least 1")
    serve_main(
        list(runs or []),
        models_file=models,
        max_models=max_models,
        preload=preload,
        host=host,
        port=port,
        api_key=api_key,
        cors_origins=list(cors_origin or []),
        limits=limits,
        engine=engine,
        overrides=dict(
            algorithm=algorithm,
            beam_size=beam_size,
            batch_size=batch_size,
            device=device,
            dtype=dtype,
            threads=threads,
            qe_model=qe_model,
            rerank=rerank,
            **algorithm_options,
        ),
        access_log=access_log,
        parallel=parallel_models,
        glossary_dir=glossary_dir,
    )
