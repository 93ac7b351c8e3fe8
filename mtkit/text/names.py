"""The English names of language codes, as LibreTranslate's language list and Argos packages give them."""

LANGUAGE_NAMES = {
    "ar": "Arabic", "cs": "Czech", "de": "German", "en": "English", "es": "Spanish", "fi": "Finnish",
    "fr": "French", "it": "Italian", "ja": "Japanese", "nl": "Dutch", "pl": "Polish", "pt": "Portuguese",
    "ro": "Romanian", "ru": "Russian", "tr": "Turkish", "uk": "Ukrainian", "zh": "Chinese",
}  # fmt: skip


def language_name(code: str) -> str:
    """The English name of language ``code``; the code itself for one not in ``LANGUAGE_NAMES``."""
    return LANGUAGE_NAMES.get(code, code)
