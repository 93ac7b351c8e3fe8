"""What every translation engine shares: the decoding options, source encoding (normalisation and truncation to
the model's length), length-sorted batching, and ``Engine``, the base class ``mtkit translate`` drives. The torch
engine is ``torch_engine.Translator``, the CTranslate2 one ``ct2.Ct2Translator``; ``api.TranslationModel`` wraps either.
"""

from __future__ import annotations

import abc
import dataclasses
from typing import Iterator, Optional

from mtkit import config as cfgmod
from mtkit.decoding.guidance import Guidance
from mtkit.decoding.hypothesis import Hypothesis
from mtkit.errors import MtkitError
from mtkit.inference.segments import Segment
from mtkit.tokenizer import UNK

_DECODING = cfgmod.DecodingConfig()  # the schema holds the defaults; Options repeats none of them
_SAMPLING = cfgmod.SamplingOptions()


@dataclasses.dataclass
class Options:
    beam_size: int = _DECODING.beam_size
    length_penalty: float = _DECODING.length_penalty
    max_len_a: float = _DECODING.max_len_a
    max_len_b: int = _DECODING.max_len_b
    batch_size: int = _DECODING.batch_size
    batch_tokens: Optional[int] = _DECODING.batch_tokens
    chunk_size: int = _DECODING.chunk_size
    nbest: int = _DECODING.nbest
    stopping: str = _DECODING.stopping
    sampling: bool = False
    temperature: float = _SAMPLING.temperature
    top_k: int = _SAMPLING.top_k
    top_p: float = _SAMPLING.top_p
    seed: int = _SAMPLING.seed
    need_attention: bool = False

    @classmethod
    def from_config(cls, dec: cfgmod.DecodingConfig, **run_options) -> "Options":
        """The decoding section's options plus this run's (sampling, seed, need_attention)."""
        return cls(
            beam_size=dec.beam_size,
            length_penalty=dec.length_penalty,
            max_len_a=dec.max_len_a,
            max_len_b=dec.max_len_b,
            batch_size=dec.batch_size,
            batch_tokens=dec.batch_tokens,
            chunk_size=dec.chunk_size,
            nbest=dec.nbest,
            stopping=dec.stopping,
            **run_options,
        )


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


def max_chars_for(max_src: int) -> int:
    """Characters of a line beyond which it has more than ``max_src`` subwords: a SentencePiece piece spans at
    most 16 characters (its default ``max_sentencepiece_length``) and NFKC normalisation shrinks text at most a
    few times; 64 characters per subword leaves room for both. The one exception is a long run of characters
    the vocabulary lacks, which SentencePiece makes a single unknown subword: such a line is cut too, and
    words after the run may be lost, as they would be to truncation on a line of real subwords."""
    return 64 * (max_src + 1)


class Engine(abc.ABC):
    """Source lines -> n-best hypotheses (``search.Hypothesis``) per line: ``encode`` the lines (shared), then
    ``translate_ids`` (each engine's own), with the lines' instructions from ``guidance`` where they have some.
    ``truncated`` counts the lines cut to the model's length; ``attention``: whether hypotheses can carry
    cross-attention (``Options.need_attention``); ``constraints``: whether the engine can honour constraints."""

    attention = True
    constraints = True

    def __init__(self, tokenizer, options: Options, max_positions: int):
        self.tokenizer, self.opt = tokenizer, options
        self.max_src = max_positions - 1  # room for EOS
        self.max_chars = max_chars_for(self.max_src)
        self.truncated = 0

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

    def guidance(self, segment: Segment) -> Optional[Guidance]:
        """A segment's instructions as target subwords (None for a plain line); raises ``MtkitError`` for those this
        engine cannot follow with this model.

        Each phrase is encoded by the target SentencePiece model on its own, whitespace runs made single spaces, so
        it matches the output where it stands as whole words. The prefix is encoded the same way, as it is: where
        it ends inside a word, the model may finish that word with further subwords or start a new one; where it
        ends in a space, the next subword must start a word. The text of the output is the prefix as given followed
        by the detokenised continuation (``api.TranslationModel``), so it always starts with the prefix."""
        if segment.plain:
            return None
        if segment.constraints and not self.constraints:
            raise MtkitError("constraints need --engine torch (the CTranslate2 engine has no constrained decoding)")
        if segment.constraints and self.opt.sampling:
            raise MtkitError("constraints need beam search: sampling cannot honour them; drop --sampling")
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
        self, ids: list[list[int]], guidance: Optional[list[Optional[Guidance]]] = None
    ) -> list[list[Hypothesis]]:
        """The n-best hypotheses of each source id list, best first (an empty list for an empty source);
        ``guidance``: each line's instructions (``guidance``), or None for plain lines."""
