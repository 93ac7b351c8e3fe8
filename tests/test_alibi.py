"""ALiBi (``model.positions: alibi``, Press et al. 2022): linear distance biases in the self-attentions.

- The head slopes against the paper's values, for 8 heads and for counts that are not a power of 2; the biases'
  shape, symmetry and values; the additive float mask the fused kernel gets (biases, padding, future keys).
- No position embedding: without its biases the encoder cannot tell word order (it is permutation-equivariant).
- On sequences long enough for the fused kernel (test_transformer.py covers short ones, the explicit softmax
  path, with every other scheme): fused == explicit, causality, padding invariance, cached steps == full forward.
- The config refuses the keys of other schemes by name; the CTranslate2 export refuses the scheme by name.
- Through the CLI: it trains, resumes, translates; the Python API and ``mtkit serve`` give the CLI's output.
Comparisons of two computations allow float rounding (the CPU kernels differ: AVX-512, AVX2).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import yaml
from test_transformer import stepped_and_full, tiny

from conftest import TINY_TRANSFORMER, assert_one_line_error, cli, without_curves, write_toy_splits
from mtkit.models import BOS, EOS, PAD
from mtkit.models.positions import ALiBi, alibi_slopes
from mtkit.models.transformer import MultiHeadAttention

pytestmark = pytest.mark.usefixtures("one_thread")
TOL = dict(atol=1e-5, rtol=1e-5)
LONG = 14  # > 8 query positions: evaluation runs the fused kernel (fewer take the explicit softmax)


# ------------------------------------------------------------------------------------------ the biases
def test_slopes_of_8_heads_are_the_geometric_sequence():
    assert alibi_slopes(8) == [2.0**-i for i in range(1, 9)]  # 2^(-8/n * i), i = 1..n: 1/2 .. 1/256
    assert alibi_slopes(16) == pytest.approx([2.0 ** (-0.5 * i) for i in range(1, 17)])
    assert alibi_slopes(1) == [2.0**-8]


def test_slopes_of_other_head_counts_interleave_the_next_power_of_2():
    # 6 heads: the 4 slopes of 4 heads, then the 1st and 3rd of 8 heads (the ones 4 heads lack)
    assert alibi_slopes(6) == [2.0**-2, 2.0**-4, 2.0**-6, 2.0**-8, 2.0**-1, 2.0**-3]
    assert alibi_slopes(12) == pytest.approx([2.0**-i for i in range(1, 9)] + [2.0 ** -(i + 0.5) for i in range(4)])
    assert len(set(alibi_slopes(12))) == 12


def test_bias_is_minus_slope_times_distance_and_symmetric():
    bias = ALiBi(4)(0, 5, 7)
    assert bias.shape == (4, 5, 7) and bias.dtype == torch.float32
    slopes = torch.tensor(alibi_slopes(4))
    i, j = torch.arange(5)[:, None], torch.arange(7)[None, :]
    torch.testing.assert_close(bias, -slopes[:, None, None] * (i - j).abs().float())
    square = ALiBi(4)(0, 6, 6)
    assert torch.equal(square, square.transpose(-1, -2)) and torch.all(square.diagonal(dim1=-2, dim2=-1) == 0)
    # one decoding step at position 3 over keys 0..3: the last row of the full square's first 4 columns
    assert torch.equal(ALiBi(4)(3, 1, 4), square[:, 3:4, :4])


def test_fused_mask_adds_padding_and_future_as_minus_infinity():
    attn = MultiHeadAttention(8, 2, 0.0, self_attention=True, alibi=ALiBi(2))
    key_mask = torch.tensor([[True, True, True, False], [True, True, True, True]])
    mask = attn.alibi_mask(0, 4, 4, key_mask, causal=False, dtype=torch.float32)
    assert mask.shape == (2, 2, 4, 4)
    assert torch.isinf(mask[0, :, :, 3]).all() and torch.isfinite(mask[1]).all()
    torch.testing.assert_close(mask[1], ALiBi(2)(0, 4, 4))
    causal = attn.alibi_mask(0, 4, 4, None, causal=True, dtype=torch.float32)
    assert causal.shape == (1, 2, 4, 4)
    future = torch.ones(4, 4, dtype=torch.bool).triu(1)
    assert torch.isinf(causal[0][:, future]).all() and torch.isfinite(causal[0][:, ~future]).all()


# ----------------------------------------------------------------------------------------- the model
def alibi_model(norm: str = "pre", heads: int = 4, d_model: int = 32):
    return tiny("alibi", norm, heads=heads, d_model=d_model)


def long_batch():
    """3 sources of LONG tokens (row 1: 9 + padding) and targets of LONG tokens."""
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, 24, (3, LONG), generator=g)
    src[:, -1] = EOS
    src[1, 9:] = PAD
    src[1, 8] = EOS
    tgt = torch.randint(4, 24, (3, LONG), generator=g)
    tgt[:, 0] = BOS
    return src, tgt


def test_no_position_embedding_only_the_biases_carry_word_order():
    model = alibi_model()
    assert not hasattr(model, "pos_table") and not hasattr(model, "src_pos")
    src = torch.tensor([[5, 6, 7, 8, 9, EOS]])
    order = torch.tensor([3, 0, 4, 1, 2, 5])
    mask = src.ne(PAD)
    with torch.no_grad():
        with_biases = model.encode(src, mask), model.encode(src[:, order], mask)
        model.encoder[0].attn.alibi.slopes.zero_()  # shared by every self-attention: no biases at all
        without = model.encode(src, mask), model.encode(src[:, order], mask)
    torch.testing.assert_close(without[0][:, order], without[1], **TOL)  # permutation-equivariant
    assert not torch.allclose(with_biases[0][:, order], with_biases[1], atol=1e-3)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.compares
def test_fused_kernel_equals_the_explicit_softmax(causal):
    torch.manual_seed(0)
    attn = MultiHeadAttention(32, 4, 0.0, self_attention=True, alibi=ALiBi(4)).eval()
    q, k, v = attn.project_self(torch.randn(2, LONG, 32))
    key_mask = torch.ones(2, LONG, dtype=torch.bool)
    key_mask[0, 10:] = False
    key_mask = None if causal else key_mask
    with torch.no_grad():
        fused, _ = attn.attend(q, k, v, key_mask, causal=causal)
        explicit, weights = attn.attend(q, k, v, key_mask, causal=causal, need_weights=True)  # the explicit path
    torch.testing.assert_close(fused, explicit, **TOL)
    without = MultiHeadAttention(32, 4, 0.0, self_attention=True).eval()
    without.load_state_dict(attn.state_dict())
    with torch.no_grad():
        assert not torch.allclose(without.attend(q, k, v, key_mask, causal=causal)[0], fused, atol=1e-3)
    if causal:
        assert weights.triu(1).abs().max() == 0  # no weight on a future key
    else:
        assert weights[0, :, 10:].abs().max() == 0  # none on padding


@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.compares
def test_cached_steps_equal_the_fused_full_forward(norm):
    stepped, full = stepped_and_full(alibi_model(norm), *long_batch())
    torch.testing.assert_close(stepped, full, **TOL)


@pytest.mark.parametrize("training", [False, True], ids=["eval", "train"])
@pytest.mark.compares
def test_causality_on_long_targets(training):
    model = alibi_model().train(training)  # dropout 0: training mode runs the fused kernel, deterministic
    src, tgt = long_batch()
    changed = tgt.clone()
    changed[:, 9:] = torch.randint(4, 24, changed[:, 9:].shape, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        a, b = model(src, tgt), model(src, changed)
    torch.testing.assert_close(a[:, :9], b[:, :9], **TOL)
    assert not torch.allclose(a[:, 9:], b[:, 9:], atol=1e-3)


@pytest.mark.parametrize("heads, d_model", [(4, 32), (6, 36)])
@pytest.mark.compares
def test_padding_changes_no_real_position(heads, d_model):
    model = alibi_model(heads=heads, d_model=d_model)
    src, tgt = long_batch()
    tgt_padded = tgt.clone()
    tgt_padded[1, 11:] = PAD  # target row 1: 11 real tokens, then padding
    with torch.no_grad():
        in_batch = model(src, tgt_padded)[1, :11]
        alone = model(src[1:2, :9], tgt[1:2, :11])[0]  # the 9-token source and 11-token target without padding
    torch.testing.assert_close(in_batch, alone, **TOL)


# ---------------------------------------------------------------------------------------- the config
def test_config_refuses_another_schemes_key_by_name(tmp_path, run_cli):
    from mtkit.config import from_dict, to_dict
    from mtkit.errors import MtkitError

    base = {"data": {"dir": str(tmp_path / "data"), "splits": {"train": {"src": "a", "tgt": "b"}}}}
    model = {"arch": "transformer", "positions": "alibi"}
    with pytest.raises(MtkitError, match=r"model.max_relative_distance .*positions relative.*alibi"):
        from_dict({**base, "model": {**model, "max_relative_distance": 8}})
    accepted = from_dict({**base, "model": {**model, "max_relative_distance": 16}})  # the default: nothing changed
    assert from_dict(to_dict(accepted)).model.positions == "alibi"  # a run's saved config loads back
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({**base, "model": model, "training": {"run_dir": str(tmp_path / "run")}}))
    result = run_cli("train", path, "--set", "model.max_relative_distance=4")
    assert_one_line_error(result, str(path), "model.max_relative_distance", "alibi", "remove")
    assert not (tmp_path / "run").exists()


# ---------------------------------------------------------------------------- the CLI, API and server
@pytest.fixture(scope="module")
def alibi_run(tmp_path_factory) -> Path:
    """A tiny ALiBi Transformer trained through the CLI on the toy corpus: 40 updates, then --resume to 80."""
    root = tmp_path_factory.mktemp("alibi")
    config = {
        "data": {"dir": str(root / "data"), "vocab_size": 100, "splits": write_toy_splits(root)},
        "model": {**TINY_TRANSFORMER, "positions": "alibi", "max_positions": 128},
        "training": {
            "run_dir": str(root / "run"),
            "max_updates": 40,
            "batch_tokens": 400,
            "lr": 3e-3,
            "warmup_updates": 20,
            "validate_every": 40,
            "log_every": 20,
            "threads": 1,
            "devices": "cpu",
            "valid_max_sentences": 10,
        },
        "decoding": {"beam_size": 4, "batch_size": 16, "threads": 1, "device": "cpu"},
    }
    (root / "config.yaml").write_text(yaml.safe_dump(without_curves(config), sort_keys=False), encoding="utf-8")
    assert cli("prepare", root / "config.yaml") == 0
    assert cli("train", root / "config.yaml") == 0
    assert cli("train", "--resume", root / "run", "--set", "training.max_updates=80") == 0
    return root / "run"


@pytest.mark.slow
def test_it_trains_resumes_and_learns_through_the_cli(alibi_run):
    import json

    from mtkit.checkpoint import load_checkpoint

    records = [json.loads(line) for line in (alibi_run / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in records if r["kind"] == "valid"]
    assert [r["update"] for r in valid] == [40, 80]  # the second half resumed from update 40
    assert valid[1]["loss"] < valid[0]["loss"]
    loaded = load_checkpoint(alibi_run)
    assert loaded.config.model.positions == "alibi" and loaded.metadata["update"] == 80
    assert loaded.model.encoder[0].attn.alibi is not None and loaded.model.decoder[0].cross_attn.alibi is None


def test_cli_api_and_server_translate_alike(alibi_run, run_cli):
    import mtkit

    lines = (alibi_run.parent / "corpus" / "test.en").read_text(encoding="utf-8").splitlines()[:12]
    result = run_cli("translate", alibi_run, stdin="\n".join(lines) + "\n")
    assert result.code == 0, result.err
    printed = result.out.split("\n")
    assert printed.pop() == "" and len(printed) == len(lines) and all(printed)
    model = mtkit.load(alibi_run)
    assert model.translate(lines) == printed
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from mtkit.serving.app import create_app
    from mtkit.serving.languages import run_languages

    with TestClient(create_app(model, run_languages(alibi_run))) as client:
        response = client.post("/v1/translate", json={"text": lines})
    assert response.status_code == 200, response.text
    assert [t["text"] for t in response.json()["translations"]] == printed


def test_ctranslate2_export_and_engine_refuse_alibi_by_name(alibi_run, run_cli):
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        pytest.skip('ctranslate2 is not installed (pip install "mtkit[ct2]")')
    out = alibi_run.parent / "ct2"
    assert_one_line_error(run_cli("export", alibi_run, "--output", out), "model.positions", "alibi", "--engine torch")
    assert not out.exists()
    result = run_cli("translate", alibi_run, "--engine", "ctranslate2", stdin="a dog\n")
    assert_one_line_error(result, "alibi", "--engine torch")
