"""``mtkit translate-file`` and ``TranslationModel.translate_file``: a document in, its translation out, written
whole or not at all."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from mtkit.documents.formats import format_of, translator_of
from mtkit.errors import MtkitError
from mtkit.files import atomic_write_bytes

MAX_BYTES = 50 * 1024 * 1024  # a larger document is refused (--max-bytes raises it)
PROGRESS_CHUNK = 256  # texts per model call when progress is shown


@dataclass(frozen=True)
class DocumentStats:
    """What translating one document did: its format, size in bytes, texts and sentences translated, seconds."""

    format: str
    bytes_in: int
    texts: int
    sentences: int
    seconds: float


def translate_bytes(
    model,
    data: bytes,
    fmt: str,
    *,
    where: str = "document",
    progress: Optional[Callable[[int, int], None]] = None,
) -> tuple[bytes, DocumentStats]:
    """Translate a document held in memory.

    Args:
        model: a ``TranslationModel`` (``mtkit.load``).
        data: the document's bytes.
        fmt: its format (``formats.FORMATS``).
        where: what to call the document in errors (its file name).
        progress: called with (texts done, texts in all) as the translation goes.

    Returns:
        The translated document's bytes, and what it took.

    Raises:
        MtkitError: a document its format's library cannot read, named by ``where``.
    """
    started = time.perf_counter()
    counts = {"texts": 0, "sentences": 0}

    def translate(texts: list, markup: str) -> list:
        texts = list(texts)
        model.check_format(markup)
        out = []
        step = PROGRESS_CHUNK if progress is not None else max(len(texts), 1)
        for start in range(0, len(texts), step):
            found = model.translate_batch(texts[start : start + step], scores=False, format=markup)
            out += [t.text for t in found]
            counts["sentences"] += sum(max(len(t.sentences), 1) for t in found if t.hypotheses)
            if progress is not None:
                progress(start + len(found), len(texts))
        counts["texts"] += len(texts)
        return out

    try:
        translated = translator_of(fmt)(data, translate)
    except MtkitError as err:
        raise MtkitError(f"{where}: {err}") from None
    stats = DocumentStats(fmt, len(data), counts["texts"], counts["sentences"], time.perf_counter() - started)
    return translated, stats


def translate_file(
    model,
    source: Path,
    target: Path,
    *,
    fmt: Optional[str] = None,
    max_bytes: int = MAX_BYTES,
    show_progress: bool = False,
) -> DocumentStats:
    """Translate the document ``source`` into ``target`` (written whole or not at all).

    Args:
        model: a ``TranslationModel``.
        source: the document.
        target: where its translation goes; its folder must exist.
        fmt: the format (default: from ``source``'s name).
        max_bytes: a larger document is refused.
        show_progress: a progress bar on stderr.

    Raises:
        MtkitError: a missing, unreadable, too large or unknown document, one its library cannot read, or a
            target that cannot be written; one line naming the file.
    """
    source, target = Path(source), Path(target)
    fmt = format_of(source.name, fmt)
    if not source.is_file():
        raise MtkitError(f"{source}: document not found")
    size = source.stat().st_size
    if size > max_bytes:
        raise MtkitError(f"{source}: {size:,} bytes; documents of at most {max_bytes:,} bytes are translated")
    if target.resolve() == source.resolve():
        raise MtkitError(f"{target}: is the input document; write the translation to another file")
    if not target.parent.is_dir():
        raise MtkitError(f"{target}: folder {target.parent} not found")
    try:
        data = source.read_bytes()
    except OSError as err:
        raise MtkitError(f"{source}: cannot read ({err.strerror or err})") from None
    if show_progress:
        translated, stats = _with_progress(model, data, fmt, str(source))
    else:
        translated, stats = translate_bytes(model, data, fmt, where=str(source))
    try:
        atomic_write_bytes(target, translated)
    except OSError as err:
        raise MtkitError(f"{target}: cannot write ({err.strerror or err})") from None
    return stats


def _with_progress(model, data: bytes, fmt: str, where: str):
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(file=sys.stderr)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task(f"{Path(where).name}: texts", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return translate_bytes(model, data, fmt, where=where, progress=progress)
