"""The corpus of a multilingual config (``data.directions``): every direction's pairs with the target language
as a token, at the start of the source (``<2de> A man rides.``, Johnson et al. 2017; ``target_tag: source``) or
as the first token of the target (mBART, NLLB; ``target_tag: decoder``: decoding then forces it), as the splits
``prepare`` builds.

``train`` holds the training pairs of every direction, one direction after another (batches are drawn from
the whole split, so each mixes directions); each other split of a direction is its own split, named
``{split}.{src}-{tgt}`` (``valid.en-de``), so that validation and tests score each direction alone.
"""

from __future__ import annotations

from itertools import chain
from pathlib import Path
from typing import Iterator, Optional

from mtkit.config import language_tag
from mtkit.data.sources import Pair, file_pairs
from mtkit.errors import MtkitError
from mtkit.languages import run_sources
from mtkit.tokenizer import UNK

MULTILINGUAL = "mul"  # the ISO 639 code for several languages: a multilingual data dir's src_lang and tgt_lang


def open_directions(cfg) -> tuple[dict[str, Iterator[Pair]], dict[str, dict]]:
    """split -> pair iterator (train first, tags on the sources), and split -> a description for the manifest.

    Args:
        cfg: the config's ``data`` section, with ``directions``.
    """
    trains = [d for d in cfg.directions if "train" in d.splits]
    sources: dict[str, Iterator[Pair]] = {"train": chain.from_iterable(_tagged(d, "train", cfg) for d in trains)}
    described = {
        "train": {
            "src": ", ".join(d.splits["train"].src for d in trains),
            "tgt": ", ".join(d.splits["train"].tgt for d in trains),
            "directions": [d.name for d in trains],
        }
    }
    for d in cfg.directions:
        for split, spec in d.splits.items():
            if split != "train":
                sources[f"{split}.{d.name}"] = _tagged(d, split, cfg)
                described[f"{split}.{d.name}"] = {"src": spec.src, "tgt": spec.tgt}
    return sources, described


def _tagged(direction, split: str, cfg) -> Iterator[Pair]:
    spec = direction.splits[split]
    tag = language_tag(direction.tgt_lang, cfg.tag_template)
    source = cfg.target_tag == "source"
    # data.source_tag (a model that reads its source language as a token, as M2M-100 and NLLB-200): that token first
    # in the source, the target's first in the target
    src_tag = f"{language_tag(direction.src_lang, cfg.tag_template)} " if cfg.source_tag else ""
    for pair in file_pairs(Path(spec.src), Path(spec.tgt), cfg.skip_bad_lines):
        if pair is None:
            yield None
        else:
            yield (f"{tag} {pair[0]}", pair[1]) if source else (f"{src_tag}{pair[0]}", f"{tag} {pair[1]}")


def manifest_entry(cfg) -> dict:
    """What a multilingual data dir's manifest says of its directions."""
    return {
        "directions": [
            {"name": d.name, "src_lang": d.src_lang, "tgt_lang": d.tgt_lang, "splits": sorted(d.splits)}
            for d in cfg.directions
        ],
        "targets": {lang: language_tag(lang, cfg.tag_template) for lang in cfg.targets},
        "target_tag": cfg.target_tag,
    }


def check_language_tokens(cfg, tokenizer, init_from: Optional[str]) -> None:
    """A multilingual corpus encoded by another run's tokenizer (``model.init_from``, such as an imported NLLB-200
    model): each language token it puts in the text must be one token of that vocabulary."""
    sides = [(lang, tokenizer.encode_tgt) for lang in cfg.targets]
    if cfg.source_tag:
        sides += [(lang, tokenizer.encode_src) for lang in run_sources(cfg)]
    for lang, encode in sides:
        tag = language_tag(lang, cfg.tag_template)
        ids = encode([tag])[0]
        if len(ids) != 1 or ids[0] == UNK:
            raise MtkitError(
                f"data.directions: {tag!r} (language {lang!r}) is not a token of model.init_from {init_from or ''}; "
                "use the model's own language codes and its data.tag_template"
            )
