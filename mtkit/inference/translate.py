"""`mtkit translate`: a streaming stdin -> stdout pipeline, one output line per input line, always.

Lines are read lazily in chunks, each chunk is sorted by length and cut into batches for speed, and the
translations are written back in input order and flushed, so the command works inside a pipe. With
``--input-format jsonl`` each line is a JSON object with its decoding instructions (``segments.parse_jsonl``). The model is the
one ``mtkit.load`` returns (``api.TranslationModel``, over the torch engine or CTranslate2's); the output formats
(text, jsonl) and the wiring of ``mtkit translate`` are here, the reading of the input in ``lines.py``.
"""

from __future__ import annotations

import contextlib
import gzip
import html
import json
import os
import stat
import sys
from pathlib import Path
from typing import IO, Iterable, Iterator, Optional, Union

from mtkit.errors import MtkitError
from mtkit.files import atomic_open
from mtkit.inference import api
from mtkit.inference.engine import Engine
from mtkit.inference.glossaries import WithGlossary
from mtkit.inference.lines import chunks, pipe_chunks, read_lines
from mtkit.inference.options import check_flags, check_instructions
from mtkit.inference.results import Translation
from mtkit.inference.segments import Segment, parse_jsonl
from mtkit.plots import plot_attention
from mtkit.text.glossary import Glossary

# ------------------------------------------------------------------------------------------- output
_LINE_BREAKS = str.maketrans({"\n": " ", "\r": " "})


def one_line(text: str) -> str:
    """A hypothesis can never add an output line: CR / LF (were a subword to hold one) become spaces."""
    if "\n" in text or "\r" in text:  # two searches take a tenth of the time of a translate
        return text.translate(_LINE_BREAKS)
    return text


def format_text(translation: Translation, nbest: int) -> str:
    """One line per input line; with nbest > 1 exactly ``nbest`` lines "hypothesis<TAB>score" (empty when missing)."""
    hyps = translation.hypotheses
    if nbest == 1:
        return (one_line(hyps[0].text) if hyps else "") + "\n"
    lines = [f"{one_line(h.text)}\t{h.score:.4f}" for h in hyps[:nbest]]
    return "".join(line + "\n" for line in lines) + "\n" * (nbest - len(lines))


def format_marked(translation: Translation, threshold: float) -> str:
    """``--mark-below``: the best translation as one line of HTML, each word of confidence under ``threshold`` in
    ``<span class="mtkit-low" data-confidence="0.31">``, for the caller to style."""
    best = translation.best
    if best is None or not best.word_confidences:
        return html.escape(one_line(best.text) if best else "", quote=False) + "\n"
    marked = [
        f'<span class="mtkit-low" data-confidence="{c:.2f}">{html.escape(w, quote=False)}</span>'
        if c < threshold
        else html.escape(w, quote=False)
        for w, c in best.word_confidences
    ]
    return one_line(" ".join(marked)) + "\n"


def format_jsonl(translation: Translation, alignments: bool, error: Optional[str] = None) -> str:
    """One JSON record; ``error``: why the input line was skipped (``--skip-bad-lines``)."""
    best = translation.best
    record = {
        "source": translation.source,
        "hypothesis": best.text if best else "",
        "score": best.score if best else None,
        "confidence": _rounded(best.confidence) if best else None,
        "words": [[w, round(c, 4)] for w, c in best.word_confidences or ()] if best else [],
        "tokens": list(best.tokens) if best else [],
        "token_log_probs": [round(x, 5) for x in best.token_log_probs or ()] if best else [],
        "nbest": [
            {"hypothesis": h.text, "score": h.score, "log_prob": h.log_prob, "confidence": _rounded(h.confidence)}
            for h in translation.hypotheses
        ],
    }
    if best is not None and best.qe is not None:  # a quality estimation model's (--qe-model)
        record["qe"] = round(best.qe, 4)
        for entry, h in zip(record["nbest"], translation.hypotheses):
            entry["qe"] = round(h.qe, 4)
    if alignments:
        record["alignment"] = best.alignment if best is not None and best.alignment is not None else []
    if error is not None:
        record["error"] = error
    return json.dumps(record, ensure_ascii=False) + "\n"


def _rounded(value: Optional[float]) -> Optional[float]:
    return None if value is None else round(value, 4)


Translatable = Union[api.TranslationModel, Engine]


def as_model(translator: Translatable) -> api.TranslationModel:
    """``mtkit.load``'s object as it is; an engine built directly (a test's, a benchmark's) wrapped in one."""
    return translator if isinstance(translator, api.TranslationModel) else api.TranslationModel(translator)


def translate_stream(translator: Translatable, lines: Iterable[str], out: IO[str], **kw) -> int:
    """Translate ``lines`` to ``out``; returns the number of lines written."""
    model = as_model(translator)
    return translate_chunks(model, chunks(lines, model.options.chunk_size), out, **kw)


class JsonlReader:
    """``--input-format jsonl``: each chunk of lines as ``Segment``s, a bad line (not a JSON object of the right
    shape, or instructions the model cannot follow) an ``MtkitError`` naming ``where`` and the line number, or
    with ``skip_bad`` None plus a warning on stderr (its output line is then empty)."""

    def __init__(self, model: api.TranslationModel, where: str, skip_bad: bool):
        self.model, self.where, self.skip_bad = model, where, skip_bad
        self.line = 0
        self.errors: dict[int, str] = {}  # line number -> why it was skipped

    def segment(self, text: str) -> Optional[Segment]:
        self.line += 1
        try:
            if not text.strip():
                raise MtkitError("empty line; each line must be a JSON object with a 'text' key")
            segment = parse_jsonl(text)
            self.model.check(segment)
            return segment
        except MtkitError as err:
            if not self.skip_bad:
                raise MtkitError(
                    f"{self.where} line {self.line}: {err} (fix the line, or pass --skip-bad-lines to give it an "
                    "empty output line)"
                ) from None
            self.errors[self.line] = str(err)
            print(f"mtkit: warning: {self.where} line {self.line} skipped: {err}", file=sys.stderr)
            return None

    def chunks(self, line_chunks: Iterable[list[str]]) -> Iterator[list[Optional[Segment]]]:
        for chunk in line_chunks:
            yield [self.segment(text) for text in chunk]


def translate_chunks(
    translator: Translatable,
    line_chunks: Iterable[list],
    out: IO[str],
    *,
    fmt: str = "text",
    alignments: bool = False,
    plot_dir: Optional[Path] = None,
    errors: Optional[dict[int, str]] = None,
    markup: str = "text",
    target: Optional[str] = None,
    mark_below: Optional[float] = None,
    glossary=None,
) -> int:
    """Translate each chunk of lines (sorted by length inside) to ``out`` in input order, flushing after each.

    A line is a str or a ``Segment``; None stands for a skipped line (an empty output line; with jsonl output a
    record whose ``error`` is ``errors[line number]``). ``markup``: ``html`` reads each line as an HTML fragment.
    ``mark_below``: each line as HTML, its words of lower confidence marked (``format_marked``). ``glossary``: a
    ``text.glossary.Glossary`` every line follows, or None."""
    model = as_model(translator)
    nbest = model.options.nbest
    scores = fmt == "jsonl" or nbest > 1 or mark_below is not None  # shown: CTranslate2 rescores for them
    attention = alignments or plot_dir is not None
    written = 0
    skipped = Translation(source="", source_tokens=(), hypotheses=())
    for chunk in line_chunks:
        lines = [x for x in chunk if x is not None]
        found = model.translate_batch(
            lines, scores=scores, alignments=attention, format=markup, target=target, glossary=glossary
        )
        found = iter(found)
        for line in chunk:
            translation = skipped if line is None else next(found)
            if fmt == "jsonl":
                error = (errors or {}).get(written + 1) if line is None else None
                out.write(format_jsonl(translation, alignments, error))
            elif mark_below is not None:
                out.write(format_marked(translation, mark_below))
            else:
                out.write(format_text(translation, nbest))
            best = translation.best
            if plot_dir is not None and best is not None and best.alignment is not None:
                import numpy as np  # here: numpy takes a tenth of the start-up of a CTranslate2 translation

                plot_attention(
                    np.asarray(best.alignment, dtype=np.float32),
                    [*translation.source_tokens, "</s>"],
                    [*best.tokens, "</s>"],
                    plot_dir / f"attention_{written + 1:06d}.png",
                    title=best.text[:80],
                )
            written += 1
        out.flush()
    return written


def translate_main(
    *,
    paths: list[Path],
    input: Optional[Path],
    output: Optional[Path],
    fmt: str,
    alignments: bool,
    plot_attention: Optional[Path],
    engine: str,
    input_format: str = "text",
    skip_bad_lines: bool = False,
    target: Optional[str] = None,
    source: Optional[str] = None,
    verbose: bool = False,
    mark_below: Optional[float] = None,
    glossary: Optional[Path] = None,
    **options,
) -> None:
    """``mtkit translate``: ``options`` are ``mtkit.load``'s decoding and sampling options; ``--engine
    ctranslate2``, or a dir written by ``mtkit export``, translates through CTranslate2; ``input_format``
    jsonl reads a JSON object with instructions per line (``skip_bad_lines``: a bad one gives an empty line),
    html an HTML fragment per line; ``glossary``: a TSV or CSV file of term pairs every sentence follows."""
    check_flags(format=fmt, engine=engine, input_format=input_format)
    terms = Glossary.read(glossary) if glossary is not None else None  # a bad file fails before the model loads
    if mark_below is not None:
        if not 0.0 < mark_below <= 1.0:
            raise MtkitError(f"--mark-below {mark_below}: a confidence in (0, 1], e.g. 0.5")
        if fmt != "text" or input_format == "html" or options.get("nbest") not in (None, 1):
            raise MtkitError(
                "--mark-below writes one HTML line per input line: use it with --format text, plain or jsonl input "
                "and one hypothesis (--format jsonl gives every word's confidence instead)"
            )
    if input is not None and not Path(input).is_file():
        raise MtkitError(f"{input}: input file not found")
    model = api.load(
        paths[0],
        checkpoints=paths[1:],
        engine=engine,
        alignments=alignments or plot_attention is not None,
        source=source,
        **options,
    )
    if verbose:
        print(f"mtkit: {model.engine.describe()}", file=sys.stderr, flush=True)
    model.check_format("html" if input_format == "html" else "text")
    if input_format != "jsonl" or target is not None:  # jsonl lines may name their own
        model.check_target(target)
    model.check_source(source)
    _check_glossary(model, terms)
    _write_translations(
        model,
        input=input,
        output=output,
        fmt=fmt,
        alignments=alignments,
        plot_attention=plot_attention,
        input_format=input_format,
        skip_bad_lines=skip_bad_lines,
        target=target,
        mark_below=mark_below,
        glossary=terms,
    )


def _check_glossary(model: api.TranslationModel, glossary) -> None:
    """Refuse a glossary the model's options cannot follow (its terms are constraints) before any line is read."""
    if glossary is not None:
        try:
            check_instructions(model.options, constraints=True)
        except MtkitError as err:
            raise MtkitError(f"--glossary: {err}") from None


def _is_regular_file(stream) -> bool:
    try:
        return stat.S_ISREG(os.fstat(stream.fileno()).st_mode)
    except (OSError, ValueError, AttributeError):  # no file descriptor (a test's in-memory stream)
        return True


def _seekable(stream) -> bool:
    try:
        return stream.seekable()
    except (OSError, ValueError, AttributeError):
        return False


def _write_translations(
    translator: api.TranslationModel,
    *,
    input: Optional[Path],
    output: Optional[Path],
    fmt: str,
    alignments: bool,
    plot_attention: Optional[Path],
    input_format: str = "text",
    skip_bad_lines: bool = False,
    target: Optional[str] = None,
    mark_below: Optional[float] = None,
    glossary=None,
) -> None:
    if plot_attention is not None:
        try:
            plot_attention.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise MtkitError(
                f"--plot-attention {plot_attention}: cannot create the folder ({err.strerror or err})"
            ) from None
    with contextlib.ExitStack() as stack:
        if output is not None:  # whole or not at all
            try:
                sink = stack.enter_context(atomic_open(Path(output), "w", encoding="utf-8"))
            except OSError as err:
                raise MtkitError(
                    f"{output}: cannot write ({err.strerror or err}); check the folder exists and is writable"
                ) from None
        else:
            sys.stdout.reconfigure(encoding="utf-8", errors="replace")
            sink = sys.stdout
        src = stack.enter_context(_open_input(Path(input))) if input is not None else sys.stdin.buffer
        max_bytes = 4 * translator.max_chars  # UTF-8: at most 4 bytes per character
        if input_format == "jsonl":
            max_bytes *= 8  # room for the instructions and JSON escapes
        piped = input is None and not _is_regular_file(src)
        reader = JsonlReader(translator, str(input) if input is not None else "stdin", skip_bad_lines)
        if input_format == "jsonl" and not piped and not skip_bad_lines and _seekable(src):
            # a file: every line is checked before anything is written (a pipe is checked chunk by chunk)
            for text in read_lines(src, max_bytes):
                reader.segment(text)
            src.seek(0)
            reader.line = 0
        if piped:  # a pipe or terminal: answer each pause at once
            line_chunks = pipe_chunks(src.fileno(), translator.options.chunk_size, max_bytes)
        else:
            line_chunks = chunks(read_lines(src, max_bytes), translator.options.chunk_size)
        if input_format == "jsonl":
            line_chunks = reader.chunks(line_chunks)
        translate_chunks(
            translator,
            line_chunks,
            sink,
            fmt=fmt,
            alignments=alignments,
            plot_dir=plot_attention,
            errors=reader.errors,
            markup="html" if input_format == "html" else "text",
            target=target,
            mark_below=mark_below,
            glossary=glossary,
        )
    if translator.truncated:
        print(
            f"mtkit: warning: {translator.truncated} input line(s) longer than the model's limit of "
            f"{translator.max_src} subwords were truncated",
            file=sys.stderr,
        )


def _open_input(path: Path):
    """The input file as bytes, decompressed where its name ends in .gz. By its name, not its first bytes as
    prepare tells a corpus (``data.sources``): that opens the file twice, which a pipe (``-i <(cmd)``) cannot be."""
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


def translate_file_main(
    *,
    path: Path,
    source: Path,
    out: Path,
    fmt: Optional[str],
    max_bytes: int,
    engine: str,
    glossary: Optional[Path] = None,
    **options,
):
    """``mtkit translate-file``: load the model, translate ``source`` into ``out`` (following ``glossary``, a TSV or
    CSV file of term pairs), say what it took on stderr."""
    from mtkit.documents.files import translate_file
    from mtkit.documents.formats import format_of

    format_of(Path(source).name, fmt)  # an unknown format fails before the model loads
    terms = Glossary.read(glossary) if glossary is not None else None
    model = api.load(path, engine=engine, **options)
    _check_glossary(model, terms)
    stats = translate_file(
        WithGlossary(model, terms) if terms else model,
        source,
        out,
        fmt=fmt,
        max_bytes=max_bytes,
        show_progress=sys.stderr.isatty(),
    )
    rate = stats.sentences / stats.seconds if stats.seconds else 0.0
    print(
        f"{out}: {stats.format}, {stats.texts} texts, {stats.sentences} sentences in {stats.seconds:.1f} s "
        f"({rate:.1f} sentences/s)",
        file=sys.stderr,
    )
