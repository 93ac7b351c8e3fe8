"""Bounded property-based fuzzing of the input paths users control: config files and parallel corpora.

The property: whatever the bytes, mtkit either accepts them or raises MtkitError (one line); never another
exception. Runs in CI with a fixed example budget (about 10 s).
"""

import gzip
import string

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mtkit import config as cfgmod
from mtkit.data.encoding import read_chunks
from mtkit.data.prepare import SplitStats, _clean_split
from mtkit.data.sources import file_pairs
from mtkit.errors import MtkitError

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

KEYS = [
    "data",
    "model",
    "training",
    "decoding",
    "dir",
    "splits",
    "train",
    "src",
    "tgt",
    "arch",
    "d_model",
    "heads",
    "lr",
    "run_dir",
    "beam_size",
    "vocab_size",
    "transformer",
    "luong",
    "bahdanau",
    "positions",
    "hf",
    "path",
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**6), 10**6),
    st.floats(allow_nan=True),
    st.text(max_size=20),
    st.sampled_from(["transformer", "luong", "rope", "pre", "1e-3", "x.y"]),
)
trees = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(st.one_of(st.sampled_from(KEYS), st.text(max_size=8)), children, max_size=5),
    ),
    max_leaves=25,
)


def _one_line(err: MtkitError) -> None:
    assert "\n" not in str(err) and str(err)


@FUZZ
@given(tree=trees)
def test_any_config_tree_loads_or_fails_in_one_line(tree, tmp_path):
    path = tmp_path / "fuzz.yaml"
    path.write_text(yaml.safe_dump(tree), encoding="utf-8")
    try:
        cfgmod.load(path)
    except MtkitError as err:
        _one_line(err)


@FUZZ
@given(text=st.text(alphabet=string.printable + "äß€\t{}[]:-#&*!|>'\"%@`", max_size=300))
def test_any_config_text_loads_or_fails_in_one_line(text, tmp_path):
    path = tmp_path / "fuzz.yaml"
    path.write_text(text, encoding="utf-8")
    try:
        cfgmod.load(path)
    except MtkitError as err:
        _one_line(err)


@FUZZ
@given(overrides=st.lists(st.text(max_size=30), max_size=3))
def test_any_set_override_applies_or_fails_in_one_line(overrides, tmp_path):
    path = tmp_path / "base.yaml"
    path.write_text("data: {dir: d, splits: {train: {src: a, tgt: b}}}\n", encoding="utf-8")
    try:
        cfgmod.load(path, overrides)
    except MtkitError as err:
        _one_line(err)


lines = st.lists(st.binary(max_size=60).map(lambda b: b.replace(b"\n", b" ")), min_size=0, max_size=12)


@FUZZ
@given(src=lines, tgt=lines, gz=st.booleans(), skip_bad=st.booleans())
def test_any_corpus_bytes_read_or_fail_in_one_line(src, tgt, gz, skip_bad, tmp_path):
    paths = []
    for name, rows in (("c.en", src), ("c.de", tgt)):
        data = b"".join(r + b"\n" for r in rows)
        path = tmp_path / (name + (".gz" if gz else ""))
        path.write_bytes(gzip.compress(data) if gz else data)
        paths.append(path)
    out = (tmp_path / "clean.en", tmp_path / "clean.de")
    try:
        stats = SplitStats()
        cfg = cfgmod.DataConfig(dir=str(tmp_path / "d"), splits={"train": {"src": str(paths[0]), "tgt": str(paths[1])}})
        _clean_split(file_pairs(paths[0], paths[1], skip_bad), out, stats, cfg, train=True)
    except MtkitError as err:
        _one_line(err)
        return
    assert len(src) == len(tgt)  # mismatched line counts must have been an MtkitError
    # the cleaned files, read back the way the encoder reads them, hold exactly the kept pairs, aligned
    read_back = [pair for chunk in read_chunks(out, 5) for pair in zip(*chunk)]
    assert len(read_back) == stats.pairs_kept <= len(src)
    assert all(a and b for a, b in read_back)  # train split: empty sides are filtered


@pytest.mark.parametrize("payload", [b"\x1f\x8b\x08garbage", b"\x1f\x8b"])
def test_corrupt_gzip_is_one_line(payload, tmp_path):
    src, tgt = tmp_path / "a.en", tmp_path / "a.de"
    src.write_bytes(payload)
    tgt.write_bytes(payload)
    with pytest.raises(MtkitError) as info:
        list(file_pairs(src, tgt, False))
    _one_line(info.value)
