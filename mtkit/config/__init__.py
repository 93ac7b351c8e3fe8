"""The experiment config: one YAML file, four sections, validated on load.

``schema.py`` holds the sections (model, training, decoding; ``data.py`` the data section, ``section.py`` what a
section is), every default and cross-field check; ``reading.py`` reads a file (``load``), applies dotted ``--set``
overrides and ``model.init_from``, turns a problem into one ``MtkitError`` line, and writes a config back
(``to_dict``, ``dump``). Every name is importable from here.
"""

from mtkit.config.data import DataConfig, Direction, HFDataset, ParallelFiles
from mtkit.config.reading import (
    INIT_FROM_OWN_KEYS,
    apply_overrides,
    dump,
    from_dict,
    load,
    read_yaml,
    to_dict,
    validation_message,
)
from mtkit.config.schema import (
    FP16_NEEDS_CUDA,
    SCHEME_ONLY_KEYS,
    BahdanauConfig,
    Config,
    DecodingConfig,
    LuongConfig,
    ModelConfig,
    TrainingConfig,
    TransformerConfig,
    language_tag,
)
from mtkit.config.section import Section

__all__ = [
    "FP16_NEEDS_CUDA",
    "INIT_FROM_OWN_KEYS",
    "SCHEME_ONLY_KEYS",
    "BahdanauConfig",
    "Config",
    "DataConfig",
    "DecodingConfig",
    "Direction",
    "HFDataset",
    "LuongConfig",
    "ModelConfig",
    "ParallelFiles",
    "Section",
    "TrainingConfig",
    "TransformerConfig",
    "apply_overrides",
    "dump",
    "from_dict",
    "language_tag",
    "load",
    "read_yaml",
    "to_dict",
    "validation_message",
]
