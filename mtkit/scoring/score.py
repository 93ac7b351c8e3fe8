"""BLEU, chrF and TER through sacreBLEU's Python API, with its signatures; COMET-22 and CometKiwi
(``mtkit.scoring.neural``) beside them. Never imports torch unless a neural metric is asked for.

``corpus_scores`` is what training validation calls; ``score_main`` is ``mtkit score``. Files are read
the way the ``sacrebleu`` command reads them (UTF-8, split on newlines, trailing whitespace stripped), and
scores are printed with sacreBLEU's width, so ``mtkit score`` prints the same numbers as ``sacrebleu``.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import sys
from pathlib import Path
from typing import Optional, Sequence, Union

from rich.console import Console
from rich.table import Table
from sacrebleu.metrics import BLEU, CHRF, TER

from mtkit.errors import MtkitError
from mtkit.scoring.significance import DEFAULT_SEED, check_paired_options, paired_test
from mtkit.scoring.significance import print_table as print_paired_table

SACREBLEU_METRICS = ("bleu", "chrf", "ter")
METRICS = (*SACREBLEU_METRICS, "comet", "cometkiwi")  # what ``mtkit score -m`` takes
NEURAL = ("comet", "cometkiwi")  # mtkit.scoring.neural.NEURAL (imported only when asked for)
MAX_WIDTH = 10  # decimals a printed score may have


def corpus_scores(
    hyps: Sequence[str],
    refs: Sequence[Sequence[str]],
    metrics: Sequence[str] = SACREBLEU_METRICS,
    tokenize: Optional[str] = None,
    lowercase: bool = False,
    width: int = 1,
) -> dict[str, dict]:
    """Score ``hyps`` against one or more reference streams.

    Args:
        hyps: one hypothesis per line.
        refs: the reference streams: ``refs[k][i]`` is reference k of line i.
        metrics: names from ``SACREBLEU_METRICS``, any case; each is scored once, in the order given.
        tokenize: BLEU's tokenizer (default 13a).
        lowercase: lowercase BLEU and chrF (TER is case-insensitive, as sacreBLEU's default).
        width: the decimals of the formatted line.

    Returns:
        Lowercased metric name -> {"score": float, "signature": str, "text": sacreBLEU's formatted score line}.

    Raises:
        MtkitError: an unknown metric or tokenizer, no metric, no reference stream, a stream whose length differs
            from that of ``hyps``, or a tokenizer whose package is missing.
    """
    names = check_options(metrics, tokenize, SACREBLEU_METRICS)
    if not refs:
        raise MtkitError("no reference stream given")
    for k, stream in enumerate(refs):
        if len(stream) != len(hyps):
            raise MtkitError(f"{len(hyps)} hypotheses but reference stream {k + 1} has {len(stream)} lines")
    hyps, refs = list(hyps), [list(stream) for stream in refs]

    results = {}
    for name in dict.fromkeys(names):  # unique, in the order given
        with _tokenizer_needed(name, tokenize):
            metric = make_metric(name, tokenize=tokenize, lowercase=lowercase)
            score = metric.corpus_score(hyps, refs)
        signature = metric.get_signature().format()
        results[name] = {
            "score": float(score.score),
            "signature": signature,
            "text": score.format(width=width, signature=signature),
        }
    return results


def make_metric(name: str, tokenize: Optional[str] = None, lowercase: bool = False, references=None):
    """sacreBLEU's metric ``name`` with the options of ``mtkit score``.

    Args:
        name: "bleu", "chrf" or "ter", lowercase (not checked here: any other name gives TER).
        tokenize: BLEU's tokenizer (None: sacreBLEU's default, 13a).
        lowercase: lowercase BLEU and chrF; TER is always case-insensitive.
        references: reference streams for the metric to cache (the paired tests need them), or None.

    Returns:
        A ``BLEU``, ``CHRF`` or ``TER`` object.

    Raises:
        ImportError: the package of the BLEU tokenizer is missing (the callers turn it into an ``MtkitError``).
    """
    if name == "bleu":
        return BLEU(lowercase=lowercase, tokenize=tokenize, references=references)
    if name == "chrf":
        return CHRF(lowercase=lowercase, references=references)
    return TER(references=references)  # sacreBLEU's default (and its CLI's): case-insensitive


@contextlib.contextmanager
def _tokenizer_needed(name: str, tokenize: Optional[str]):
    try:
        yield
    except (ImportError, ModuleNotFoundError) as err:  # e.g. tokenize ja-mecab without its extra
        raise MtkitError(
            f"{name}: tokenizer {tokenize!r} needs a missing package ({err}); install it or choose another --tokenize"
        ) from None


def check_options(metrics: Sequence[str], tokenize: Optional[str], known: Sequence[str] = METRICS) -> list[str]:
    """Reject unknown metric names and BLEU tokenizers (never silently drop them).

    Args:
        metrics: metric names, any case.
        tokenize: BLEU's tokenizer, or None.
        known: the names accepted.

    Returns:
        The names lowercased, in the order given (repeats kept).

    Raises:
        MtkitError: an unknown metric or tokenizer, or no metric.
    """
    names = [m.lower() for m in metrics]
    unknown = [m for m in names if m not in known]
    if unknown:
        raise MtkitError(f"unknown metric {unknown[0]!r}; choose from {', '.join(known)}")
    if not names:
        raise MtkitError(f"no metric given; choose from {', '.join(known)}")
    if tokenize is not None and tokenize not in BLEU.TOKENIZERS:
        raise MtkitError(f"unknown tokenizer {tokenize!r}; choose from {', '.join(BLEU.TOKENIZERS)}")
    return names


def read_lines(path: Optional[Path], what: str) -> list[str]:
    """The lines of a UTF-8 file (plain or gzip-compressed), or of stdin, as the ``sacrebleu`` command reads them.

    A final newline ends the last line rather than starting another; trailing whitespace is stripped.

    Args:
        path: the file; None reads stdin.
        what: what the file holds, for messages ("hypotheses", "reference").

    Returns:
        The lines.

    Raises:
        MtkitError: a missing or unreadable file, a directory, or invalid UTF-8 (with its line number).
    """
    try:
        if path is None:
            raw = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read().encode("utf-8")
            name = "<stdin>"
        else:
            name = str(path)
            with open(path, "rb") as f:
                raw = f.read()
            if raw[:2] == b"\x1f\x8b":
                raw = gzip.decompress(raw)
    except FileNotFoundError:
        raise MtkitError(f"{path}: {what} file not found") from None
    except IsADirectoryError:
        raise MtkitError(f"{path}: {what} path is a directory; give a file") from None
    except (OSError, EOFError) as err:
        raise MtkitError(f"{path}: cannot read {what} file ({err})") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        raise MtkitError(f"{name}:{line}: invalid UTF-8 in the {what}; re-encode the file as UTF-8") from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline after the last line ends it; it does not start another
    return [line.rstrip() for line in lines]


def score_main(
    *,
    refs: Sequence[Path] = (),
    hyps: Union[None, Path, Sequence[Optional[Path]]] = None,
    metrics: Sequence[str] = SACREBLEU_METRICS,
    json_out: bool = False,
    tokenize: Optional[str] = None,
    lowercase: bool = False,
    width: int = 1,
    paired_bs: bool = False,
    paired_ar: bool = False,
    paired_bs_n: Optional[int] = None,
    paired_ar_n: Optional[int] = None,
    seed: str = DEFAULT_SEED,
    source: Optional[Path] = None,
    comet_model: str = "Unbabel/wmt22-comet-da",
    cometkiwi_model: str = "Unbabel/wmt22-cometkiwi-da",
    sentences: bool = False,
) -> dict:
    """``mtkit score``: print a table (or one JSON object) of corpus scores of ``hyps`` against ``refs``.

    Several hypothesis files are compared with a paired test (``paired_bs`` or ``paired_ar``), the first being
    the baseline (see ``mtkit.scoring.significance``). COMET-22 (``comet``) and CometKiwi (``cometkiwi``) read the
    ``source`` file too; CometKiwi needs no reference, and COMET-22 scores against the first reference file.

    Args:
        refs: the reference files, line-aligned with the hypotheses (none where only CometKiwi is asked for).
        hyps: one hypothesis file or several; None or "-" stands for stdin (the default).
        metrics: names from ``METRICS``.
        json_out: print one JSON object instead of a table.
        tokenize: BLEU's tokenizer (default 13a).
        lowercase: lowercase BLEU and chrF.
        width: the decimals printed (COMET's at least 4; its JSON scores are not rounded).
        paired_bs: compare the systems with paired bootstrap resampling.
        paired_ar: compare them with paired approximate randomisation.
        paired_bs_n: the resamples of ``paired_bs`` (default 1000).
        paired_ar_n: the trials of ``paired_ar`` (default 10000).
        seed: the paired test's seed: a positive integer, or "none" for unseeded.
        source: the source file, for COMET-22 and CometKiwi.
        comet_model: COMET-22's model, a directory in the hub's layout or a hub name in the local cache.
        cometkiwi_model: CometKiwi's model, likewise.
        sentences: give each line's neural score too (``"sentences"``, in input order).

    Returns:
        Without a paired test, metric name -> {"score" (sacreBLEU's rounded to ``width``), "signature", "text"}
        (neural metrics: with "model", and "sentences" if asked); with one, ``paired_test``'s result.

    Raises:
        MtkitError: no reference where one is needed, no source for a neural metric, bad options, a file given
            twice or unreadable, files of different lengths, no lines at all, or a neural model that cannot be used.
    """
    if not 0 <= width <= MAX_WIDTH:
        raise MtkitError(f"--width must be between 0 and {MAX_WIDTH} decimals, got {width}")
    # check the options before reading stdin, so a typo does not wait for input
    names = list(dict.fromkeys(check_options(metrics, tokenize)))
    neural = [m for m in names if m in NEURAL]
    if not refs and (len(neural) < len(names) or "comet" in neural):
        needs = "comet" if "comet" in neural else next(m for m in names if m not in NEURAL)
        raise MtkitError(f"{needs} needs a reference file; give one (only cometkiwi scores without references)")
    if neural and source is None:
        raise MtkitError(f"{neural[0]} reads the source sentences: give them with --source FILE")
    if source is not None and not neural:
        raise MtkitError("--source is read by -m comet and -m cometkiwi only; add one of them or drop --source")
    if sentences and not neural:
        raise MtkitError("--sentences gives each line's -m comet or -m cometkiwi score; add one of them")
    systems = _system_paths(hyps)
    test = check_paired_options(len(systems), paired_bs, paired_ar, paired_bs_n, paired_ar_n, seed)
    hyp_lines = [read_lines(path, "hypotheses") for path in systems]
    ref_streams = []
    for ref in refs:
        ref_streams.append(_aligned(read_lines(Path(ref), "reference"), ref, systems, hyp_lines))
    src_lines = None if source is None else _aligned(read_lines(Path(source), "source"), source, systems, hyp_lines)
    if not hyp_lines[0]:
        raise MtkitError(f"{refs[0] if refs else source} and the hypotheses have no lines; nothing to score")
    sacre = [m for m in names if m not in NEURAL]
    neural_scores = {}
    if neural:
        from mtkit.scoring.neural import sentence_scores

        models = {"comet": comet_model, "cometkiwi": cometkiwi_model}
        reference = ref_streams[0] if ref_streams else None
        for m in neural:
            neural_scores[m] = sentence_scores(m, models[m], hyp_lines, src_lines, reference)
    if test is not None:
        result = _paired(
            names,
            sacre,
            systems,
            hyp_lines,
            ref_streams,
            neural_scores,
            models if neural else {},
            test,
            tokenize,
            lowercase,
            sentences,
        )
        if json_out:
            print(json.dumps(result, ensure_ascii=False))
        else:
            shown_width = max(width, 4) if neural else width
            print_paired_table(result, shown_width, n_lines=len(hyp_lines[0]), n_refs=len(ref_streams))
        return result
    shown = {}
    if sacre:
        results = corpus_scores(
            hyp_lines[0], ref_streams, metrics=sacre, tokenize=tokenize, lowercase=lowercase, width=width
        )
        # printed scores use sacreBLEU's rounding, so they match `sacrebleu REF -i HYP -m METRIC` digit for digit
        shown = {name: {**r, "score": float(f"{r['score']:.{width}f}")} for name, r in results.items()}
    if neural:
        from mtkit.scoring.neural import result as neural_result

        for m in neural:
            shown[m] = neural_result(m, models[m], neural_scores[m][0], sentences)
        shown = {m: shown[m] for m in names}
    if json_out:
        print(json.dumps(shown, ensure_ascii=False))
    else:
        _print_table(shown, width, n_lines=len(hyp_lines[0]), n_refs=len(ref_streams))
    return shown


def _aligned(lines: list[str], path, systems, hyp_lines) -> list[str]:
    """``lines`` (of ``path``), checked to have as many lines as every hypothesis file."""
    for sys_path, sys_lines in zip(systems, hyp_lines):
        if len(lines) != len(sys_lines):
            raise MtkitError(
                f"{sys_path or '<stdin>'} has {len(sys_lines)} lines but {path} has {len(lines)}; "
                "hypotheses, references and sources must be line-aligned"
            )
    return lines


def _paired(
    names, sacre, systems, hyp_lines, ref_streams, neural_scores, models, test, tokenize, lowercase, sentences
) -> dict:
    """The paired test over every metric, neural ones through their sentence scores."""
    named = [(str(p or "<stdin>"), h) for p, h in zip(systems, hyp_lines)]
    metric_objs = {}
    if neural_scores:
        from mtkit.scoring.neural import SentenceMean
    with _tokenizer_needed("bleu", tokenize):
        for m in names:
            if m in sacre:
                metric_objs[m] = make_metric(m, tokenize, lowercase, references=ref_streams)
            else:
                metric_objs[m] = SentenceMean(m, models[m], hyp_lines, neural_scores[m])
        result = paired_test(named, metric_objs, test)
    if sentences:
        for i, row in enumerate(result["systems"]):
            for m, scores in neural_scores.items():
                row[m]["sentences"] = list(scores[i])
    return result


def _system_paths(hyps) -> list[Optional[Path]]:
    """The hypothesis files, None standing for stdin (no file, or "-"); each at most once."""
    if hyps is None or isinstance(hyps, (str, Path)):
        hyps = [hyps]
    paths = [None if p is None or str(p) == "-" else Path(p) for p in hyps] or [None]
    seen = set()
    for path in paths:
        key = "-" if path is None else str(path)
        if key in seen:
            raise MtkitError(f"{'stdin (-i -)' if path is None else path} given twice with -i; give each system once")
        seen.add(key)
    return paths


def _print_table(results: dict, width: int, n_lines: int, n_refs: int):
    table = Table(caption=f"{n_lines} lines, {n_refs} reference{'s' if n_refs != 1 else ''}")
    table.add_column("metric")
    table.add_column("score", justify="right")
    table.add_column("sacreBLEU signature", overflow="fold")
    for name, r in results.items():
        shown = max(width, 4) if name in NEURAL else width  # COMET's scores lie near 0-1
        table.add_row(r["text"].split("|", 1)[0], f"{r['score']:.{shown}f}", r["signature"])
    Console(highlight=False).print(table)
