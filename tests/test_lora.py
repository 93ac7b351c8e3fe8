"""training.lora (PEFT adapters on model.init_from's weights), mtkit merge-lora, training.freeze_embeddings and
training.gradient_checkpointing: what trains, what a checkpoint holds, translate and merge, a resume bit for bit, and
the bad inputs."""

from __future__ import annotations

import shutil
import sys

import pytest
import torch
import yaml

from conftest import TINY_TRANSFORMER, assert_one_line_error, cli, toy_pairs, without_curves, write_lines
from mtkit import checkpoint as ckpt
from mtkit import config as cfgmod
from mtkit import lora
from mtkit.data.prepare import prepare
from mtkit.models import PAD, build_model

pytest.importorskip("peft")

BASE_MODEL = {**TINY_TRANSFORMER, "encoder_layers": 2, "decoder_layers": 2, "dropout": 0.1}
LORA = {"rank": 4, "alpha": 8.0, "dropout": 0.1}


def _training(run_dir, **extra) -> dict:
    return {
        "run_dir": str(run_dir),
        "devices": "cpu",
        "threads": 1,
        "batch_tokens": 400,
        "lr": 1e-2,
        "warmup_updates": 0,
        "schedule": "constant",
        "log_every": 1,
        "validate_every": 3,
        "valid_bleu": False,
        "best_metric": "loss",
        "keep_last": 10,
        **extra,
    }


@pytest.fixture(scope="module")
def base(tmp_path_factory, one_thread):
    """Prepared toy data and a base run (tiny Transformer, 8 updates) to start LoRA runs from."""
    root = tmp_path_factory.mktemp("lora")
    splits = {}
    for name, n, seed in (("train", 120, 0), ("valid", 10, 1)):
        pairs = toy_pairs(n, seed)
        src = write_lines(root / "corpus" / f"{name}.en", [p[0] for p in pairs])
        tgt = write_lines(root / "corpus" / f"{name}.de", [p[1] for p in pairs])
        splits[name] = {"src": str(src), "tgt": str(tgt)}
    data = {"dir": str(root / "data"), "vocab_size": 100, "splits": splits}
    prepare(cfgmod.from_dict({"data": data}).data)
    config = root / "base.yaml"
    tree = {"data": data, "model": BASE_MODEL, "training": _training(root / "base", max_updates=8, validate_every=8)}
    config.write_text(yaml.safe_dump(without_curves(tree), sort_keys=False), encoding="utf-8")
    assert cli("train", config) == 0
    return root, data


def _config(tmp_path, base, name: str = "ft", lora_section=LORA, model=None, **training) -> str:
    root, data = base
    tree = {
        "data": data,
        "model": model if model is not None else {"init_from": str(root / "base")},
        "training": _training(tmp_path / name, **({"lora": lora_section} if lora_section else {}), **training),
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(without_curves(tree), sort_keys=False), encoding="utf-8")
    return str(path)


def _ckpt(run, update: int, with_train: bool = False) -> ckpt.Bundle:
    return ckpt.load(run / "checkpoints" / f"ckpt_{update:07d}.safetensors", with_train=with_train)


def _unmerged(run, update: int):
    """The LoRA run's model at ``update``: base weights with the adapters beside them (not merged), eval mode."""
    bundle = _ckpt(run, update)
    cfg = cfgmod.from_dict(bundle.metadata["config"])
    model = build_model(cfg.model, bundle.metadata["src_vocab_size"], bundle.metadata["tgt_vocab_size"], True)
    ckpt.load_lora_checkpoint(model, bundle, run / "checkpoints", cfg.training.lora)
    return model.eval()


def _log_probs(model, n: int = 8) -> torch.Tensor:
    src = torch.randint(4, model.src_vocab_size, (n, 9), generator=torch.Generator().manual_seed(0))
    tgt = torch.randint(4, model.tgt_vocab_size, (n, 7), generator=torch.Generator().manual_seed(1))
    src[0, 6:] = PAD
    with torch.no_grad():
        return model(src, tgt).float().log_softmax(-1)


# --------------------------------------------------------------------------------------- what trains, what is saved
def test_only_the_adapters_train_and_the_checkpoint_holds_them_and_the_base_reference(tmp_path, base, run_cli):
    root, _ = base
    result = run_cli("train", _config(tmp_path, base, max_updates=3))
    assert result.code == 0, result.err
    assert "trained" in result.out  # the summary's row of trained parameters
    saved = _ckpt(tmp_path / "ft", 3, with_train=True)
    base_file = ckpt.resolve(root / "base")
    meta = saved.metadata["lora"]
    assert meta["base"] == str(base_file.resolve()) and meta["base_sha256"] == lora.header_digest(base_file)
    assert (meta["rank"], meta["alpha"]) == (4, 8.0)
    # the default modules: every attention projection (2 encoder layers x 2, 2 decoder layers x 5)
    assert len(meta["layers"]) == 14 and all(n.rsplit(".", 1)[1] in ("qkv", "q", "kv", "out") for n in meta["layers"])
    assert saved.model and all(lora.is_adapter(k) for k in saved.model), sorted(saved.model)
    assert sorted(saved.model) == sorted(f"{layer}.lora_{ab}.default.weight" for layer in meta["layers"] for ab in "AB")
    assert len([k for k in saved.train if k.startswith("opt.") and k.endswith(".exp_avg")]) == len(saved.model)
    assert (tmp_path / "ft" / "checkpoints" / "ckpt_0000003.safetensors").stat().st_size < base_file.stat().st_size
    # the adapters trained: lora_B starts at zero
    assert any(saved.model[k].abs().max() > 0 for k in saved.model if ".lora_B." in k)
    # and the base weights did not: the unmerged model's base layers are the base run's tensors
    model, weights = _unmerged(tmp_path / "ft", 3), ckpt.load(base_file).model
    for name, tensor in model.state_dict().items():
        if not lora.is_adapter(name):
            assert torch.equal(tensor, weights[name.replace(".base_layer.", ".")]), name


@pytest.mark.compares
def test_translate_merge_and_merged_equals_unmerged(tmp_path, base, run_cli):
    root, _ = base
    assert run_cli("train", _config(tmp_path, base, max_updates=3)).code == 0
    run = tmp_path / "ft"
    out = run_cli("translate", run, "--beam-size", "2", stdin="A man sees a dog .\nThe cat runs .\n")
    assert out.code == 0, out.err
    assert len(out.out.splitlines()) == 2
    merged = run_cli("merge-lora", run, "--output", tmp_path / "merged")
    assert merged.code == 0, merged.err
    loaded = ckpt.load_checkpoint(tmp_path / "merged")
    assert "lora" not in loaded.metadata and loaded.config.training.lora is None and not loaded.config.model.init_from
    assert not any(lora.is_adapter(k) or "base_layer" in k for k in loaded.model.state_dict())
    unmerged = _unmerged(run, 3)
    assert any(".lora_A." in k for k in unmerged.state_dict())
    got, expected = _log_probs(loaded.model), _log_probs(unmerged)
    assert (got - expected).abs().max() < 1e-5
    # the adapters change the function: the merge is not the base model
    plain = ckpt.load_checkpoint(root / "base").model
    assert (_log_probs(plain) - expected).abs().max() > 1e-3
    # the merged run translates as the LoRA run does, and needs neither PEFT's adapters nor the base run
    again = run_cli("translate", tmp_path / "merged", "--beam-size", "2", stdin="A man sees a dog .\nThe cat runs .\n")
    assert again.code == 0 and again.out == out.out, again.err
    # merging a run without adapters, or into a taken --out, is refused
    assert_one_line_error(run_cli("merge-lora", tmp_path / "merged", "--output", tmp_path / "m2"), "no LoRA adapters")
    assert_one_line_error(run_cli("merge-lora", run, "--output", tmp_path / "merged"), "--force")
    assert run_cli("merge-lora", run, "--output", tmp_path / "merged", "--force").code == 0


def test_lora_resume_equals_uninterrupted_bitwise(tmp_path, base, run_cli):
    """3 updates, then --resume to 6 == 6 straight: adapters, Adam moments, RNG (LoRA and model dropout on)."""
    assert run_cli("train", _config(tmp_path, base, name="straight", max_updates=6)).code == 0
    assert run_cli("train", _config(tmp_path, base, name="split", max_updates=3)).code == 0
    resumed = run_cli("train", "--resume", tmp_path / "split", "--set", "training.max_updates=6")
    assert resumed.code == 0 and "resumed from ckpt_0000003.safetensors" in resumed.out, resumed.err
    a = _ckpt(tmp_path / "straight", 6, with_train=True)
    b = _ckpt(tmp_path / "split", 6, with_train=True)
    assert sorted(a.model) == sorted(b.model) and all(lora.is_adapter(k) for k in a.model)
    for k in a.model:
        assert torch.equal(a.model[k], b.model[k]), k
    assert sorted(a.train) == sorted(b.train) and all(torch.equal(a.train[k], b.train[k]) for k in a.train)
    first = _ckpt(tmp_path / "straight", 3)
    assert any(not torch.equal(first.model[k], a.model[k]) for k in a.model)  # the second half did train
    # the mean of adapters is not the adapters of the mean: mtkit average refuses them
    assert_one_line_error(run_cli("average", tmp_path / "straight", "--last", "2"), "LoRA", "merge-lora")


def test_a_resumed_run_without_a_checkpoint_starts_from_the_base(tmp_path, base, run_cli):
    config = _config(tmp_path, base, max_updates=1)
    assert run_cli("train", config).code == 0
    shutil.rmtree(tmp_path / "ft" / "checkpoints")  # as if stopped before its first checkpoint
    resumed = run_cli("train", "--resume", tmp_path / "ft")
    assert resumed.code == 0, resumed.err
    assert "no checkpoint" in resumed.out and "(model.init_from)" in resumed.out
    assert _ckpt(tmp_path / "ft", 1).metadata["lora"]["base"] == str(ckpt.resolve(base[0] / "base").resolve())


def test_a_run_starts_from_a_lora_run_with_its_adapters_merged(tmp_path, base, run_cli):
    assert run_cli("train", _config(tmp_path, base, max_updates=1)).code == 0
    merged = ckpt.load_checkpoint(tmp_path / "ft").model.state_dict()
    for name, lora_section in (("again", LORA), ("whole", None)):
        config = _config(tmp_path, base, name=name, lora_section=lora_section, max_updates=1, lr=1e-9)
        config_tree = yaml.safe_load(open(config))
        config_tree["model"] = {"init_from": str(tmp_path / "ft")}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(without_curves(config_tree)), encoding="utf-8")
        assert run_cli("train", config).code == 0
        got = ckpt.load_checkpoint(tmp_path / name).model.state_dict()
        for k in ("encoder.0.attn.qkv.weight", "decoder.1.cross_attn.kv.weight"):  # adapted layers of the first run
            torch.testing.assert_close(got[k], merged[k], rtol=0, atol=1e-6)


# ------------------------------------------------------------------------------------------------- bad input
def test_resume_with_another_rank_is_refused(tmp_path, base, run_cli):
    assert run_cli("train", _config(tmp_path, base, max_updates=1)).code == 0
    run = tmp_path / "ft"
    assert_one_line_error(run_cli("train", "--resume", run, "--set", "training.lora.rank=8"), "training.lora.rank")
    forced = run_cli("train", "--resume", run, "--set", "training.lora.rank=8", "--force")
    assert_one_line_error(forced, "rank 4", "training.lora.rank 8", "new run")
    no_lora = run_cli("train", "--resume", run, "--set", "training.lora=null", "--force")
    assert_one_line_error(no_lora, "training.lora")


def test_base_weights_changed_or_gone_are_named(tmp_path, base, run_cli):
    root, _ = base
    copy = tmp_path / "base-copy"
    shutil.copytree(root / "base", copy)
    assert run_cli("train", _config(tmp_path, base, max_updates=1, model={"init_from": str(copy)})).code == 0
    (ckpt_file,) = (copy / "checkpoints").glob("best.safetensors")
    bundle = ckpt.load(ckpt_file)
    ckpt.save(ckpt_file, ckpt.Bundle({**bundle.metadata, "update": 99}, bundle.model, bundle.tokenizer))
    assert_one_line_error(run_cli("translate", tmp_path / "ft", stdin="A dog .\n"), "changed", str(ckpt_file.resolve()))
    ckpt_file.unlink()
    assert_one_line_error(run_cli("train", "--resume", tmp_path / "ft", "--set", "training.max_updates=2"), "gone")


def test_lora_without_init_from_is_refused(tmp_path, base, run_cli):
    config = _config(tmp_path, base, max_updates=1, model=TINY_TRANSFORMER)
    assert_one_line_error(run_cli("train", config), "training.lora", "model.init_from")
    config = _config(tmp_path, base, name="avg", max_updates=1, average_last=2)
    assert_one_line_error(run_cli("train", config), "training.average_last", "merge-lora")


def test_unknown_modules_name_the_linear_layers(tmp_path, base, run_cli):
    config = _config(tmp_path, base, max_updates=1, lora_section={**LORA, "modules": ["qkv", "query"]})
    line = assert_one_line_error(run_cli("train", config), "'query'", "names no linear layer")
    for name in ("encoder.N.attn.qkv", "decoder.N.cross_attn.kv", "decoder.N.ffn.fc1"):
        assert name in line, line
    # a pattern: only the decoder's feed-forward layers
    ok = run_cli(
        "train", _config(tmp_path, base, name="ffn", max_updates=1, lora_section={"modules": ["decoder.*.fc?"]})
    )
    assert ok.code == 0, ok.err
    assert _ckpt(tmp_path / "ffn", 1).metadata["lora"]["layers"] == [
        f"decoder.{i}.ffn.fc{j}" for i in range(2) for j in (1, 2)
    ]


def test_missing_peft_names_the_extra(tmp_path, base, run_cli, monkeypatch):
    monkeypatch.setitem(sys.modules, "peft", None)  # `import peft` raises ImportError
    assert_one_line_error(run_cli("train", _config(tmp_path, base, max_updates=1)), "pip install 'mtkit[lora]'")


# ------------------------------------------------------------------------------------ frozen embeddings, recompute
def test_freeze_embeddings_keeps_them_and_trains_the_rest(tmp_path, base, run_cli):
    root, _ = base
    config = _config(tmp_path, base, lora_section=None, max_updates=2, freeze_embeddings=True)
    result = run_cli("train", config)
    assert result.code == 0, result.err
    start, end = ckpt.load(ckpt.resolve(root / "base")).model, _ckpt(tmp_path / "ft", 2, with_train=True)
    assert torch.equal(start["tgt_embed.weight"], end.model["tgt_embed.weight"])  # tied: also the output projection
    assert not torch.equal(start["encoder.0.ffn.fc1.weight"], end.model["encoder.0.ffn.fc1.weight"])
    frozen = sum(1 for k in end.model if k.split(".")[0] in ("src_embed", "tgt_embed"))
    assert frozen >= 1
    trained = len({k for k in end.model if k.split(".")[0] not in ("src_embed", "tgt_embed")})
    assert len([k for k in end.train if k.endswith(".exp_avg")]) == trained


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_gradient_checkpointing_gives_the_same_loss_and_gradients(one_thread, norm):
    from mtkit.training.loss import fused_output_loss
    from mtkit.training.step import TeacherForcing

    cfg = cfgmod.TransformerConfig(**{**BASE_MODEL, "norm": norm, "dropout": 0.2, "attention_dropout": 0.1})
    torch.manual_seed(0)
    model = build_model(cfg, 40, 40, True).train()
    src = torch.randint(4, 40, (5, 9))
    tgt_in, tgt_out = torch.randint(4, 40, (5, 7)), torch.randint(4, 40, (5, 7))
    src[1, 5:], tgt_out[2, 4:] = PAD, PAD
    keep = tgt_out.ne(PAD)
    calls = []
    model.decoder[0].register_forward_pre_hook(lambda *args: calls.append(1))

    def run(recompute: bool):
        model.checkpoint_layers = recompute
        model.zero_grad(set_to_none=True)
        calls.clear()
        torch.manual_seed(1)  # the same dropout masks
        loss, _ = fused_output_loss(
            TeacherForcing(model)(src, tgt_in, keep), model.tgt_embed.weight, None, tgt_out[keep], 0.1
        )
        loss.backward()
        return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}, len(calls)

    loss, grads, forwards = run(False)
    loss_ckpt, grads_ckpt, forwards_ckpt = run(True)
    assert (forwards, forwards_ckpt) == (1, 2)  # the checkpointed layer ran again in the backward pass
    torch.testing.assert_close(loss_ckpt, loss, rtol=1e-6, atol=1e-6)
    assert sorted(grads) == sorted(grads_ckpt)
    for name in grads:
        torch.testing.assert_close(grads_ckpt[name], grads[name], rtol=1e-5, atol=1e-6, msg=name)


def test_gradient_checkpointing_needs_a_transformer(tmp_path, base, run_cli):
    rnn = {"arch": "luong", "embed_dim": 16, "hidden_size": 16}
    config = _config(tmp_path, base, lora_section=None, max_updates=1, model=rnn, gradient_checkpointing=True)
    assert_one_line_error(run_cli("train", config), "gradient_checkpointing", "luong")


def test_a_lora_run_with_gradient_checkpointing_trains_as_one_without(tmp_path, base, run_cli):
    """Two updates with the layers recomputed (dropout on) reach the adapters of two updates without."""
    for name, recompute in (("plain", False), ("recomputed", True)):
        config = _config(tmp_path, base, name=name, max_updates=2, gradient_checkpointing=recompute)
        assert run_cli("train", config).code == 0
    a, b = _ckpt(tmp_path / "plain", 2), _ckpt(tmp_path / "recomputed", 2)
    assert b.metadata["config"]["training"]["gradient_checkpointing"] and sorted(a.model) == sorted(b.model)
    assert any(a.model[k].abs().max() > 0 for k in a.model if ".lora_B." in k)
    for k in a.model:
        torch.testing.assert_close(b.model[k], a.model[k], rtol=1e-5, atol=1e-6, msg=k)
