"""`mtkit clean`: the filters of mtkit/data/filters.py on a parallel corpus alone, in one streaming pass.

    DIR/NAME_SRC, DIR/NAME_TGT    the kept pairs, whitespace-normalised, under the inputs' own file names
                                  (gzip-compressed where the name ends in .gz)
    DIR/report.json               pairs read and kept, and per filter how many pairs it removed, with examples

Lines are read, judged and written one pair at a time (with the model-scored ``dcce`` filter, a chunk of
``filter_base.CHUNK`` pairs at a time), so memory stays flat whatever the corpus size; only the duplicate filter's
8-byte hashes grow with the kept pairs. The outputs are written to temp files in DIR and
renamed into place at the end (report.json last): a clean that fails or is interrupted leaves DIR as it was,
and is simply run again.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import time
from collections import Counter
from pathlib import Path
from typing import Optional

from mtkit.data import filters as pair_filters
from mtkit.data.sources import file_pairs
from mtkit.errors import MtkitError
from mtkit.files import atomic_write_text, fsync_dir, remove_stale_temps, temp_path

REPORT = "report.json"
EXAMPLES = 3  # removed pairs shown per filter
EXAMPLE_CHARS = 200  # of each side
WRITE_LINES = 10_000  # lines buffered per write
_LANG_RE = re.compile(r"[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{2,8})?")


def language_of(path: Path) -> Optional[str]:
    """The language code a corpus file's name ends in (``corpus.en``, ``train.de.gz``, ``web.pt_BR``), or None."""
    name = path.name[:-3] if path.name.endswith(".gz") else path.name
    suffix = Path(name).suffix[1:]
    return suffix if _LANG_RE.fullmatch(suffix) else None


def parse_filters(names: Optional[str], settings: list[str]) -> dict[str, dict]:
    """``--filters a,b`` (None: every filter) and ``--option NAME.KEY=VALUE`` settings as name -> options; each
    VALUE read as YAML (numbers, true/false, [lists])."""
    import yaml

    chosen = list(pair_filters.DEFAULTS) if names is None else [n.strip() for n in names.split(",") if n.strip()]
    spec = pair_filters.normalise_spec(chosen, "--filters")
    for setting in settings:
        key, sep, raw = setting.partition("=")
        name, dot, option = key.strip().partition(".")
        if not sep or not dot or not option:
            raise MtkitError(f"--option {setting!r}: give NAME.OPTION=VALUE, e.g. --option language.min_letters=20")
        if names is None and name in pair_filters.FILTERS:  # the defaults, and a filter outside them set here
            spec.setdefault(name, {})
        if name not in spec:
            raise MtkitError(f"--option {setting!r}: filter {name!r} is not among --filters ({', '.join(spec)})")
        try:
            spec[name][option] = yaml.safe_load(raw)
        except yaml.YAMLError:
            raise MtkitError(f"--option {setting!r}: {raw!r} is not a value (a number, true/false, text)") from None
    return spec


def clean(
    src_path: Path,
    tgt_path: Path,
    out_dir: Path,
    *,
    src_lang: Optional[str] = None,
    tgt_lang: Optional[str] = None,
    filters: Optional[dict] = None,
    skip_bad_lines: bool = False,
    quiet: bool = False,
) -> dict:
    """Filter a parallel corpus into ``out_dir`` and return (and write, as ``out_dir/report.json``) the report.

    Args:
        src_path, tgt_path: line-aligned text files, plain or gzip.
        out_dir: where the kept pairs go, under the inputs' file names.
        src_lang, tgt_lang: the languages; None: the last suffix of the file name (``corpus.en``).
        filters: name -> options (``filters.build``); None: the default filters (``filters.DEFAULTS``) with their
            default options.
        skip_bad_lines: drop pairs with invalid UTF-8 instead of failing.
        quiet: print nothing.

    Raises:
        MtkitError: a missing input, a language that cannot be told or that the identifier does not know, an
            unknown filter or option, invalid UTF-8 (file and line), files of different line counts. ``out_dir``
            is then as it was.
    """
    started = time.perf_counter()
    src_path, tgt_path, out_dir = Path(src_path), Path(tgt_path), Path(out_dir)
    for flag, path in (("IN_SRC", src_path), ("IN_TGT", tgt_path)):
        if not path.is_file():
            raise MtkitError(f"{flag}: {path}: {'is a directory' if path.is_dir() else 'file not found'}")
    src_given, tgt_given = src_lang, tgt_lang
    src_lang = _language(src_lang, src_path, "--source")
    tgt_lang = _language(tgt_lang, tgt_path, "--target")
    if src_lang == tgt_lang:
        raise MtkitError(f"{src_path} and {tgt_path} are both in language {src_lang!r}; give --source / --target")
    spec = {name: {} for name in pair_filters.DEFAULTS} if filters is None else filters
    lang_keys = tuple(
        flag if given else f"{path.name} (its suffix; or give {flag})"
        for flag, given, path in (("--source", src_given, src_path), ("--target", tgt_given, tgt_path))
    )
    chosen = pair_filters.build(spec, src_lang, tgt_lang, "--filters", lang_keys)
    outputs = (out_dir / src_path.name, out_dir / tgt_path.name)
    _check_outputs(src_path, tgt_path, out_dir, outputs)

    out_dir.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(out_dir)
    temps = [temp_path(path) for path in outputs]
    report = {
        "src": str(src_path),
        "tgt": str(tgt_path),
        "src_lang": src_lang,
        "tgt_lang": tgt_lang,
        "filters": {f.name: _options(f) for f in chosen},
        "pairs_read": 0,
        "pairs_kept": 0,
        "bad_lines_skipped": 0,
        "removed": {f.name: 0 for f in chosen},
        "examples": {f.name: [] for f in chosen},
    }
    try:
        _stream(src_path, tgt_path, temps, [p.name.endswith(".gz") for p in outputs], chosen, report, skip_bad_lines)
        for temp, path in zip(temps, outputs):
            os.replace(temp, path)
        fsync_dir(out_dir)
    except BaseException:
        for temp in temps:
            temp.unlink(missing_ok=True)
        raise
    report["scores"] = {f.name: summary for f in chosen if (summary := f.summary())}
    report["seconds"] = round(time.perf_counter() - started, 3)
    atomic_write_text(out_dir / REPORT, json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    if not quiet:
        print_report(report, out_dir)
    return report


def _language(given: Optional[str], path: Path, flag: str) -> str:
    lang = given or language_of(path)
    if not lang:
        raise MtkitError(f"{path}: cannot tell its language from the file name (as in corpus.en); give {flag}")
    return lang


def _check_outputs(src_path: Path, tgt_path: Path, out_dir: Path, outputs: tuple[Path, Path]):
    if out_dir.exists() and not out_dir.is_dir():
        raise MtkitError(f"--output: {out_dir} is a file; give a folder")
    if outputs[0].name == outputs[1].name:
        raise MtkitError(f"{src_path} and {tgt_path} have the same file name; the outputs would collide, rename one")
    for path in (src_path, tgt_path):
        if (out_dir / path.name).resolve() == path.resolve():
            raise MtkitError(f"--output {out_dir}: the inputs are there and would be replaced; give another folder")


def _options(f: pair_filters.Filter) -> dict:
    return {field.name: getattr(f, field.name) for field in pair_filters.options_of(type(f))}


class _Writer:
    """One output file (gzip where its name ends in .gz), written in batches of lines and fsynced on close."""

    def __init__(self, temp: Path, gz: bool):
        self._raw = open(temp, "wb")
        self._out = gzip.GzipFile(filename="", mode="wb", fileobj=self._raw, compresslevel=6, mtime=0) if gz else None
        self._lines: list[str] = []

    def add(self, line: str):
        self._lines.append(line)
        if len(self._lines) >= WRITE_LINES:
            self.flush()

    def flush(self):
        (self._out or self._raw).write("".join(self._lines).encode("utf-8"))
        self._lines.clear()

    def close(self):
        self.flush()
        if self._out is not None:
            self._out.close()
        self._raw.flush()
        os.fsync(self._raw.fileno())
        self._raw.close()

    def abandon(self):
        self._raw.close()


def _stream(src_path: Path, tgt_path: Path, temps: list, gz: list, chosen: list, report: dict, skip_bad: bool):
    removed: Counter = Counter()
    examples = report["examples"]
    writers = [_Writer(temp, compress) for temp, compress in zip(temps, gz)]
    try:
        read = kept = bad = 0
        numbered = enumerate(file_pairs(src_path, tgt_path, skip_bad, "give --skip-bad-lines"), 1)
        for (read, raw), pair, objection in pair_filters.judged(chosen, numbered, _normalised):
            if raw is None:
                bad += 1
                continue
            src, tgt = pair
            if objection is None:
                kept += 1
                writers[0].add(src + "\n")
                writers[1].add(tgt + "\n")
                continue
            name, why = objection
            removed[name] += 1
            if len(examples[name]) < EXAMPLES:
                examples[name].append(
                    {"line": read, "src": src[:EXAMPLE_CHARS], "tgt": tgt[:EXAMPLE_CHARS], "why": why}
                )
        for writer in writers:
            writer.close()
    except BaseException:
        for writer in writers:
            writer.abandon()
        raise
    report.update(pairs_read=read, pairs_kept=kept, bad_lines_skipped=bad)
    report["removed"].update(removed)


def _normalised(item: tuple) -> Optional[tuple[str, str]]:
    pair = item[1]
    return None if pair is None else (" ".join(pair[0].split()), " ".join(pair[1].split()))


def print_report(report: dict, out_dir: Path):
    """The report as a few lines: totals, then per filter its count and its first example."""
    read, kept = report["pairs_read"], report["pairs_kept"]
    share = f" ({kept / read:.1%})" if read else ""
    print(
        f"{report['src']} / {report['tgt']} ({report['src_lang']}-{report['tgt_lang']}): {read:,} pairs read, "
        f"{kept:,} kept{share}, written to {out_dir} in {report['seconds']:.1f}s"
    )
    if report["bad_lines_skipped"]:
        print(f"  {'invalid UTF-8':<13} {report['bad_lines_skipped']:>10,}")
    for name, count in report["removed"].items():
        shown = report["examples"][name][:1]
        example = (
            f"  e.g. line {shown[0]['line']}: {shown[0]['src'][:40]!r} / {shown[0]['tgt'][:40]!r} ({shown[0]['why']})"
            if shown
            else ""
        )
        print(f"  {name:<13} {count:>10,}{example}")
    for name, summary in report.get("scores", {}).items():
        quantiles = ", ".join(f"{key} {value}" for key, value in summary.items() if key != "pairs_scored")
        print(f"  {name} scores of {summary['pairs_scored']:,} pairs: {quantiles}")
    print(f"report: {out_dir / REPORT}")
