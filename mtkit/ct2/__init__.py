"""CTranslate2 (the optional extra ``mtkit[ct2]``), export and engine together: `mtkit export` writes a trained
Transformer as a CTranslate2 model directory (export.py), and ``Ct2Translator`` translates with one (engine.py).
ctranslate2 itself is imported only when a model is exported or run."""

from mtkit.ct2.engine import Ct2Translator
from mtkit.ct2.export import (
    EXPORT_META,
    QUANTIZATIONS,
    build_spec,
    check_exportable,
    convert,
    export_main,
    import_ctranslate2,
    is_export_dir,
    read_export,
    save_spec,
)

__all__ = [
    "EXPORT_META",
    "QUANTIZATIONS",
    "Ct2Translator",
    "build_spec",
    "check_exportable",
    "convert",
    "export_main",
    "import_ctranslate2",
    "is_export_dir",
    "read_export",
    "save_spec",
]
