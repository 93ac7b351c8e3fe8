"""The commands that translate and score: translate (lines), translate-file (documents), score."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from mtkit.cli.base import (
    _OUTPUT,
    DeviceOption,
    DtypeOption,
    _command,
    algorithm_option,
    choices,
    engine_option,
    with_algorithm_flags,
)
from mtkit.documents.formats import FORMATS
from mtkit.inference import plain_fields

_DECODING, _FLAGS = plain_fields.DECODING, plain_fields.OUTPUT
# mtkit.scoring.score.METRICS, which imports sacreBLEU: too slow for every start of the command line
# (tests/test_cli_vocabulary.py holds the two equal)
METRICS = ("bleu", "chrf", "ter", "comet", "cometkiwi")
GLOSSARY_HELP = (
    "A TSV file (or .csv) of term pairs, source<TAB>target a line: a sentence holding a source term (whole words, any"
    " case) carries its target term (beam search, torch engine)."
)


@_command
@with_algorithm_flags
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
    step_rows: Optional[int] = typer.Option(
        None,
        "--step-rows",
        help="Hypotheses stepped together: batches are joined up to this many (decoding.step_rows).",
    ),
    nbest: Optional[int] = typer.Option(None, "--nbest"),
    device: Optional[str] = DeviceOption,
    dtype: Optional[str] = DtypeOption,
    threads: Optional[int] = typer.Option(None, "--threads"),
    stopping: Optional[str] = typer.Option(
        None,
        "--stopping",
        help="Beam search: "
        + choices(_DECODING["stopping"]["choices"], {"first": "OpenNMT-py", "beam_full": "fairseq"})
        + "; see decoding.stopping.",
    ),
    search: Optional[str] = typer.Option(
        None,
        "--search",
        help="--engine ctranslate2: "
        + choices(
            _DECODING["search"]["choices"],
            {"mtkit": "ranked as the torch engine ranks", "ctranslate2": "its own beam search"},
        )
        + " (decoding.search).",
    ),
    shortlist: Optional[int] = typer.Option(
        None,
        "--shortlist",
        help="Score each sentence over a lexical shortlist "
        "with this many translations per source subword (0: whole vocabulary).",
    ),
    algorithm: Optional[str] = algorithm_option(),
    fmt: str = typer.Option(
        _OUTPUT.format, "--format", help=choices(_FLAGS["format"]["choices"], {"jsonl": "one JSON object a line"})
    ),
    input_format: str = typer.Option(
        _OUTPUT.input_format,
        "--input-format",
        help=choices(
            _FLAGS["input_format"]["choices"],
            {
                "jsonl": 'one {"text", "prefix", "constraints", "avoid"} object a line, docs/decoding.md',
                "html": "one HTML fragment a line, its tags kept around the words they enclose, docs/documents.md",
            },
        )
        + ".",
    ),
    target: Optional[str] = typer.Option(
        None, "--target", "-t", help="Target language of a multilingual model (jsonl lines may carry their own)."
    ),
    source: Optional[str] = typer.Option(
        None, "--source", help="Source language of a model that reads it as a token (imported M2M-100, NLLB-200)."
    ),
    split_sentences: bool = typer.Option(
        True,
        "--split-sentences/--no-split-sentences",
        help="Cut each line into sentences, translate them, and join them with the line's own whitespace.",
    ),
    glossary: Optional[Path] = typer.Option(None, "--glossary", help=GLOSSARY_HELP),
    skip_bad_lines: bool = typer.Option(
        False, "--skip-bad-lines", help="jsonl input: a bad line gets an empty output line and a warning, not an error."
    ),
    alignments: bool = typer.Option(False, "--alignments", help="jsonl: include cross-attention weights."),
    mark_below: Optional[float] = typer.Option(
        None,
        "--mark-below",
        help="Write each translation as HTML, its words of confidence under this in <span class=mtkit-low>.",
    ),
    plot_attention: Optional[Path] = typer.Option(
        None, "--plot-attention", help="Write an attention heatmap PNG per sentence here."
    ),
    engine: str = engine_option(),
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="Say on stderr what computes: engine, device, threads, dtype and why."
    ),
    qe_model: Optional[str] = typer.Option(
        None, "--qe-model", help="CometKiwi model: each hypothesis's qe in jsonl (docs/evaluation.md)."
    ),
    rerank: Optional[str] = typer.Option(
        None, "--rerank", help="qe: order each line's n-best by --qe-model's qe, best first (with --nbest N)."
    ),
    **algorithm_options,
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
        step_rows=step_rows,
        nbest=nbest,
        device=device,
        dtype=dtype,
        threads=threads,
        stopping=stopping,
        search=search,
        shortlist=shortlist,
        algorithm=algorithm,
        **algorithm_options,
        fmt=fmt,
        input_format=input_format,
        target=target,
        source=source,
        split_sentences=split_sentences,
        skip_bad_lines=skip_bad_lines,
        alignments=alignments,
        plot_attention=plot_attention,
        engine=engine,
        verbose=verbose,
        mark_below=mark_below,
        qe_model=qe_model,
        rerank=rerank,
        glossary=glossary,
    )


@_command
def translate_file(
    run: Path = typer.Argument(..., help="Run directory, checkpoint or export dir."),
    source: Path = typer.Argument(
        ..., help=f"The document: {choices(e for _, endings in FORMATS.values() for e in endings)}."
    ),
    output: Path = typer.Option(..., "--output", "-o", help="Where the translated document goes (written whole)."),
    fmt: Optional[str] = typer.Option(
        None, "--format", help=f"The document's format: {choices(FORMATS)} (default: from its name)."
    ),
    beam_size: Optional[int] = typer.Option(None, "--beam-size", "-b"),
    batch_size: Optional[int] = typer.Option(None, "--batch-size", help="Sentences per batch."),
    device: Optional[str] = DeviceOption,
    dtype: Optional[str] = DtypeOption,
    threads: Optional[int] = typer.Option(None, "--threads"),
    max_bytes: int = typer.Option(50 * 1024 * 1024, "--max-bytes", help="Refuse larger documents."),
    glossary: Optional[Path] = typer.Option(None, "--glossary", help=GLOSSARY_HELP),
    engine: str = engine_option(),
):
    """Translate a document, keeping its structure and formatting: only its text changes (docs/documents.md).

    Example: mtkit translate-file runs/demo report.docx --output report.de.docx
    """
    from mtkit.inference.translate import translate_file_main

    translate_file_main(
        path=run,
        source=source,
        out=output,
        fmt=fmt,
        max_bytes=max_bytes,
        engine=engine,
        beam_size=beam_size,
        batch_size=batch_size,
        device=device,
        dtype=dtype,
        threads=threads,
        glossary=glossary,
    )


@_command
def score(
    refs: Optional[List[Path]] = typer.Argument(
        None, help="One or more reference files (none for -m cometkiwi alone; COMET-22 reads the first)."
    ),
    hyps: Optional[List[Path]] = typer.Option(
        None,
        "--input",
        "-i",
        help="Hypotheses file (default or -: stdin); repeat to compare systems, the first the baseline.",
    ),
    metrics: List[str] = typer.Option(
        list(METRICS[:3]),
        "--metric",
        "-m",
        help=f"{choices(METRICS, {'comet': 'COMET-22', 'cometkiwi': 'CometKiwi, no reference'})}; repeat for several "
        "(default: bleu, chrf, ter).",
    ),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
    tokenize: Optional[str] = typer.Option(None, "--tokenize", help="sacreBLEU tokenizer for BLEU (default 13a)."),
    lowercase: bool = typer.Option(False, "--lowercase", "-lc"),
    width: int = typer.Option(1, "--width", "-w", help="Decimals of the printed scores, as sacreBLEU's (0 to 10)."),
    paired_bs: bool = typer.Option(False, "--paired-bs", help="Paired bootstrap resampling test (with a 95% CI)."),
    paired_ar: bool = typer.Option(False, "--paired-ar", help="Paired approximate randomisation test."),
    paired_bs_n: Optional[int] = typer.Option(None, "--paired-bs-n", help="Bootstrap resamples (default 1000)."),
    paired_ar_n: Optional[int] = typer.Option(None, "--paired-ar-n", help="Randomisation trials (default 10000)."),
    seed: str = typer.Option(
        "12345", "--seed", envvar="SACREBLEU_SEED", help="Seed of the paired tests, as sacreBLEU's ('none': unseeded)."
    ),
    source: Optional[Path] = typer.Option(None, "--source", help="Source sentences, for -m comet and -m cometkiwi."),
    comet_model: str = typer.Option(
        "Unbabel/wmt22-comet-da", "--comet-model", help="COMET-22 model: a directory, or a hub name in the local cache."
    ),
    cometkiwi_model: str = typer.Option(
        "Unbabel/wmt22-cometkiwi-da",
        "--cometkiwi-model",
        help="CometKiwi model: a directory, or a hub name in the local cache.",
    ),
    sentences: bool = typer.Option(False, "--sentences", help="--json: each line's COMET score too, in order."),
):
    """Score hypotheses against references with sacreBLEU (BLEU, chrF, TER) or COMET; compare systems with paired tests.

    Examples: mtkit translate runs/demo < test.en | mtkit score test.de
              mtkit score test.de -i base.de -i new.de --paired-bs
              mtkit score test.de -i hyp.de --source test.en -m comet --json
              mtkit score -i hyp.de --source test.en -m cometkiwi
    """
    from mtkit.scoring.score import score_main

    score_main(
        refs=list(refs or []),
        hyps=hyps,
        metrics=metrics,
        json_out=json_out,
        tokenize=tokenize,
        lowercase=lowercase,
        width=width,
        paired_bs=paired_bs,
        paired_ar=paired_ar,
        paired_bs_n=paired_bs_n,
        paired_ar_n=paired_ar_n,
        seed=seed,
        source=source,
        comet_model=comet_model,
        cometkiwi_model=cometkiwi_model,
        sentences=sentences,
    )
