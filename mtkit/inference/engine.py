"""What every translation engine shares: source encoding (normalisation and truncation to the model's length),
a sentence's instructions as target subwords, length-sorted batching, and ``Engine``, the base class of
``TorchEngine`` (torch_engine.py) and ``Ct2Engine`` (ct2_engine.py). ``api.TranslationModel`` wraps either.
"""

from __future__ import annotations

import abc
from typing import Iterator, Optional

from mtkit.decoding.guidance import Guidance
from mtkit.decoding.hypothesis import Decoded
from mtkit.errors import MtkitError
from mtkit.inference.options import Options, check_instructions
from mtkit.inference.segments import Segment
from mtkit.tokenizer import UNK


def batches(ids: list[list[int]], options: Options) -> Iterator[list[int]]:
    """Indices of the non-empty ``ids``, shortest first, cut into batches of at most ``batch_size`` sentences and,
    with ``batch_tokens``, at most that many padded source tokens (sentences x longest, EOS included)."""
    batch: list[int] = []
    for i in sorted((i for i in range(len(ids)) if ids[i]), key=lambda i: len(ids[i])):  # empty: no model call
        width = len(ids[i]) + 1  # the longest so far, as the order is by length
        if batch and (
            len(batch) == options.batch_size
            or (options.batch_tokens is not None and (len(batch) + 1) * width > options.batch_tokens)
        ):
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


# Joined batches share one source width, the longest: every step's cross-attention reads the padding too, and
# greedy's drops copy it. A batch joins only while the group's padded sources stay within this many times what its
# batches pad on their own (docs/benchmarks.md, section 21).
JOIN_PADDING = 1.3


def decode_groups(ids: list[list[int]], options: Options) -> Iterator[tuple[list[int], list[int]]]:
    """``batches``, joined: consecutive batches decoded as one while their sentences x hypotheses per sentence
    (``Options.rows_per_sentence``: ``beam_size``, or ``nbest`` when sampling) stay within ``step_rows`` and their
    sources, padded to the longest, within ``JOIN_PADDING`` times the positions of each batch padded on its own.
    Yields each group's indices and
    its batches' sizes, which ``Seq2Seq.encode_parts`` encodes one by one: the encoder keeps its short, even
    batches and the decoder's per-step work (one call per small operation) is shared by more hypotheses."""
    most = max(1, options.step_rows // options.rows_per_sentence)
    group: list[int] = []
    sizes: list[int] = []
    own = 0  # the group's source positions as its batches pad them
    for batch in batches(ids, options):
        longest = len(ids[batch[-1]]) + 1  # batches come shortest first: the group's longest once it joins
        if group and (
            len(group) + len(batch) > most
            or (len(group) + len(batch)) * longest > JOIN_PADDING * (own + len(batch) * longest)
        ):
            yield group, sizes
            group, sizes, own = [], [], 0
        group += batch
        sizes.append(len(batch))
        own += len(batch) * longest
    if group:
        yield group, sizes


def max_chars_for(max_src: int) -> int:
    """Characters of a line beyond which it has more than ``max_src`` subwords: a SentencePiece piece spans at
    most 16 characters (its default ``max_sentencepiece_length``) and NFKC normalisation shrinks text at most a
    few times; 64 characters per subword leaves room for both. The one exception is a long run of characters
    the vocabulary lacks, which SentencePiece makes a single unknown subword: such a line is cut too, and
    words after the run may be lost, as they would be to truncation on a line of real subwords."""
    return 64 * (max_src + 1)


class Engine(abc.ABC):
    """Source lines -> n-best hypotheses per line: ``encode`` the lines (shared), then ``translate_ids`` (each
    engine's own), with each line's instructions from ``guidance`` where it has some.

    ``options`` are the options the engine was loaded with; each call may pass others (``Options.replace``).
    ``truncated`` counts the lines cut to the model's length; ``languages`` are the model's (source, target)
    codes, set by whoever loads it ("" where unknown).
    """

    languages: tuple[str, str] = ("", "")
    targets: tuple[str, ...] = ()  # a multilingual model's target languages
    target_tag: str = "source"  # where its language token goes (config data.target_tag)
    tag_template: str = "<2{lang}>"  # the token's text (config data.tag_template)
    source_tag: bool = False  # the source language's token first in the source (config data.source_tag)
    sources: tuple[str, ...] = ()  # the languages it translates from, where it reads them as a token

    def __init__(self, tokenizer, options: Options, max_positions: int):
        self.tokenizer, self.options = tokenizer, options
        self.max_src = max_positions - 1  # room for EOS
        self.max_chars = max_chars_for(self.max_src)
        self.truncated = 0

    def describe(self) -> str:
        """One line on what computes and how (``mtkit translate --verbose``)."""
        return f"{type(self).__name__}, {self.options.device}, dtype {self.options.dtype}"

    def restart_draws(self, options: Options) -> None:
        """Make the next call with ``options`` draw as a freshly loaded model would (its seed's stream from the
        start); an engine that does not draw need not do anything."""
        return None

    def encode(self, lines: list[str]) -> list[list[int]]:
        # a line far over the limit is cut before SentencePiece sees it (cost bounded per line) and counts as
        # truncated; see max_chars_for for why that loses nothing but the tail any truncation loses
        cut = [len(line) > self.max_chars for line in lines]
        ids = self.tokenizer.encode_src(
            [" ".join((line[: self.max_chars] if c else line).split()) for line, c in zip(lines, cut)]
        )
        out = []
        for seq, was_cut in zip(ids, cut):
            if len(seq) > self.max_src or was_cut:
                self.truncated += 1
                seq = seq[: self.max_src]
            out.append(seq)
        return out

    def guidance(self, segment: Segment, options: Optional[Options] = None) -> Optional[Guidance]:
        """A segment's instructions as target subwords (None for a plain line); raises ``MtkitError`` for those that
        cannot be followed with this model under ``options`` (default: the engine's).

        Each phrase is encoded by the target SentencePiece model on its own, whitespace runs made single spaces, so
        it matches the output where it stands as whole words. The prefix is encoded the same way, as it is: where
        it ends inside a word, the model may finish that word with further subwords or start a new one; where it
        ends in a space, the next subword must start a word. The text of the output is the prefix as given followed
        by the detokenised continuation (``api.TranslationModel``), so it always starts with the prefix."""
        if segment.plain:
            return None
        check_instructions(options or self.options, bool(segment.constraints))
        prefix = segment.prefix if segment.prefix and segment.prefix.strip() else ""
        phrases = [prefix, *segment.constraints, *segment.avoid]
        ids = [tuple(x) for x in self.tokenizer.encode_tgt([" ".join(p.split()) for p in phrases])]
        prefix_ids, rest = ids[0], ids[1:]
        constraints, avoid = rest[: len(segment.constraints)], rest[len(segment.constraints) :]
        for text, phrase in zip(segment.constraints, constraints):
            if not phrase or UNK in phrase:
                raise MtkitError(f"constraint {text!r} has characters the target vocabulary lacks; it cannot be met")
        for text, phrase in zip(segment.avoid, avoid):
            for c_text, c in zip(segment.constraints, constraints):
                if any(c[i : i + len(phrase)] == phrase for i in range(len(c) - len(phrase) + 1)):
                    raise MtkitError(f"constraint {c_text!r} contains the avoided phrase {text!r}; drop one of them")
        need = len(prefix_ids) + sum(len(c) for c in constraints)
        if need > self.max_src:
            raise MtkitError(
                f"the prefix and constraints take {need} target subwords; this model writes at most {self.max_src}"
            )
        return Guidance(prefix_ids, tuple(constraints), tuple(a for a in avoid if a), prefix[-1:].isspace())

    @abc.abstractmethod
    def translate_ids(
        self,
        ids: list[list[int]],
        guidance: Optional[list[Optional[Guidance]]] = None,
        options: Optional[Options] = None,
    ) -> list[list[Decoded]]:
        """The n-best hypotheses of each source, best first.

        Args:
            ids: source subword ids per line; an empty list gets no hypothesis.
            guidance: each line's instructions (``guidance``), or None where all lines are plain.
            options: this call's options (default: the engine's).

        Returns:
            Up to ``options.nbest`` hypotheses per line, best first.
        """
