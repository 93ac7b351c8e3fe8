"""The `mtkit` command line: thin Typer commands that parse arguments and call one typed function.

torch is imported lazily (inside commands that need it), so `mtkit --help` and `mtkit score` stay fast.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import List, Optional

import typer

from mtkit import __version__
from mtkit.errors import MtkitError
from mtkit.exits import Interrupted, OutputClosed, interrupted, plain_exits, quiet_broken_pipe
from mtkit.flags import OutputOptions, SamplingOptions, ServeLimits, check_flags, serve_limits

_SAMPLING, _OUTPUT, _LIMITS = SamplingOptions(), OutputOptions(), ServeLimits()  # the defaults of the flags below

app = typer.Typer(
    add_completion=True,
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    rich_markup_mode="rich",
    help="mtkit: prepare data, train, translate and score neural machine translation models.\n\n"
    "Example: [bold]mtkit prepare configs/multi30k-transformer.yaml && mtkit train configs/multi30k-transformer.yaml[/bold]",
)

SetOption = typer.Option(None, "--set", help="Override a config value before validation: --set training.lr=3e-4")


def _command(fn):
    """Register a command; its Ctrl-C and closed stdout reach main() as themselves, not as Typer's own exits."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        with plain_exits():
            return fn(*args, **kwargs)

    return app.command()(run)


def _version(value: bool):
    if value:
        typer.echo(f"mtkit {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
):
    pass


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
    from mtkit.training.launch import train_main

    train_main(config=config, overrides=set_ or [], resume=resume, force=force, gpus=gpus)


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
        help="chrf or bleu: the n-best hypothesis closest to the reference; top: the teacher's best.",
    ),
    beam_size: Optional[int] = typer.Option(None, "--beam-size", "-b", help="Default: the teacher's decoding section."),
    keep_original: bool = typer.Option(
        False, "--keep-original", help="Keep the references too: each source twice, with the teacher's and its own."
    ),
    chunk_size: Optional[int] = typer.Option(
        None, "--chunk-size", help="Sentences per chunk of the work folder, the most an interrupt loses (2000)."
    ),
    engine: str = typer.Option(
        "auto", "--engine", help="auto (CTranslate2 where it can run the teacher), torch or ctranslate2."
    ),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Sentences per batch."),
    device: Optional[str] = typer.Option(None, "--device"),
    dtype: Optional[str] = typer.Option(None, "--dtype"),
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
def translate(
    run: List[Path] = typer.Argument(..., help="Run directory or checkpoint file."),
    checkpoint: Optional[List[Path]] = typer.Option(None, "--checkpoint", help="Extra checkpoints to ensemble."),
    input: Optional[Path] = typer.Option(None, "--input", "-i", help="Source file (default: stdin)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Output file (default: stdout)."),
    beam_size: Optional[int] = typer.Option(None, "--beam-size", "-b"),
    length_penalty: Optional[float] = typer.Option(None, "--length-penalty"),
    max_len_a: Optional[float] = typer.Option(None, "--max-len-a"),
    max_len_b: Optional[int] = typer.Option(None, "--max-len-b"),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Sentences per batch."),
    batch_tokens: Optional[int] = typer.Option(
        None, "--batch-tokens", help="Also at most this many source tokens per batch (sentences x the longest)."
    ),
    nbest: Optional[int] = typer.Option(None, "--nbest"),
    device: Optional[str] = typer.Option(None, "--device"),
    dtype: Optional[str] = typer.Option(None, "--dtype"),
    threads: Optional[int] = typer.Option(None, "--threads"),
    stopping: Optional[str] = typer.Option(
        None, "--stopping", help="Beam search: first (OpenNMT-py), beam_full (fairseq) or exact; see decoding.stopping."
    ),
    shortlist: Optional[int] = typer.Option(
        None,
        "--shortlist",
        help="Score each sentence over a lexical shortlist "
        "with this many translations per source subword (0: whole vocabulary).",
    ),
    sampling: bool = typer.Option(False, "--sampling", help="Sample instead of beam search."),
    temperature: float = typer.Option(_SAMPLING.temperature, "--temperature"),
    top_k: int = typer.Option(_SAMPLING.top_k, "--top-k"),
    top_p: float = typer.Option(_SAMPLING.top_p, "--top-p"),
    seed: int = typer.Option(_SAMPLING.seed, "--seed", help="Seed for --sampling."),
    fmt: str = typer.Option(_OUTPUT.format, "--format", help="text or jsonl"),
    input_format: str = typer.Option(
        _OUTPUT.input_format,
        "--input-format",
        help='text; jsonl: one {"text", "prefix", "constraints", "avoid"} object per line (docs/decoding.md); '
        "html: one HTML fragment per line, its tags kept around the words they enclose (docs/documents.md).",
    ),
    target: Optional[str] = typer.Option(
        None, "--target", "-t", help="Target language of a multilingual model (jsonl lines may carry their own)."
    ),
    split_sentences: bool = typer.Option(
        True,
        "--split-sentences/--no-split-sentences",
        help="Cut each line into sentences, translate them, and join them with the line's own whitespace.",
    ),
    skip_bad_lines: bool = typer.Option(
        False, "--skip-bad-lines", help="jsonl input: a bad line gets an empty output line and a warning, not an error."
    ),
    alignments: bool = typer.Option(False, "--alignments", help="jsonl: include cross-attention weights."),
    plot_attention: Optional[Path] = typer.Option(
        None, "--plot-attention", help="Write an attention heatmap PNG per sentence here."
    ),
    engine: str = typer.Option(_OUTPUT.engine, "--engine", help="torch or ctranslate2"),
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="Say on stderr what computes: engine, device, threads, dtype and why."
    ),
):
    """Translate stdin (or --input) to stdout: one output line per input line, in order.

    Example: echo "A man is riding a bike." | mtkit translate runs/demo
    Example: echo '{"text": "A man is riding a bike.", "prefix": "Ein"}' | mtkit translate runs/demo --input-format jsonl
    Example: echo 'A <b>man</b> is riding a <i>red</i> bike.' | mtkit translate runs/demo --input-format html
    """
    from mtkit.inference.translate import translate_main

    translate_main(
        paths=list(run) + list(checkpoint or []),
        input=input,
        output=output,
        beam_size=beam_size,
        length_penalty=length_penalty,
        max_len_a=max_len_a,
        max_len_b=max_len_b,
        batch_size=batch_size,
        batch_tokens=batch_tokens,
        nbest=nbest,
        device=device,
        dtype=dtype,
        threads=threads,
        stopping=stopping,
        shortlist=shortlist,
        sampling=sampling,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        seed=seed,
        fmt=fmt,
        input_format=input_format,
        target=target,
        split_sentences=split_sentences,
        skip_bad_lines=skip_bad_lines,
        alignments=alignments,
        plot_attention=plot_attention,
        engine=engine,
        verbose=verbose,
    )


@_command
def translate_file(
    run: Path = typer.Argument(..., help="Run directory, checkpoint or export dir."),
    source: Path = typer.Argument(..., help="The document: .txt, .md, .html, .docx, .srt, .po, .xliff."),
    out: Path = typer.Option(..., "--out", "-o", help="Where the translated document goes (written whole)."),
    fmt: Optional[str] = typer.Option(None, "--format", help="The document's format (default: from its name)."),
    beam_size: Optional[int] = typer.Option(None, "--beam-size", "-b"),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Sentences per batch."),
    device: Optional[str] = typer.Option(None, "--device"),
    dtype: Optional[str] = typer.Option(None, "--dtype"),
    threads: Optional[int] = typer.Option(None, "--threads"),
    max_bytes: int = typer.Option(50 * 1024 * 1024, "--max-bytes", help="Refuse larger documents."),
    engine: str = typer.Option(_OUTPUT.engine, "--engine", help="torch or ctranslate2"),
):
    """Translate a document, keeping its structure and formatting: only its text changes (docs/documents.md).

    Example: mtkit translate-file runs/demo report.docx --out report.de.docx
    """
    from mtkit.inference.translate import translate_file_main

    translate_file_main(
        path=run,
        source=source,
        out=out,
        fmt=fmt,
        max_bytes=max_bytes,
        engine=engine,
        beam_size=beam_size,
        batch_size=batch_size,
        device=device,
        dtype=dtype,
        threads=threads,
    )


@_command
def score(
    refs: List[Path] = typer.Argument(..., help="One or more reference files."),
    hyps: Optional[List[Path]] = typer.Option(
        None,
        "--hyps",
        "-i",
        help="Hypotheses file (default or -: stdin); repeat to compare systems, the first the baseline.",
    ),
    metrics: List[str] = typer.Option(["bleu", "chrf", "ter"], "--metric", "-m", help="bleu, chrf, ter (repeatable)."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
    tokenize: Optional[str] = typer.Option(None, "--tokenize", help="sacreBLEU tokenizer for BLEU (default 13a)."),
    lowercase: bool = typer.Option(False, "--lowercase", "-lc"),
    paired_bs: bool = typer.Option(False, "--paired-bs", help="Paired bootstrap resampling test (with a 95% CI)."),
    paired_ar: bool = typer.Option(False, "--paired-ar", help="Paired approximate randomisation test."),
    paired_bs_n: Optional[int] = typer.Option(None, "--paired-bs-n", help="Bootstrap resamples (default 1000)."),
    paired_ar_n: Optional[int] = typer.Option(None, "--paired-ar-n", help="Randomisation trials (default 10000)."),
    seed: str = typer.Option(
        "12345", "--seed", envvar="SACREBLEU_SEED", help="Seed of the paired tests, as sacreBLEU's ('none': unseeded)."
    ),
):
    """Score hypotheses against references with sacreBLEU (BLEU, chrF, TER); compare systems with paired tests.

    Examples: mtkit translate runs/demo < test.en | mtkit score test.de
              mtkit score test.de -i base.de -i new.de --paired-bs
    """
    from mtkit.scoring.score import score_main

    score_main(
        refs=refs,
        hyps=hyps,
        metrics=metrics,
        json_out=json_out,
        tokenize=tokenize,
        lowercase=lowercase,
        paired_bs=paired_bs,
        paired_ar=paired_ar,
        paired_bs_n=paired_bs_n,
        paired_ar_n=paired_ar_n,
        seed=seed,
    )


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
def plot(run: Path = typer.Argument(..., help="Run directory.")):
    """Draw the training / validation curves of a run to RUN/curves.png.

    Example: mtkit plot runs/demo
    """
    from mtkit.plots import plot_curves

    typer.echo(plot_curves(run))


@_command
def export(
    run: Path = typer.Argument(..., help="Run directory or checkpoint file (the checkpoint translate would use)."),
    out: Path = typer.Option(
        ..., "--out", "-o", help="Directory to write the exported model to (--format argos: the package file)."
    ),
    fmt: str = typer.Option(
        _OUTPUT.export_format,
        "--format",
        help='ctranslate2 (needs the extra: pip install "mtkit\\[ct2]"), hf (a MarianMT directory for transformers) '
        "or argos (an Argos Translate / LibreTranslate package, .argosmodel; needs ctranslate2 too)",
    ),
    quantization: Optional[str] = typer.Option(
        None, "--quantization", "-q", help="int8, int16, float16, bfloat16 (or int8_float32, ...); default float32."
    ),
    source: Optional[str] = typer.Option(
        None, "--source", help="--format argos, a multilingual run with several sources: the package's source."
    ),
    target: Optional[str] = typer.Option(
        None, "--target", help="--format argos, a multilingual run: the package's target (one package per direction)."
    ),
    force: bool = typer.Option(False, "--force", help="Replace an earlier export in --out."),
):
    """Export a trained Transformer for CTranslate2, as a Hugging Face MarianMT directory, or as an Argos Translate
    package (which LibreTranslate serves), with its tokenizer.

    Examples: mtkit export runs/demo --out runs/demo-ct2 --quantization int8 && mtkit translate runs/demo-ct2
              mtkit export runs/demo --format hf --out runs/demo-hf
              mtkit export runs/demo --format argos --out en_de.argosmodel --quantization int8
    """
    export_format = check_flags(export_format=fmt).export_format
    if export_format != "argos" and (source is not None or target is not None):
        raise MtkitError("--source and --target are for --format argos (one package per direction)")
    if export_format == "hf":
        from mtkit.interop.marian_export import export_main as export_hf

        if quantization is not None:
            raise MtkitError("--quantization is for --format ctranslate2 and argos; --format hf writes float32 weights")
        export_hf(run=run, out=out, force=force)
        return
    if export_format == "argos":
        from mtkit.interop.argos_export import export_main as export_argos

        export_argos(run=run, out=out, quantization=quantization, force=force, source=source, target=target)
        return
    from mtkit.interop.ct2_export import export_main

    export_main(run=run, fmt=fmt, out=out, quantization=quantization, force=force)


@_command
def import_hf(
    hf_dir: Path = typer.Argument(..., help="A local MarianMT (OPUS-MT) directory written by save_pretrained."),
    out: Path = typer.Option(..., "--out", "-o", help="The run directory to write."),
    src_lang: Optional[str] = typer.Option(None, "--src-lang", help="Default: from an opus-mt-SRC-TGT name."),
    tgt_lang: Optional[str] = typer.Option(None, "--tgt-lang", help="Default: from an opus-mt-SRC-TGT name."),
    force: bool = typer.Option(False, "--force", help="Replace an earlier run directory in --out."),
):
    """Import a Hugging Face MarianMT model as an mtkit run directory (translate, serve, fine-tune with init_from).

    Example: mtkit import-hf opus-mt-en-de --out runs/opus-mt-en-de && echo "Hello." | mtkit translate runs/opus-mt-en-de
    """
    from mtkit.interop.marian_import import import_main

    import_main(hf_dir, out, src_lang=src_lang, tgt_lang=tgt_lang, force=force)


@_command
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
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (0.0.0.0: every interface)."),
    port: int = typer.Option(8000, "--port"),
    api_key: Optional[str] = typer.Option(
        None, "--api-key", envvar="MTKIT_API_KEY", help="Require this key (api_key field or X-API-Key header)."
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
    max_chars: int = typer.Option(_LIMITS.max_chars, "--max-chars", help="Characters per request; beyond: 413."),
    max_body_bytes: int = typer.Option(
        _LIMITS.max_body_bytes, "--max-body-bytes", help="Bytes per request body; beyond: 413."
    ),
    max_file_bytes: int = typer.Option(
        _LIMITS.max_file_bytes, "--max-file-bytes", help="Bytes per document sent to /translate_file; beyond: 413."
    ),
    beam_size: Optional[int] = typer.Option(None, "--beam-size", "-b"),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Sentences per batch."),
    device: Optional[str] = typer.Option(None, "--device"),
    dtype: Optional[str] = typer.Option(None, "--dtype"),
    threads: Optional[int] = typer.Option(None, "--threads"),
    engine: str = typer.Option(_OUTPUT.engine, "--engine", help="torch or ctranslate2"),
    access_log: bool = typer.Option(False, "--access-log", help="Log every request (default: /metrics only)."),
):
    """Serve models over HTTP: POST /v1/translate, LibreTranslate's /translate and /languages, /health, /metrics.

    Each request goes to the model of its language pair (or through a pivot language). Example:
    mtkit serve runs/en-de runs/de-en --port 8000  (needs the extra: pip install "mtkit\\[serve]")
    """
    limits = serve_limits(
        {
            "max_sentences": ("--max-sentences", max_sentences),
            "max_chars": ("--max-chars", max_chars),
            "max_body_bytes": ("--max-body-bytes", max_body_bytes),
            "max_file_bytes": ("--max-file-bytes", max_file_bytes),
            "queue_size": ("--queue-size", queue_size),
            "max_wait": ("--max-wait-ms", max_wait_ms),
            "max_delay": ("--max-delay-ms", max_delay_ms),
            "timeout": ("--timeout", timeout),
        },
        max_sentences=max_sentences,
        max_chars=max_chars,
        max_body_bytes=max_body_bytes,
        max_file_bytes=max_file_bytes,
        queue_size=queue_size,
        max_wait=max_wait_ms / 1000,
        max_delay=max_delay_ms / 1000,
        timeout=timeout,
    )
    try:
        from mtkit.serving.main import serve_main
    except ImportError as err:
        raise MtkitError(f'mtkit serve needs {err.name}: pip install "mtkit[serve]"') from None

    if max_models is not None and max_models < 1:
        raise MtkitError(f"--max-models {max_models}: keep at least one model in memory")
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
        overrides=dict(beam_size=beam_size, batch_size=batch_size, device=device, dtype=dtype, threads=threads),
        access_log=access_log,
    )


def main(argv: Optional[list[str]] = None) -> int:
    """The console script: run one command and turn every outcome into an exit code.

    Typer runs in its standalone mode, so a usage error (unknown command or option, missing argument, bad value)
    is a short usage message from Typer itself with exit code 2, whatever click Typer ships with.
    """
    try:
        app(args=argv, prog_name="mtkit")
    except SystemExit as exc:  # a finished command, --help, --version and usage errors all exit here
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except MtkitError as err:
        print(f"mtkit: error: {err}", file=sys.stderr)
        return err.exit_code
    except (KeyboardInterrupt, Interrupted):
        interrupted()
        return 130
    except (BrokenPipeError, OutputClosed):
        quiet_broken_pipe()
        return 0
    return 0
