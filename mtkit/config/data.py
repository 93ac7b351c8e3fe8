"""The config's data section: the language pair (or directions), the splits as files or a Hugging Face dataset,
cleaning, the filters of noisy corpora, mixed-in parts and the SentencePiece vocabulary."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import Field, field_validator, model_validator

from mtkit.config.section import Section


class ParallelFiles(Section):
    """One split as two line-aligned text files (plain or .gz)."""

    src: str
    tgt: str


class Direction(Section):
    """One translation direction of a multilingual model: its languages and its splits (any may be missing; a
    direction without train is only evaluated). One pair of files may serve several directions."""

    src_lang: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,15}$")
    tgt_lang: str = Field(pattern=r"^[A-Za-z][A-Za-z0-9_-]{0,15}$")
    splits: dict[str, ParallelFiles] = Field(default_factory=dict, description="split name -> files")

    @property
    def name(self) -> str:
        return f"{self.src_lang}-{self.tgt_lang}"


class HFDataset(Section):
    """A Hugging Face ``datasets`` source read from local files only (no hub access).

    ``path`` is either a directory written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``
    (``format: disk``), or a builder name such as ``json``/``csv``/``parquet`` with ``data_files``.
    Rows are either ``{"translation": {src_lang: ..., tgt_lang: ...}}`` or flat columns named by
    ``src_field`` / ``tgt_field``.
    """

    format: Literal["disk", "json", "csv", "parquet", "text"] = "disk"
    path: str
    data_files: Optional[dict[str, str]] = None
    splits: dict[str, str] = Field(default_factory=lambda: {"train": "train", "valid": "validation", "test": "test"})
    src_field: Optional[str] = None
    tgt_field: Optional[str] = None


class MixPart(Section):
    """Extra training pairs mixed into data.splits.train at a ratio (back-translations, say): ``ratio`` pairs of
    this part per pair of the train split, drawn deterministically by ``seed`` (docs/data.md)."""

    src: str
    tgt: str
    ratio: float = Field(gt=0, le=1000, description="pairs of this part per pair read from data.splits.train")
    seed: int = Field(1, description="seed of the draw of the pairs kept or repeated")


# the filters of noisy corpora (mtkit/data/filters.py registers them, in the order they run)
FILTER_NAMES = ("length", "char_ratio", "url", "repeat", "copy", "script", "language", "dedup", "dcce")


class DataConfig(Section):
    src_lang: str = "en"
    tgt_lang: str = "de"
    dir: str = Field(description="where prepare writes the binarised data, tokenizer and manifest")
    splits: dict[str, ParallelFiles] = Field(default_factory=dict, description="split name -> files; 'train' required")
    hf: Optional[HFDataset] = None
    # cleaning
    max_chars: int = Field(1000, gt=0, description="drop training pairs with a side longer than this (characters)")
    max_tokens: int = Field(200, gt=0, description="drop training pairs with a side longer than this (subwords)")
    max_length_ratio: float = Field(
        3.0, gt=0, description="drop training pairs whose subword length ratio exceeds this"
    )
    dedup: bool = False
    skip_bad_lines: bool = Field(False, description="drop lines that are not valid UTF-8 instead of failing")
    filters: Union[list[str], dict[str, Optional[dict[str, Any]]]] = Field(
        default_factory=list,
        description="filters of noisy training pairs (docs/data.md): a list of names, or name -> options",
    )
    mix: list[MixPart] = Field(
        default_factory=list, description="more training pairs, each part at a ratio to data.splits.train"
    )
    # tokenizer
    vocab_size: int = Field(8000, gt=4)
    spm_model_type: Literal["bpe", "unigram"] = "bpe"
    joint_vocab: bool = True
    character_coverage: float = Field(1.0, gt=0, le=1)
    spm_input_sentence_size: int = Field(2_000_000, gt=0, description="sentences sampled to train SentencePiece")
    user_symbols: list[Annotated[str, Field(pattern=r"^\S+$")]] = Field(
        default_factory=list,
        description="pieces SentencePiece keeps whole wherever they occur (a back-translation tag such as <BT>)",
    )
    # subword regularisation of the training split (BPE-dropout for bpe models, sampling for unigram ones)
    src_subword_alpha: float = Field(0.0, ge=0, lt=1, description="bpe: merge dropout probability; unigram: smoothing")
    tgt_subword_alpha: float = Field(0.0, ge=0, lt=1)
    subword_samples: int = Field(0, ge=0, le=1000, description="sampled copies of train; epoch e reads copy (e-1) % n")
    # multilingual: several directions in one model, the target language as a token at the start of the source
    directions: list[Direction] = Field(default_factory=list, description="instead of src_lang, tgt_lang, splits")
    target_tag: Literal["source", "decoder"] = Field(
        "decoder", description="where the target-language token goes: the decoder's first token, or first in the source"
    )
    tag_template: str = Field(
        "<2{lang}>", pattern=r"^\S*\{lang\}\S*$", description="the language token's text ({lang}: the code)"
    )
    languages: list[str] = Field(
        default_factory=list,
        description="instead of directions: a many-to-many model's languages, each into each other (imported models)",
    )
    source_tag: bool = Field(False, description="the source language's token first in the source (before its text)")
    temperature: float = Field(
        1.0, ge=1.0, le=100.0, description="directions' training pairs sampled in proportion to size ** (1/T)"
    )

    @property
    def multilingual(self) -> bool:
        return bool(self.directions or self.languages)

    @property
    def targets(self) -> list[str]:
        """The target languages, in the order the directions first name them (or ``languages``)."""
        if self.languages:
            return list(self.languages)
        return list(dict.fromkeys(d.tgt_lang for d in self.directions)) if self.directions else [self.tgt_lang]

    @field_validator("filters")
    @classmethod
    def _known_filters(cls, filters):
        for name in filters:
            if name not in FILTER_NAMES:
                raise ValueError(f"unknown filter {name!r}; known filters: {', '.join(FILTER_NAMES)}")
        return filters

    @model_validator(mode="after")
    def _directions(self):
        if self.languages:
            if self.directions or self.splits or self.hf is not None:
                raise ValueError("data.languages (a many-to-many model) goes without directions, splits and hf")
            if len(set(self.languages)) != len(self.languages) or len(self.languages) < 2:
                raise ValueError("data.languages: give two or more languages, each once")
            return self
        if self.source_tag and not self.directions:
            raise ValueError("data.source_tag is for data.directions or data.languages (a multilingual model)")
        if self.source_tag and self.target_tag != "decoder":
            raise ValueError(
                "data.source_tag puts the source language's token first in the source: it goes with target_tag: decoder"
            )
        if not self.directions:
            if self.temperature != 1.0 or self.target_tag != "decoder" or self.tag_template != "<2{lang}>":
                raise ValueError("temperature, target_tag, tag_template are for data.directions (a multilingual model)")
            return self
        if self.filters:
            raise ValueError("data.filters is for one language pair (data.src_lang, data.tgt_lang), not directions")
        if self.mix:
            raise ValueError("data.mix is for one language pair (data.splits.train), not directions")
        if self.splits or self.hf is not None:
            raise ValueError("give either data.directions (multilingual) or data.splits / data.hf, not both")
        if not self.joint_vocab:
            raise ValueError("data.directions needs joint_vocab: true (one vocabulary for every language)")
        names = [d.name for d in self.directions]
        for d in self.directions:
            if d.src_lang == d.tgt_lang:
                raise ValueError(f"direction {d.name}: source and target are the same language")
            if names.count(d.name) > 1:
                raise ValueError(f"direction {d.name} is given twice; merge its splits into one entry")
        return self

    @model_validator(mode="after")
    def _consistent(self):
        sampling = self.src_subword_alpha > 0 or self.tgt_subword_alpha > 0
        if sampling and not self.subword_samples:
            raise ValueError(
                "src_subword_alpha / tgt_subword_alpha need subword_samples (sampled copies of the "
                "training split, e.g. 20)"
            )
        if self.subword_samples and not sampling:
            raise ValueError("subword_samples needs src_subword_alpha or tgt_subword_alpha above 0")
        return self
