"""What every pair filter is (mtkit/data/filters.py registers them): a dataclass whose fields are its options,
and ``judged``, which runs a list of filters over a stream of pairs.

Most filters judge one pair at a time (``check``). A filter that scores with a model (``batched``) judges a list
of pairs at once (``check_batch``); ``judged`` then reads the stream in chunks of ``CHUNK`` pairs, runs the
one-pair filters on each pair of a chunk in order, and hands the pairs they kept to the batched filters. Either
way memory stays bounded and the pairs come out in the order they came in.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, ClassVar, Iterable, Iterator, Optional, TypeVar

from mtkit.errors import MtkitError

CHUNK = 4096  # pairs read ahead when a batched filter is among the filters
Item = TypeVar("Item")
Objection = Optional[tuple[str, str]]  # (filter name, why) or None: kept


def option(default, doc: str):
    """A filter option: its default and the line docs/data.md shows for it."""
    kwargs = {"default_factory": lambda: type(default)(default)} if isinstance(default, (list, dict)) else {}
    return dataclasses.field(**(kwargs or {"default": default}), metadata={"doc": doc})


@dataclasses.dataclass
class Filter:
    """What every filter has: its name, its options (the dataclass fields) and the pair's languages."""

    name: ClassVar[str] = ""
    batched: ClassVar[bool] = False  # judges lists of pairs (check_batch) rather than one pair (check)
    default: ClassVar[bool] = True  # runs when no filter is named (mtkit clean without --filters)
    src_lang: str = dataclasses.field(default="", metadata={"internal": True})
    tgt_lang: str = dataclasses.field(default="", metadata={"internal": True})
    where: str = dataclasses.field(default="filters", metadata={"internal": True})
    lang_keys: tuple = dataclasses.field(default=("src_lang", "tgt_lang"), metadata={"internal": True})

    def check(self, src: str, tgt: str) -> Optional[str]:
        """None to keep the pair; else why it goes."""
        raise NotImplementedError

    def check_batch(self, pairs: list[tuple[str, str]]) -> list[Optional[str]]:
        """``check`` of each pair, for a list of them."""
        return [self.check(src, tgt) for src, tgt in pairs]

    def summary(self) -> Optional[dict]:
        """What the filter saw, for the report (a scoring filter's score quantiles); None: nothing to say."""
        return None

    def bad(self, key: str, what: str) -> MtkitError:
        return MtkitError(f"{option_key(self.where, self.name, key)}: {what}")

    def positive(self, *keys: str, at_most: Optional[float] = None):
        for key in keys:
            value = getattr(self, key)
            if value <= 0 or (at_most is not None and value > at_most):
                span = f"in (0, {at_most}]" if at_most is not None else "above 0"
                raise self.bad(key, f"must be {span} (got {value})")


def option_key(where: str, name: str, key: str = "") -> str:
    """How an error names a filter's option: ``data.filters.copy.max_similarity`` in a config, ``--option
    copy.max_similarity`` on the command line (``where`` ``--filters``)."""
    path = f"{name}.{key}" if key else name
    return f"--option {path}" if where == "--filters" else f"{where}.{path}"


def option_setting(where: str, path: str, value: str) -> str:
    """How to set an option, for an error's advice: ``data.filters.script.scripts: {...}`` or ``--option
    'script.scripts={...}'``."""
    return f"--option '{path}={value}'" if where == "--filters" else f"{where}.{path}: {value}"


def first_objection(filters: list[Filter], src: str, tgt: str) -> Objection:
    """(filter name, why) of the first one-pair filter that removes the pair; None if every one keeps it (batched
    filters are not asked)."""
    for f in filters:
        if not f.batched:
            why = f.check(src, tgt)
            if why is not None:
                return f.name, why
    return None


def judged(
    filters: list[Filter],
    items: Iterable[Item],
    pair_of: Callable[[Item], Optional[tuple[str, str]]],
    chunk: int = CHUNK,
) -> Iterator[tuple[Item, Optional[tuple[str, str]], Objection]]:
    """Each item with its pair and the filters' verdict, in the order the items came.

    Args:
        filters: ready filters, in the order they run; the batched ones run after the one-pair ones.
        items: anything; ``pair_of`` is called on each in order as it is read (so it may keep state, such as a
            caller's own duplicate check).
        pair_of: the (src, tgt) an item puts to the filters, or None for an item they do not judge (its verdict
            is None).
        chunk: pairs read ahead when a batched filter is among ``filters``.

    Yields:
        (item, pair or None, None or (filter name, why)).
    """
    batched = [f for f in filters if f.batched]
    if not batched:
        for item in items:
            pair = pair_of(item)
            yield item, pair, (None if pair is None else first_objection(filters, *pair))
        return
    rows: list = []
    for item in items:
        pair = pair_of(item)
        rows.append([item, pair, None if pair is None else first_objection(filters, *pair)])
        if len(rows) >= chunk:
            yield from _batch_judged(batched, rows)
            rows = []
    yield from _batch_judged(batched, rows)


def _batch_judged(batched: list[Filter], rows: list) -> Iterator[tuple]:
    for f in batched:
        open_rows = [row for row in rows if row[1] is not None and row[2] is None]
        if not open_rows:
            break
        for row, why in zip(open_rows, f.check_batch([row[1] for row in open_rows])):
            if why is not None:
                row[2] = (f.name, why)
    for item, pair, objection in rows:
        yield item, pair, objection
