"""Damaged export and import folders: one MtkitError naming the file, never another exception."""

from __future__ import annotations

import json

import pytest

from mtkit.errors import MtkitError
from mtkit.interop import ct2_export, marian_import


@pytest.mark.parametrize(
    "meta",
    [[], "text", {"format": "other"}, {"format": ct2_export.EXPORT_FORMAT, "tokenizer": []}],
)
def test_an_export_dir_with_damaged_metadata_is_refused(tmp_path, meta):
    (tmp_path / ct2_export.EXPORT_META).write_text(json.dumps(meta))
    with pytest.raises(MtkitError, match="not an mtkit CTranslate2 export"):
        ct2_export.read_export(tmp_path)


def test_a_sharded_checkpoint_without_its_weight_map_is_refused(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}}))
    with pytest.raises(MtkitError, match="no weight_map"):
        marian_import.read_weights(tmp_path)
