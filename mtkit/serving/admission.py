"""What a request must be before its sentences queue: within the server's bounds, and each sentence's target and
instructions ones its model can follow."""

from __future__ import annotations

from typing import Optional

from mtkit.errors import MtkitError
from mtkit.flags import ServeLimits
from mtkit.inference.segments import Segment
from mtkit.serving.errors import ApiError


def check_bounds(lines: list, limits: ServeLimits) -> None:
    """Accept ``lines`` within the request bounds of ``limits``.

    Raises:
        ApiError: 413 for too many sentences or characters.
    """
    most = min(limits.max_sentences, limits.queue_size)  # more could never fit in the queue
    if len(lines) > most:
        raise ApiError(413, f"{len(lines)} sentences in one request; at most {most}")
    chars = sum(_chars(line) for line in lines)
    if chars > limits.max_chars:
        raise ApiError(413, f"{chars} characters in one request; at most {limits.max_chars}")


def check_lines(model, lines: list, target: Optional[str], multilingual: bool, numbers=None) -> None:
    """Accept each segment's instructions and target, as ``model`` checks them.

    Args:
        model: the loaded model.
        lines: the sentences.
        target: the target language of the call (a multilingual model's), or None.
        multilingual: whether the model translates into several languages (its target is then always checked).
        numbers: each line's number in its request (default: 1, 2, ...), for the messages.

    Raises:
        ApiError: 400 for a target the model does not translate into, 422 for instructions it cannot follow.
    """
    check_target = getattr(model, "check_target", None)
    for i, line in enumerate(lines):
        number = numbers[i] if numbers is not None else i + 1
        own = line.target if isinstance(line, Segment) else None
        if check_target is not None and (multilingual or own is not None):
            try:
                check_target(own or target)
            except MtkitError as err:
                raise ApiError(400, f"text item {number}: {err}") from None
        if isinstance(line, Segment):
            try:
                model.check(line)
            except MtkitError as err:
                raise ApiError(422, f"text item {number}: {err}") from None


def _chars(line) -> int:
    """A line's characters: a segment's instructions count too."""
    if isinstance(line, Segment):
        return len(line.text) + len(line.prefix or "") + sum(map(len, line.constraints + line.avoid))
    return len(line)
