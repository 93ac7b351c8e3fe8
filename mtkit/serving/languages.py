"""The languages a model translates: its codes, read from its run without loading its weights."""

from __future__ import annotations

from pathlib import Path


def run_config(path: Path):
    """The config a model was trained with, from its checkpoint's metadata or its CTranslate2 export: no weights
    are read.

    Args:
        path: a run directory, a checkpoint or a CTranslate2 export directory.

    Returns:
        The run's ``config.Config``.

    Raises:
        MtkitError: no such path, no checkpoint in it, or a checkpoint whose metadata does not read.
    """
    # imported here: reading a checkpoint needs torch, which the rest of the server's set-up does not
    from mtkit import checkpoint as ckpt
    from mtkit import config as cfgmod
    from mtkit.interop import ct2_export as ct2

    path = Path(path)
    if ct2.is_export_dir(path):
        tree = ct2.read_export(path)[0]["config"]
    else:
        tree = ckpt.read_metadata(ckpt.resolve(path))["config"]
    return cfgmod.from_dict(tree, str(path))


def run_languages(path: Path) -> tuple[str, str]:
    """The source and target language codes of a model, from its config's data section.

    Args:
        path: a run directory, a checkpoint or a CTranslate2 export directory.

    Returns:
        (source, target); a multilingual model's target is ``mul`` (its targets: ``TranslationModel.targets``).
    """
    from mtkit.languages import run_languages as data_languages

    return data_languages(run_config(path).data)[0]


def data_directions(data) -> tuple[tuple[tuple[str, str], ...], bool]:
    """The directions a run serves, from its ``data`` section, and whether it is multilingual.

    A bilingual run serves (source, target); a multilingual one with one source serves it into each of its targets;
    one with several sources serves the directions it was trained on (those with a ``train`` split); the others are
    zero-shot, reached by pivoting unless a models file lists them. A many-to-many one (``data.languages``) serves
    each of its languages into each other.

    Returns:
        ((source, target), ...) in the order of the config, and True for a multilingual run.
    """
    if not data.multilingual:
        return ((data.src_lang, data.tgt_lang),), False
    if data.languages:  # a many-to-many model (an imported M2M-100 or NLLB-200): each language into each other
        return tuple((s, t) for s in data.languages for t in data.languages if s != t), True
    sources = list(dict.fromkeys(d.src_lang for d in data.directions))
    if len(sources) == 1:
        return tuple((sources[0], t) for t in data.targets), True
    trained = [(d.src_lang, d.tgt_lang) for d in data.directions if "train" in d.splits]
    return tuple(dict.fromkeys(trained)), True
