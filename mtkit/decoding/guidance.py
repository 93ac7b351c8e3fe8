"""One sentence's decoding instructions as target token ids (no torch: the CTranslate2 engine reads them too)."""

from __future__ import annotations

from dataclasses import dataclass

Phrase = tuple[int, ...]


@dataclass(frozen=True)
class Guidance:
    """One sentence's instructions as target token ids.

    ``new_word``: the token after the prefix must start a word (the prefix text ended in a space), or be EOS.
    """

    prefix: Phrase = ()
    constraints: tuple[Phrase, ...] = ()
    avoid: tuple[Phrase, ...] = ()
    new_word: bool = False

    def __bool__(self) -> bool:
        return bool(self.prefix or self.constraints or self.avoid)
