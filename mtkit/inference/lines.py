"""`mtkit translate`'s input: lines read lazily from a byte stream (cut at a byte bound, any bytes decoded), in
chunks; from a pipe or terminal a chunk is also handed on once no more input is waiting, so a pipe gets each
answer before its end."""

from __future__ import annotations

import os
import select
from typing import IO, Iterable, Iterator, Optional


def read_lines(stream: IO[bytes], max_bytes: Optional[int] = None) -> Iterator[str]:
    """Lines of a byte stream as text; invalid UTF-8 is replaced (U+FFFD), never fatal.

    With ``max_bytes``, a longer line is cut there and the rest of it is skipped without being held in
    memory, so one huge line (a 1 GB file without a newline) costs ``max_bytes``, not its size.
    """
    if max_bytes is None:
        for raw in stream:
            yield raw.decode("utf-8", errors="replace").rstrip("\r\n")
        return
    while raw := stream.readline(max_bytes):
        if len(raw) == max_bytes and not raw.endswith(b"\n"):
            while (rest := stream.readline(max_bytes)) and not rest.endswith(b"\n"):
                pass
        yield raw.decode("utf-8", errors="replace").rstrip("\r\n")


def chunks(lines: Iterable[str], size: int) -> Iterator[list[str]]:
    chunk: list[str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def pipe_chunks(fd: int, size: int, max_bytes: int, wait: float = 0.05) -> Iterator[list[str]]:
    """``chunks(read_lines(...), size)`` for a pipe or terminal, read from its file descriptor: a chunk also
    ends when nothing more arrives within ``wait`` seconds, so a program that writes one line to
    ``mtkit translate`` and waits for the answer gets it at once (not at EOF or after ``size`` lines), while
    a piped file still fills whole chunks. Lines are split and cut at ``max_bytes`` exactly as ``read_lines``
    does; memory holds at most one chunk, one read block and one partial line.
    """
    pending = b""  # the start of a line whose end has not arrived yet
    skipping = False  # inside a line already cut at max_bytes and handed on
    chunk: list[str] = []

    def decode(raw: bytes) -> str:
        return raw.decode("utf-8", errors="replace").rstrip("\r\n")

    while True:
        if chunk and not _readable(fd, wait):
            yield chunk
            chunk = []
        block = os.read(fd, 1 << 16)
        if not block:
            if pending and not skipping:
                chunk.append(decode(pending))
            if chunk:
                yield chunk
            return
        *complete, pending = (pending + block).split(b"\n")
        for raw in complete:
            if skipping:
                skipping = False  # the rest of a line already cut
            else:
                chunk.append(decode(raw[:max_bytes]))
        if len(pending) >= max_bytes:
            if not skipping:
                chunk.append(decode(pending[:max_bytes]))
                skipping = True
            pending = b""
        while len(chunk) >= size:
            yield chunk[:size]
            chunk = chunk[size:]


def _readable(fd: int, wait: float) -> bool:
    try:
        return bool(select.select([fd], [], [], wait)[0])
    except (OSError, ValueError):  # not selectable: just read (blocking)
        return True
