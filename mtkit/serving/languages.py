"""The language pair a model translates: its codes, read from its run, and their English names."""

from __future__ import annotations

from pathlib import Path

LANGUAGE_NAMES = {
    "ar": "Arabic", "cs": "Czech", "de": "German", "en": "English", "es": "Spanish", "fi": "Finnish",
    "fr": "French", "it": "Italian", "ja": "Japanese", "nl": "Dutch", "pl": "Polish", "pt": "Portuguese",
    "ro": "Romanian", "ru": "Russian", "tr": "Turkish", "uk": "Ukrainian", "zh": "Chinese",
}  # fmt: skip


def language_name(code: str) -> str:
    """The English name of language ``code``; the code itself for one not in ``LANGUAGE_NAMES``."""
    return LANGUAGE_NAMES.get(code, code)


def run_languages(path: Path) -> tuple[str, str]:
    """The source and target language codes of a model, from its config's data section.

    Args:
        path: a run directory, a checkpoint or a CTranslate2 export directory.

    Returns:
        (source, target); a multilingual model's target is ``mul`` (its targets: ``TranslationModel.targets``).
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
    from mtkit.inference.languages import run_languages as data_languages

    return data_languages(cfgmod.from_dict(tree, str(path)).data)[0]
