"""A multilingual model: two "languages" whose answer is known (cp copies the source, rv writes its words in
reverse order) from one English source, prepared, trained and translated; --target picks the language."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import (
    EN_WORDS,
    NEAR_TIE,
    SUBPROCESS_ENV,
    TINY_TRANSFORMER,
    assert_one_line_error,
    cli,
    diverged_at_near_ties,
    first_divergence,
    prepare_and_train,
    write_lines,
)

pytestmark = pytest.mark.slow  # trains its own model


def sentences(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(EN_WORDS[:20]) for _ in range(rng.randint(2, 5))) for _ in range(n)]


def write_directions(root: Path) -> list[dict]:
    directions = []
    for split, n, seed in (("train", 1200, 0), ("valid", 20, 1)):
        src = sentences(n, seed)
        write_lines(root / f"{split}.en", src)
        write_lines(root / f"{split}.cp", src)
        write_lines(root / f"{split}.rv", [" ".join(reversed(s.split())) for s in src])
    for tgt in ("cp", "rv"):
        splits = {s: {"src": str(root / f"{s}.en"), "tgt": str(root / f"{s}.{tgt}")} for s in ("train", "valid")}
        directions.append({"src_lang": "en", "tgt_lang": tgt, "splits": splits})
    return directions


@pytest.fixture(scope="module", params=["source", "decoder"])
def multi_run(request, tmp_path_factory) -> Path:
    """The toy model with its language token first in the source, or first in the decoder."""
    root = tmp_path_factory.mktemp("multi")
    data = {"dir": str(root / "data"), "vocab_size": 80, "directions": write_directions(root)}
    config = {
        "data": {**data, "target_tag": request.param},
        "model": {**TINY_TRANSFORMER, "d_model": 64, "ffn_dim": 128, "max_positions": 32},
        "training": {
            "run_dir": str(root / "run"),
            "max_updates": 900,  # 20 to 27 of the 30 right per direction at each 100 updates from 600 to 1,500
            "batch_tokens": 600,
            "lr": 3e-3,
            "warmup_updates": 40,
            "validate_every": 450,
            "log_every": 150,
            "threads": 1,
            "valid_max_sentences": 10,
        },
        "decoding": {"beam_size": 2, "threads": 1, "device": "cpu"},
    }
    prepare_and_train(root, config)
    return root / "run"


def test_the_data_dir_records_its_directions(multi_run):
    manifest = json.loads((multi_run.parent / "data" / "manifest.json").read_text())
    assert [d["name"] for d in manifest["directions"]] == ["en-cp", "en-rv"]
    assert manifest["targets"] == {"cp": "<2cp>", "rv": "<2rv>"} and manifest["src_lang"] == "mul"
    assert manifest["target_tag"] in ("source", "decoder")
    assert set(manifest["splits"]) == {"train", "valid.en-cp", "valid.en-rv"}
    assert manifest["splits"]["train"]["pairs_kept"] == 2400


def test_validation_scores_each_direction_and_their_mean(multi_run):
    records = [json.loads(line) for line in (multi_run / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in records if r["kind"] == "valid"][-1]
    per = valid["directions"]
    assert set(per) == {"en-cp", "en-rv"}
    assert valid["bleu"] == pytest.approx((per["en-cp"]["bleu"] + per["en-rv"]["bleu"]) / 2)


@pytest.mark.compares  # each line its own target in one batch, against a batch per target
def test_the_target_picks_the_language(multi_run):
    import mtkit

    model = mtkit.load(multi_run)
    assert model.targets == ("cp", "rv")
    source = sentences(30, 7)
    copied = model.translate(source, target="cp")
    reversed_ = model.translate(source, target="rv")
    right_cp = sum(c == s for c, s in zip(copied, source))
    right_rv = sum(r == " ".join(reversed(s.split())) for r, s in zip(reversed_, source))
    assert right_cp >= 20 and right_rv >= 20, (right_cp, right_rv, copied[:3], reversed_[:3])
    not_palindromes = [i for i, s in enumerate(source) if s.split() != s.split()[::-1]]
    assert sum(reversed_[i] == source[i] for i in not_palindromes) <= 2  # rv does not copy
    assert not any("<2" in t for t in copied + reversed_)  # the tag is never in the output
    # each line its own target, in one batch: the same as one call per target
    mixed = model.translate([{"text": s, "target": "cp" if i % 2 else "rv"} for i, s in enumerate(source)])
    assert mixed == [copied[i] if i % 2 else reversed_[i] for i in range(len(source))]


def test_a_missing_or_unknown_target_is_one_line(multi_run, run_cli, tmp_path):
    import mtkit
    from mtkit.errors import MtkitError

    model = mtkit.load(multi_run)
    with pytest.raises(MtkitError, match="translates into cp, rv; choose one"):
        model.translate("dog cat")
    with pytest.raises(MtkitError, match="unknown target 'fr'; this model translates into cp, rv"):
        model.translate("dog cat", target="fr")
    source = tmp_path / "in.en"
    source.write_text("dog cat\n")
    result = run_cli("translate", str(multi_run), "--input", str(source), "--target", "de")
    assert_one_line_error(result, "unknown target 'de'", "cp, rv")
    done = run_cli("translate", str(multi_run), "--input", str(source), "--target", "rv")
    assert done.code == 0 and done.out.count("\n") == 1


def test_the_server_answers_for_every_target(multi_run):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    import mtkit
    from mtkit.serving.app import create_app
    from mtkit.serving.languages import run_languages

    model = mtkit.load(multi_run)
    assert run_languages(multi_run) == ("en", "mul")
    with TestClient(create_app(mtkit.load(multi_run), run_languages(multi_run))) as client:
        assert client.get("/languages").json() == [
            {"code": "en", "name": "English", "targets": ["cp", "rv"]},
            {"code": "cp", "name": "cp", "targets": []},
            {"code": "rv", "name": "rv", "targets": []},
        ]
        answer = client.post(
            "/v1/translate", json={"text": ["dog cat", {"text": "red ball", "target": "cp"}], "target": "rv"}
        )
        assert [t["text"] for t in answer.json()["translations"]] == [
            model.translate("dog cat", target="rv"),
            model.translate("red ball", target="cp"),
        ]
        libre = client.post("/translate", json={"q": "dog cat", "source": "en", "target": "rv"})
        assert libre.json() == {"translatedText": model.translate("dog cat", target="rv")}
        missing = client.post("/v1/translate", json={"text": "dog cat"})
        assert missing.status_code == 400 and "cp, rv" in missing.json()["error"]
        unknown = client.post("/translate", json={"q": "dog cat", "target": "fr"})
        assert unknown.status_code == 400 and "cp, rv" in unknown.json()["error"]


class TagFirst:
    """A model whose language token is the decoder's first (``target_tag: decoder``) as the search sees it after
    that forced token: the first step reads BOS, then ``tag``, and one position fewer is left."""

    def __init__(self, model, tag: int):
        self.model, self.tag, self.max_positions = model, tag, model.max_positions - 1

    def encode(self, src, src_mask):
        return self.model.encode(src, src_mask)

    def init_state(self, memory, src_mask):
        return self.model.init_state(memory, src_mask)

    def step(self, prev_tokens, state, need_attention=False):
        from mtkit.models.base import BOS

        if bool(prev_tokens.eq(BOS).all()):
            _, state, _ = self.model.step(prev_tokens, state)
            prev_tokens = prev_tokens.clone().fill_(self.tag)
        return self.model.step(prev_tokens, state, need_attention)


def test_ctranslate2_translates_as_torch_does(multi_run, tmp_path):
    """The export translates as the float32 model it was made from, with the same scores, but where the search
    meets a near-tie (the two engines round differently, conftest.py)."""
    pytest.importorskip("ctranslate2")
    import mtkit
    from mtkit.languages import language_tag
    from mtkit.models.base import EOS

    source = sentences(12, 9)
    torch_model = mtkit.load(multi_run, dtype="float32")  # the weights CTranslate2 computes with
    exported = tmp_path / "ct2"
    assert cli("export", multi_run, "--output", exported) == 0
    ct2_model = mtkit.load(exported)
    assert ct2_model.targets == ("cp", "rv")
    engine, o = torch_model.engine, torch_model.options
    for target in ("cp", "rv"):
        tag = language_tag(target, engine.tag_template)
        if engine.target_tag == "source":
            model, ids, forced = engine.model, engine.encode([f"{tag} {s}" for s in source]), 0
        else:  # the search after the forced token, whose limit is one token less
            tag_id = engine.tokenizer.encode_tgt([tag])[0][0]  # as the engine forces it
            model, ids, forced = TagFirst(engine.model, tag_id), engine.encode(source), 1
        found = ct2_model.translate_batch(source, target=target)
        expected = torch_model.translate_batch(source, target=target)
        diverged = diverged_at_near_ties(
            model,
            [x + [EOS] for x in ids],
            [t.hypotheses for t in found],
            [t.hypotheses for t in expected],
            beam_size=o.beam_size,
            length_penalty=o.length_penalty,
            max_len_a=o.max_len_a,
            max_len_b=o.max_len_b - forced,
            stopping=o.stopping,
        )
        for i, (a, b) in enumerate(zip(found, expected)):
            if i not in diverged:
                assert a.text == b.text
                assert a.best.score == pytest.approx(b.best.score, abs=2e-4)


def test_directions_are_sampled_by_temperature():
    import numpy as np

    from mtkit.data.batches import direction_sample

    first = np.array([7] * 900 + [8] * 100)  # two directions: 900 and 100 examples
    even = direction_sample(first, 1.0, seed=1, epoch=1)
    assert sorted(even.tolist()) == list(range(1000))  # T = 1: every example once
    hot = direction_sample(first, 5.0, seed=1, epoch=1)
    share = (first[hot] == 8).mean()  # 100 ** 0.2 / (900 ** 0.2 + 100 ** 0.2) = 0.389
    assert abs(share - 0.389) < 0.01 and abs(len(hot) - 1000) <= 2
    assert np.array_equal(hot, direction_sample(first, 5.0, seed=1, epoch=1))
    assert not np.array_equal(hot, direction_sample(first, 5.0, seed=1, epoch=2))


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda d: d[1].update(tgt_lang="en"), ["direction en-en", "same language"]),
        (lambda d: d.append(dict(d[0])), ["direction en-cp is given twice"]),
        (lambda d: [x["splits"].pop("train") for x in d], ["no direction has a train split"]),
        (lambda d: d.append({"src_lang": "en", "tgt_lang": "xx"}), ["data.directions[2] (en-xx): no splits"]),
    ],
)
def test_bad_directions_are_one_line(tmp_path, run_cli, write_config, change, words):
    directions = write_directions(tmp_path)
    change(directions)
    config = write_config({"data": {"dir": str(tmp_path / "data"), "directions": directions}})
    assert_one_line_error(run_cli("prepare", config), *words)
    assert not (tmp_path / "data").exists()


def test_directions_and_splits_together_and_unaligned_files_are_one_line(tmp_path, run_cli, write_config):
    directions = write_directions(tmp_path)
    both = {"dir": str(tmp_path / "data"), "directions": directions, "splits": directions[0]["splits"]}
    assert_one_line_error(run_cli("prepare", write_config({"data": both})), "not both")
    write_lines(tmp_path / "short.rv", ["one line"])
    directions[1]["splits"]["train"]["tgt"] = str(tmp_path / "short.rv")
    config = write_config({"data": {"dir": str(tmp_path / "data"), "vocab_size": 60, "directions": directions}})
    assert_one_line_error(run_cli("prepare", config), "train.en has 1200 lines but", "short.rv has 1;", "line-aligned")
    assert not (tmp_path / "data").exists() and not list(tmp_path.glob(".data.tmp-*"))


def test_resume_with_sampled_directions_equals_uninterrupted_bitwise(tmp_path, run_cli, write_config):
    """Directions of 1,200 and 300 pairs sampled at T = 5: 8 updates, then --resume to 16 == 16 straight."""
    import torch

    from mtkit import checkpoint as ckpt

    directions = write_directions(tmp_path)
    write_lines(tmp_path / "few.en", sentences(300, 3))
    write_lines(tmp_path / "few.rv", [" ".join(reversed(s.split())) for s in sentences(300, 3)])
    directions[1]["splits"]["train"] = {"src": str(tmp_path / "few.en"), "tgt": str(tmp_path / "few.rv")}
    data = {"dir": str(tmp_path / "data"), "vocab_size": 80, "directions": directions, "temperature": 5.0}
    training = {"batch_tokens": 400, "update_freq": 2, "validate_every": 8, "save_every": 8, "threads": 1}
    training.update(lr=3e-3, warmup_updates=4, valid_max_sentences=4, log_every=1)

    def config(name: str, updates: int):
        tree = {"data": data, "model": {**TINY_TRANSFORMER, "dropout": 0.1, "max_positions": 32}}
        tree["training"] = {**training, "run_dir": str(tmp_path / name), "max_updates": updates}
        return write_config(tree, f"{name}.yaml")

    assert run_cli("prepare", config("straight", 16)).code == 0
    assert run_cli("train", config("straight", 16)).code == 0
    assert run_cli("train", config("split", 8)).code == 0
    resumed = run_cli("train", "--resume", tmp_path / "split", "--set", "training.max_updates=16")
    assert resumed.code == 0, resumed.err
    a = ckpt.load(tmp_path / "straight" / "checkpoints" / "ckpt_0000016.safetensors", with_train=True)
    b = ckpt.load(tmp_path / "split" / "checkpoints" / "ckpt_0000016.safetensors", with_train=True)
    assert a.metadata["epoch"] >= 2, "the resumed half should cross an epoch boundary"
    assert sorted(a.model) == sorted(b.model) and sorted(a.train) == sorted(b.train)
    assert all(torch.equal(a.model[k], b.model[k]) for k in a.model)
    assert all(torch.equal(a.train[k], b.train[k]) for k in a.train)


def test_a_model_with_marian_tags_exports_to_transformers(tmp_path_factory):
    """tag_template ">>{lang}<<" in the source: export --format hf gives a MarianMT model that transformers'
    own MarianTokenizer and generate() drive to mtkit's float32 translations, for each target (parting only at a
    near-tie, conftest.py)."""
    pytest.importorskip("transformers")
    from transformers import MarianMTModel, MarianTokenizer

    import mtkit
    from mtkit.models.base import EOS

    root = tmp_path_factory.mktemp("marian-tags")
    data = {"dir": str(root / "data"), "vocab_size": 80, "directions": write_directions(root)}
    model = {**TINY_TRANSFORMER, "d_model": 64, "ffn_dim": 128, "max_positions": 32, "activation": "swish"}
    config = {
        "data": {**data, "target_tag": "source", "tag_template": ">>{lang}<<"},
        "model": {**model, "scale_embedding": True, "sinusoidal_layout": "halves"},  # Marian's
        "training": {"run_dir": str(root / "run"), "max_updates": 600, "batch_tokens": 600, "lr": 3e-3},
        "decoding": {"beam_size": 1, "threads": 1, "device": "cpu"},
    }
    config["training"].update(warmup_updates=40, validate_every=600, log_every=300, threads=1, valid_max_sentences=4)
    prepare_and_train(root, config)
    assert cli("export", root / "run", "--format", "hf", "--output", root / "hf") == 0
    ours = mtkit.load(root / "run", beam_size=1, max_len_a=0, max_len_b=12, dtype="float32")  # the exported weights
    tokenizer, hf_model = MarianTokenizer.from_pretrained(root / "hf"), MarianMTModel.from_pretrained(root / "hf")
    source = sentences(8, 11)
    eos = hf_model.config.eos_token_id
    for target in ("cp", "rv"):
        tagged = [f">>{target}<< {s}" for s in source]
        batch = tokenizer(tagged, return_tensors="pt", padding=True)
        assert tokenizer.convert_ids_to_tokens(batch["input_ids"][0])[0] == f">>{target}<<"  # one token
        out = hf_model.generate(**batch, num_beams=1, max_new_tokens=12)
        theirs = tokenizer.batch_decode(out, skip_special_tokens=True)
        ids = ours.engine.encode(tagged)
        mine = [hyps[0].tokens for hyps in ours.engine.translate_ids(ids)]
        parted = 0  # token for token, but where greedy search meets a near-tie (conftest.py)
        for src, a, row, text, hf_text in zip(ids, mine, out.tolist(), ours.translate(source, target=target), theirs):
            b = row[1 : row.index(eos)] if eos in row else row[1:]  # after the decoder start
            divergence = first_divergence(ours.engine.model, src + [EOS], a, b)
            if divergence is None:
                assert text == hf_text
            else:
                parted += 1
                assert divergence[1] <= NEAR_TIE, (text, hf_text, divergence)
        assert parted < len(source) / 2


def test_profile_decode_profiles_a_multilingual_run_into_one_target(multi_run, tmp_path):
    """scripts/profile_decode.py --target: the parts of decoding into one language, which add up to the total; beam
    search on the run whose tag is in the source, greedy search (whose decoder lives in another module) on the run
    whose decoder is given the tag."""
    import gzip
    import re

    with gzip.open(tmp_path / "toy.en.gz", "wt", encoding="utf-8") as f:
        f.write("".join(s + "\n" for s in sentences(12, 5)))
    script = Path(__file__).resolve().parents[1] / "scripts" / "profile_decode.py"
    args = [sys.executable, str(script), str(multi_run), "--target", "rv", "--data", str(tmp_path), "--split", "toy"]
    manifest = json.loads((multi_run.parent / "data" / "manifest.json").read_text())
    beam = {"source": "2", "decoder": "1"}[manifest["target_tag"]]
    done = subprocess.run([*args, "--beam", beam, "--threads", "1"], capture_output=True, text=True, env=SUBPROCESS_ENV)
    assert done.returncode == 0, done.stderr
    assert f"{multi_run}: 12 sentences of toy into rv, beam {beam}" in done.stdout, done.stdout
    total = float(re.search(r"^total ([\d.]+) s", done.stdout, re.MULTILINE).group(1))
    parts = dict(re.findall(r"^([a-z][^\n]*?)\s+(-?[\d.]+)\s+-?[\d.]+%\s+\d+$", done.stdout, re.MULTILINE))
    assert {"decoder layers", "output projection", "encoder", "search: own ops and Python"} <= set(parts), done.stdout
    assert abs(sum(float(v) for v in parts.values()) - total) <= 0.002 * len(parts) + 0.01
