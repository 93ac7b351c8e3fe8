"""Checkpoint files on their own: atomic writes under kill -9, corruption, pickles, tensors that do not fit.

Training-level behaviour (resume, signals, locks, the CLI) is in test_train.py.
"""

from __future__ import annotations

import builtins
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from mtkit import checkpoint as ckpt
from mtkit.config import TransformerConfig
from mtkit.errors import MtkitError
from mtkit.models import build_model


def bundle(value: float, update: int = 1, n: int = 4000) -> ckpt.Bundle:
    return ckpt.Bundle(
        {"update": update},
        {"w": torch.full((n,), value), "b": torch.arange(7.0) * value},
        {"src": b"not really a sentencepiece model"},
        {"opt.0.exp_avg": torch.full((n,), value / 2)},
    )


def one_line_error(excinfo) -> str:
    message = str(excinfo.value)
    assert "\n" not in message and message
    return message


def test_roundtrip_keeps_every_tensor_and_the_metadata(tmp_path):
    path = tmp_path / "ckpt_0000001.safetensors"
    ckpt.save(path, bundle(1.5, update=3))
    back = ckpt.load(path, with_train=True)
    assert back.metadata == {"update": 3}
    assert torch.equal(back.model["w"], torch.full((4000,), 1.5))
    assert torch.equal(back.model["b"], torch.arange(7.0) * 1.5)
    assert back.tokenizer == {"src": b"not really a sentencepiece model"}
    assert torch.equal(back.train["opt.0.exp_avg"], torch.full((4000,), 0.75))
    assert ckpt.load(path).train == {}  # training state only on request
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left behind


def test_every_dtype_comes_back_as_it_was_saved(tmp_path):
    # tensors are read through numpy, bfloat16 (which numpy lacks) through torch
    path = tmp_path / "ckpt_0000001.safetensors"
    weights = {
        "bf16": torch.arange(5.0, dtype=torch.bfloat16) / 3,
        "fp16": torch.arange(5.0, dtype=torch.float16) / 3,
        "int": torch.arange(5, dtype=torch.int64),
        "flag": torch.tensor([True, False]),
    }
    ckpt.save(path, ckpt.Bundle({"update": 1}, weights, {}, {}))
    back = ckpt.load(path).model
    for name, tensor in weights.items():
        assert back[name].dtype == tensor.dtype and torch.equal(back[name], tensor), name
    back["fp16"].add_(1)  # writable: not a read-only view of the file


def test_tied_weights_are_stored_once_and_come_back_for_both_names(tmp_path):
    shared = torch.randn(5, 3)
    path = tmp_path / "tied.safetensors"
    ckpt.save(path, ckpt.Bundle({}, {"src_embed.weight": shared, "output.weight": shared}))
    back = ckpt.load(path)
    assert torch.equal(back.model["src_embed.weight"], shared) and torch.equal(back.model["output.weight"], shared)


@pytest.mark.parametrize("cut", [0, 5, 8, 40, "header", "half", "last_byte"])
def test_truncated_checkpoint_fails_with_one_line(tmp_path, cut):
    good = tmp_path / "good.safetensors"
    ckpt.save(good, bundle(2.0))
    data = good.read_bytes()
    header_end = 8 + int.from_bytes(data[:8], "little")
    n = {"header": header_end, "half": len(data) // 2, "last_byte": len(data) - 1}.get(cut, cut)
    bad = tmp_path / "ckpt_0000002.safetensors"
    bad.write_bytes(data[:n])
    with pytest.raises(MtkitError) as excinfo:
        ckpt.load(bad, with_train=True)
    message = one_line_error(excinfo)
    assert str(bad) in message and ("truncated" in message or "corrupted" in message)


@pytest.mark.parametrize("where", ["header", "tensor data", "tokenizer bytes"])
def test_corrupted_checkpoint_fails_with_one_line(tmp_path, where):
    """A flipped byte anywhere is caught: in the JSON header by the parser, in the data by the CRC-32."""
    path = tmp_path / "ckpt_0000001.safetensors"
    ckpt.save(path, bundle(3.0))
    data = bytearray(path.read_bytes())
    header_end = 8 + int.from_bytes(data[:8], "little")
    if where == "header":
        data[20] ^= 0xFF
    elif where == "tensor data":
        data[len(data) - 9] ^= 0x01  # inside the last tensor; the file still parses
    else:
        blob = b"not really a sentencepiece model"
        at = bytes(data).index(blob, header_end)
        data[at + 3] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(MtkitError) as excinfo:
        ckpt.load(path, with_train=True)
    message = one_line_error(excinfo)
    assert str(path) in message and "corrupted" in message
    if where != "header":
        assert "CRC-32" in message  # names the tensor that failed
        assert "tensor '" in message


def test_checkpoint_without_checksums_still_loads(tmp_path):
    """Files written before the CRC existed (no crc32 metadata) keep loading."""
    from safetensors.torch import save_file

    path = tmp_path / "old.safetensors"
    meta = {"format": ckpt.FORMAT, "mtkit": '{"update": 5}', "aliases": "{}"}
    save_file({"model.w": torch.ones(3)}, str(path), metadata=meta)
    back = ckpt.load(path)
    assert back.metadata["update"] == 5 and torch.equal(back.model["w"], torch.ones(3))


class _Payload:
    """Unpickling this creates the file ``marker``: the classic code-execution gadget, made harmless."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (builtins.open, (self.marker, "w"))


@pytest.mark.parametrize("writer", ["torch.save", "pickle protocol 4", "pickle protocol 0"])
def test_pickle_checkpoint_is_refused_and_its_payload_never_runs(tmp_path, writer, run_cli):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    path = run / "checkpoints" / "ckpt_0000001.safetensors"
    marker = tmp_path / "payload-ran"
    payload = {"model.w": _Payload(marker)}
    if writer == "torch.save":
        torch.save(payload, path)
    else:
        path.write_bytes(pickle.dumps(payload, protocol=4 if "4" in writer else 0))

    # the gadget is live: unpickling a copy really runs it (so the checks below can fail)
    proof = tmp_path / "proof-it-works"
    pickle.loads(pickle.dumps({"x": _Payload(proof)}))
    assert proof.exists()

    with pytest.raises(MtkitError) as excinfo:
        ckpt.load(path, with_train=True)
    message = one_line_error(excinfo)
    assert str(path) in message
    if writer != "pickle protocol 0":
        assert "pickle" in message and "safetensors" in message
    with pytest.raises(MtkitError):
        ckpt.read_metadata(path)
    assert ckpt.latest_loadable(run / "checkpoints") is None
    result = run_cli("average", run, "--last", "1")
    assert result.code == 2 and "Traceback" not in result.err
    assert len(result.err.strip().splitlines()) == 1 and str(path) in result.err
    assert not marker.exists(), "the pickle payload ran"


def test_not_an_mtkit_checkpoint_is_named(tmp_path):
    from safetensors.torch import save_file

    path = tmp_path / "foreign.safetensors"
    save_file({"w": torch.ones(2)}, str(path))
    with pytest.raises(MtkitError, match="not an mtkit checkpoint"):
        ckpt.load(path)
    with pytest.raises(MtkitError, match="checkpoint not found"):
        ckpt.load(tmp_path / "missing.safetensors")


# ------------------------------------------------------------------------------ tensors vs config
def tiny_model(vocab: int = 100, d_model: int = 32):
    cfg = TransformerConfig(d_model=d_model, heads=2, encoder_layers=1, decoder_layers=1, ffn_dim=64)
    return build_model(cfg, vocab, vocab, True)


def test_matching_weights_load(tmp_path):
    source, target = tiny_model(), tiny_model()
    ckpt.load_weights(target, source.state_dict(), tmp_path / "x.safetensors")
    assert all(torch.equal(a, b) for a, b in zip(source.state_dict().values(), target.state_dict().values()))


def _mismatch(kind: str, weights: dict) -> str:
    """Damage ``weights`` in place; return the name of the tensor the error must name."""
    name = next(k for k in weights if k.endswith("weight") and weights[k].dim() == 2 and "embed" not in k)
    if kind == "wrong shape":
        weights[name] = torch.zeros(weights[name].shape[0] + 1, weights[name].shape[1])
    elif kind == "missing key":
        del weights[name]
    elif kind == "unexpected key":
        name = "decoder.layers.7.extra.weight"
        weights[name] = torch.zeros(2)
    return name


@pytest.mark.parametrize("kind", ["wrong shape", "missing key", "unexpected key"])
def test_tensor_not_matching_the_config_is_named(tmp_path, kind):
    weights = dict(tiny_model().state_dict())
    name = _mismatch(kind, weights)
    with pytest.raises(MtkitError) as excinfo:
        ckpt.load_weights(tiny_model(), weights, tmp_path / "ckpt_0000001.safetensors")
    message = one_line_error(excinfo)
    assert f"'{name}'" in message and "ckpt_0000001.safetensors" in message


def test_wrong_vocab_size_is_named(tmp_path):
    path = tmp_path / "ckpt_0000001.safetensors"
    ckpt.save(path, ckpt.Bundle({}, tiny_model(vocab=120).state_dict()))
    model = tiny_model(vocab=100)
    with pytest.raises(MtkitError) as excinfo:
        ckpt.load_weights(model, ckpt.load(path).model, path)
    message = one_line_error(excinfo)
    first_vocab_tensor = next(k for k, v in model.state_dict().items() if 100 in v.shape)
    assert f"'{first_vocab_tensor}'" in message and "120" in message and "100" in message


# ---------------------------------------------------------------------------------------- average
def test_average_is_the_elementwise_mean(tmp_path):
    a, b = tmp_path / "a.safetensors", tmp_path / "b.safetensors"
    ckpt.save(a, bundle(1.0, update=1))
    ckpt.save(b, bundle(4.0, update=2))
    avg = ckpt.average([a, b])
    assert torch.equal(avg.model["w"], torch.full((4000,), 2.5))
    assert torch.equal(avg.model["b"], torch.arange(7.0) * 2.5)
    assert avg.train == {} and avg.metadata["update"] == 2
    assert avg.metadata["averaged"] == ["a.safetensors", "b.safetensors"]


# ------------------------------------------------------------------------------- kill -9 mid-save
KILLER = textwrap.dedent(
    """
    import os, signal, sys
    import torch
    torch.set_num_threads(1)
    from pathlib import Path
    from mtkit import checkpoint as ckpt
    from mtkit import files

    folder = Path(sys.argv[1])

    def bundle(v):
        return ckpt.Bundle({"update": int(v)}, {"w": torch.full((200_000,), float(v))}, {"src": b"spm"},
                           {"opt.0.exp_avg": torch.full((200_000,), float(v))})

    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)

    class HalfThenDie:  # a file whose write stops halfway: the process is killed inside write()
        def __init__(self, f):
            self.f = f
        def __enter__(self):
            return self
        def __exit__(self, *exc):
            self.f.close()
        def write(self, data):
            self.f.write(data[: len(data) // 2])
            self.f.flush()
            os.fsync(self.f.fileno())
            die()

    ckpt.save(folder / "ckpt_0000001.safetensors", bundle(1))
    ckpt.save(folder / "best.safetensors", bundle(1))
    for mode, target in (("mid_write", "ckpt_0000002"), ("before_rename", "ckpt_0000002"),
                         ("mid_write", "best"), ("before_rename", "best")):
        pid = os.fork()
        if pid == 0:
            if mode == "mid_write":
                files.open = lambda path, m="r": HalfThenDie(open(path, m))
            else:
                files.os.replace = die  # the temp file is complete and fsynced, the rename never happens
            ckpt.save(folder / f"{target}.safetensors", bundle(2))
            os._exit(0)  # not reached: the save is killed
        _, status = os.waitpid(pid, 0)
        print(mode, target, os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, flush=True)
    """
)


@pytest.mark.slow
def test_kill_9_mid_save_leaves_the_last_checkpoint_loadable(tmp_path):
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [sys.executable, "-c", KILLER, str(folder)], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.split("\n")
    assert [line for line in lines if line] == [
        f"{m} {t} True"
        for m, t in (
            ("mid_write", "ckpt_0000002"),
            ("before_rename", "ckpt_0000002"),
            ("mid_write", "best"),
            ("before_rename", "best"),
        )
    ]
    leftovers = sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))
    assert leftovers, "the kills happened mid-save: their temp files are still there"
    # the killed saves left the previous files whole: same update, same values, checksums pass
    assert [p.name for _, p in ckpt.list_checkpoints(folder)] == ["ckpt_0000001.safetensors"]
    assert ckpt.latest_loadable(folder) == folder / "ckpt_0000001.safetensors"
    for name in ("ckpt_0000001.safetensors", "best.safetensors"):
        back = ckpt.load(folder / name, with_train=True)
        assert back.metadata["update"] == 1 and torch.equal(back.model["w"], torch.full((200_000,), 1.0))
    ckpt.remove_stale_temps(folder)
    assert sorted(p.name for p in folder.iterdir()) == ["best.safetensors", "ckpt_0000001.safetensors"]


def test_unwritable_target_fails_clearly_and_keeps_the_previous_file(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders; test_train covers a full disk by simulation")
    path = tmp_path / "ckpt_0000001.safetensors"
    ckpt.save(path, bundle(1.0))
    os.chmod(tmp_path, 0o555)
    try:
        with pytest.raises(MtkitError) as excinfo:
            ckpt.save(path, bundle(2.0))
    finally:
        os.chmod(tmp_path, 0o755)
    message = one_line_error(excinfo)
    assert str(path) in message and "cannot write" in message
    assert ckpt.load(path).metadata["update"] == 1
