"""COMET-22 and CometKiwi (mtkit/scoring/comet.py) at unbabel-comet's own scores, and ``mtkit score -m comet``.

tests/data/comet/ holds tiny random checkpoints in the hub's layout and the scores unbabel-comet 2.2.7's ``predict``
gave them (made by scripts/make_comet_fixtures.py in a virtual environment of its own): mtkit must give every line
the same score within 1e-5. Their encoder is named ``mtkit-tests/tiny-xlmr`` and is found, as a hub name is, in a
Hugging Face cache made here.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
import yaml

DATA = Path(__file__).resolve().parent / "data" / "comet"
EXPECTED = json.loads((DATA / "expected.json").read_text(encoding="utf-8"))
SNAPSHOT = "0" * 40
TOLERANCE = 1e-5


def lines(name: str) -> list[str]:
    return (DATA / f"{name}.txt").read_text(encoding="utf-8").split("\n")[:-1]


def record_encodings(model, monkeypatch) -> list:
    """The token sequences ``model`` encodes from now on (each as a tuple), in a list that grows as it encodes."""
    encoded = []
    original = type(model)._pooled

    def counting(self, sequences):
        encoded.extend(map(tuple, sequences))
        return original(self, sequences)

    monkeypatch.setattr(type(model), "_pooled", counting)
    return encoded


def place_in_hub_cache(cache: Path, name: str, folder: Path) -> None:
    """``folder``'s files where a download of hub repository ``name`` puts them."""
    repo = cache / ("models--" + name.replace("/", "--"))
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(SNAPSHOT)
    shutil.copytree(folder, repo / "snapshots" / SNAPSHOT, dirs_exist_ok=True)


@pytest.fixture(scope="module")
def hub(tmp_path_factory):
    """A Hugging Face cache holding the fixtures' encoder and, as ``Unbabel/wmt22-comet-da``, a COMET-22 model."""
    from huggingface_hub import constants

    cache = tmp_path_factory.mktemp("hub")
    place_in_hub_cache(cache, "mtkit-tests/tiny-xlmr", DATA / "encoder")
    place_in_hub_cache(cache, "Unbabel/wmt22-comet-da", DATA / "comet-softmax")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(constants, "HF_HUB_CACHE", str(cache))
        mp.setenv("HF_HUB_CACHE", str(cache))
        yield cache


@pytest.fixture(scope="module")
def models(hub):
    from mtkit.scoring import comet

    return {name: comet.load(str(DATA / name), batch_size=3) for name in EXPECTED}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_line_scores_as_unbabel_comet(models, name):
    model = models[name]
    reference = None if model.reference_free else lines("ref")
    got = model.score_systems([lines("sys1"), lines("sys2")], lines("src"), reference)
    for system, scores in zip(("sys1", "sys2"), got):
        expected = EXPECTED[name][system]
        assert max(expected) - min(expected) > 0.05  # lines differ: a wrong forward cannot pass by chance
        assert len(scores) == len(expected)
        assert max(abs(a - b) for a, b in zip(scores, expected)) < TOLERANCE, (name, system)


def test_the_fixtures_cut_long_lines_and_mix_layers_both_ways(models):
    """What the equality above covers: a line over 512 subwords, cut as a segment and as a joint sequence, and a
    layer mix by sparsemax (a weight exactly 0, the top state's in one) beside softmax (``sparsemax_patch`` runs as
    softmax)."""
    kiwi = models["kiwi-sparsemax"]
    src, mt = lines("src"), lines("sys1")
    longest = max(src, key=len)
    assert len(kiwi.tokenizer(longest)["input_ids"]) > 512
    assert max(len(ids) for ids in kiwi._ids(src)) == 510
    assert max(len(ids) for ids in kiwi.joint_ids(mt, src)) == 512
    assert (models["comet-sparsemax"].weights == 0).any() and (kiwi.weights == 0).any()
    assert (models["kiwi-sparsemax-patch"].weights > 0).all() and (models["comet-softmax"].weights > 0).all()
    # kiwi-sparsemax weighs its top state 0: its encoder stops a layer early, and still scores as unbabel-comet
    assert kiwi.weights[-1] == 0 and len(kiwi.encoder.encoder.layer) == len(kiwi.weights) - 2
    assert len(models["comet-softmax"].encoder.encoder.layer) == len(models["comet-softmax"].weights) - 1
    hparams = yaml.safe_load((DATA / "kiwi-sparsemax-patch" / "hparams.yaml").read_text())
    assert hparams["layer_transformation"] == "sparsemax_patch"


def test_systems_share_the_encoding_of_sources_and_references(models, monkeypatch):
    model = models["comet-softmax"]
    encoded = record_encodings(model, monkeypatch)
    src, ref, systems = lines("src"), lines("ref"), [lines("sys1"), lines("sys2")]
    together = model.score_systems(systems, src, ref)
    assert len(encoded) == len(set(src) | set(ref) | set(systems[0]) | set(systems[1]))
    for scores, system in zip(together, ("sys1", "sys2")):  # and each system's scores are its own
        assert max(abs(a - b) for a, b in zip(scores, EXPECTED["comet-softmax"][system])) < TOLERANCE


# ------------------------------------------------------------------------------------------------- mtkit score
def test_score_json_gives_the_mean_and_each_line(hub, run_cli):
    """No --comet-model: the default hub name, found in the cache."""
    result = run_cli(
        "score", DATA / "ref.txt", "-i", DATA / "sys1.txt", "--source", DATA / "src.txt", "-m", "comet", "-m",
        "chrf", "--json", "--sentences",
    )  # fmt: skip
    assert result.code == 0, result.err
    got = json.loads(result.out)
    assert list(got) == ["comet", "chrf"]
    expected = EXPECTED["comet-softmax"]["sys1"]
    assert max(abs(a - b) for a, b in zip(got["comet"]["sentences"], expected)) < TOLERANCE
    assert abs(got["comet"]["score"] - sum(expected) / len(expected)) < TOLERANCE
    assert got["comet"]["model"] == "Unbabel/wmt22-comet-da"


def test_cometkiwi_needs_no_reference_and_compares_systems(hub, run_cli):
    result = run_cli(
        "score", "-i", DATA / "sys1.txt", "-i", DATA / "sys2.txt", "--source", DATA / "src.txt", "-m", "cometkiwi",
        "--cometkiwi-model", DATA / "kiwi-sparsemax", "--paired-ar", "--paired-ar-n", "50", "--json", "--sentences",
    )  # fmt: skip
    assert result.code == 0, result.err
    got = json.loads(result.out)
    assert got["test"] == "paired-ar" and [row["baseline"] for row in got["systems"]] == [True, False]
    for row, system in zip(got["systems"], ("sys1", "sys2")):
        expected = EXPECTED["kiwi-sparsemax"][system]
        assert abs(row["cometkiwi"]["score"] - sum(expected) / len(expected)) < TOLERANCE
        assert max(abs(a - b) for a, b in zip(row["cometkiwi"]["sentences"], expected)) < TOLERANCE
    assert got["systems"][0]["cometkiwi"]["p_value"] is None and 0 <= got["systems"][1]["cometkiwi"]["p_value"] <= 1


# ------------------------------------------------------------------------------------------------- refusals
def assert_refused(result, *words):
    assert result.code == 2, (result.out, result.err)
    assert result.out == ""
    message = result.err.strip()
    assert "\n" not in message and "Traceback" not in message, message
    for word in words:
        assert word in message, (word, message)


def comet_args(model, *extra, source=DATA / "src.txt"):
    return ["score", DATA / "ref.txt", "-i", DATA / "sys1.txt", "--source", source, "-m", "comet",
            "--comet-model", model, *extra]  # fmt: skip


class Marker:
    """Unpickled, it creates a file: what a checkpoint that runs code could do."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (open, (str(self.path), "w"))


def test_a_checkpoint_that_would_run_code_is_refused_and_runs_nothing(hub, run_cli, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(DATA / "comet-softmax", model)
    marker = tmp_path / "created-by-unpickling"
    state = torch.load(model / "checkpoints" / "model.ckpt", weights_only=True)
    state["hyper_parameters"] = Marker(marker)
    torch.save(state, model / "checkpoints" / "model.ckpt")

    assert_refused(run_cli(*comet_args(model)), "model.ckpt", "refused")
    assert not marker.exists()
    torch.load(model / "checkpoints" / "model.ckpt", weights_only=False)["hyper_parameters"].close()
    assert marker.exists()  # loaded without the guard, it does run code


def test_bad_inputs_are_one_line_exit_2(hub, run_cli, tmp_path):
    assert_refused(run_cli(*comet_args(tmp_path / "nowhere")), "nowhere", "hf download")
    assert_refused(run_cli(*comet_args("someone/not-cached")), "someone/not-cached", "Hugging Face cache")
    no_source = comet_args(DATA / "comet-softmax")
    del no_source[4:6]
    assert_refused(run_cli(*no_source), "--source")
    short = tmp_path / "short.txt"
    short.write_text("\n".join(lines("src")[:-1]) + "\n", encoding="utf-8")
    assert_refused(run_cli(*comet_args(DATA / "comet-softmax", source=short)), "short.txt", "9", "10", "aligned")
    assert_refused(run_cli(*comet_args(tmp_path / "short.txt")), "short.txt", "directory")
    assert_refused(
        run_cli("score", "-i", DATA / "sys1.txt", "--source", DATA / "src.txt", "-m", "comet"), "reference file"
    )
    kiwi_as_comet = comet_args(DATA / "kiwi-sparsemax")
    assert_refused(run_cli(*kiwi_as_comet), "--cometkiwi-model")
    no_hparams = tmp_path / "no-hparams"
    shutil.copytree(DATA / "comet-softmax", no_hparams)
    (no_hparams / "hparams.yaml").unlink()
    assert_refused(run_cli(*comet_args(no_hparams)), "hparams.yaml")


def test_a_model_of_the_other_kind_is_refused_before_its_weights_are_read(hub, monkeypatch):
    """The quality estimate needs CometKiwi, MBR's utility COMET-22: each says so in one line, weights unread."""
    from mtkit.decoding import mbr
    from mtkit.errors import MtkitError
    from mtkit.inference.quality import QualityEstimator
    from mtkit.scoring import comet

    monkeypatch.setattr(comet, "_load_checkpoint", lambda path: pytest.fail(f"{path} was read"))
    with pytest.raises(MtkitError, match=r"^--qe-model \S+: a reference-based \(COMET-22\) model; give a CometKiwi"):
        QualityEstimator(str(DATA / "comet-softmax"))
    with pytest.raises(
        MtkitError, match=r"^--comet-model \S+: a reference-free \(CometKiwi\) model; MBR needs a COMET"
    ):
        mbr.comet_scorer(str(DATA / "kiwi-sparsemax"))


def test_an_encoder_that_does_not_fit_the_checkpoint_is_refused(hub, run_cli, tmp_path):
    wider = tmp_path / "wider-encoder"
    shutil.copytree(DATA / "encoder", wider)
    config = json.loads((wider / "config.json").read_text())
    (wider / "config.json").write_text(json.dumps({**config, "hidden_size": 32, "intermediate_size": 64}))
    deeper = tmp_path / "deeper-encoder"
    shutil.copytree(DATA / "encoder", deeper)
    (deeper / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}))
    for encoder, word in ((wider, "does not fit"), (deeper, "does not fit")):
        model = tmp_path / f"model-{encoder.name}"
        shutil.copytree(DATA / "comet-softmax", model)
        hparams = yaml.safe_load((model / "hparams.yaml").read_text())
        (model / "hparams.yaml").write_text(yaml.safe_dump({**hparams, "pretrained_model": str(encoder)}))
        assert_refused(run_cli(*comet_args(model)), word, "encoder")


def test_score_without_neural_metrics_never_imports_torch():
    """``-m comet`` is a choice of ``mtkit score``, yet sacreBLEU's metrics alone still run without torch."""
    import subprocess
    import sys

    code = (
        "import sys; from mtkit.cli import main; "
        f"rc = main(['score', {str(DATA / 'ref.txt')!r}, '-i', {str(DATA / 'sys1.txt')!r}, '-m', 'chrf']); "
        "assert rc == 0, rc; assert 'torch' not in sys.modules, 'torch imported'"
    )
    env = {**os.environ, "PYTHONPATH": str(DATA.parents[2])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr


# ------------------------------------------------------------------------------------------------- MBR utility
def test_mbr_comet_encodes_each_text_once_and_scores_every_pair(models, monkeypatch):
    """N candidates and M pseudo-references of a sentence: N + M + 1 texts encoded (not N x M pairs), and each
    pair's utility is that pair's COMET-22 score."""
    from mtkit.decoding import mbr
    from mtkit.decoding.hypothesis import Decoded

    model = models["comet-softmax"]
    encoded = record_encodings(model, monkeypatch)
    sources = lines("src")[:2]
    candidates = [lines("sys1")[:3], lines("sys2")[1:4]]
    references = [lines("ref")[:2], [lines("ref")[3], lines("sys2")[0]]]
    matrix = mbr.comet_matrix(candidates, references, sources, model)
    assert len(encoded) == len(set(sources) | {t for x in candidates + references for t in x})
    for k, (hyps, refs) in enumerate(zip(candidates, references)):
        for i, hyp in enumerate(hyps):
            pairs = model.score([hyp] * len(refs), [sources[k]] * len(refs), refs)
            assert max(abs(a / 100 - b) for a, b in zip(matrix[k][i], pairs)) < TOLERANCE
    found = [[Decoded([5 + i], 0.0, 0.0, [0.0, 0.0]) for i in range(len(hyps))] for hyps in candidates]
    ranked = mbr.rank(found, candidates, references, "comet", nbest=3, sources=sources, scorer=model)
    for k, kept in enumerate(ranked):
        means = [sum(row) / len(row) / 100 for row in matrix[k]]
        assert [h.score for h in kept] == pytest.approx(sorted(means, reverse=True), abs=TOLERANCE)


# ------------------------------------------------------------------------------------------------- quality estimates
SOURCES = ["A man is riding a bike .", "Two dogs .", ""]


@pytest.fixture(scope="module")
def qe_run(toy_run_workdir, hub):
    import mtkit

    run = toy_run_workdir / "run"
    plain = mtkit.load(run, device="cpu", dtype="float32", beam_size=4, nbest=4)
    quality = {"qe_model": str(DATA / "kiwi-sparsemax"), "rerank": "qe"}
    reranked = mtkit.load(run, device="cpu", dtype="float32", beam_size=4, nbest=4, **quality)
    return run, plain, reranked


def test_qe_is_cometkiwis_score_and_reranks_the_nbest(qe_run, models):
    _, plain, reranked = qe_run
    before, after = plain.translate_batch(SOURCES), reranked.translate_batch(SOURCES)
    kiwi = models["kiwi-sparsemax"]
    assert not after[2].hypotheses  # an empty line: nothing to estimate
    for b, a in zip(before[:2], after[:2]):
        assert all(h.qe is None for h in b.hypotheses)
        expected = kiwi.score([h.text for h in a.hypotheses], [a.source] * len(a.hypotheses))
        assert [h.qe for h in a.hypotheses] == pytest.approx(expected, abs=TOLERANCE)
        assert [h.qe for h in a.hypotheses] == sorted((h.qe for h in a.hypotheses), reverse=True)
        assert sorted(h.text for h in a.hypotheses) == sorted(h.text for h in b.hypotheses)
        assert all(h.confidence is not None for h in a.hypotheses)  # beside confidence
    best = max(zip(expected, (h.text for h in after[1].hypotheses)))[1]
    assert reranked.translate(SOURCES[1]) == best  # without scores too, the text is the reranked best


def test_translate_jsonl_and_http_give_qe(qe_run, models, run_cli, tmp_path):
    from fastapi.testclient import TestClient

    from mtkit.serving.app import create_app

    run, _, reranked = qe_run
    source = tmp_path / "in.txt"
    source.write_text("\n".join(SOURCES[:2]) + "\n", encoding="utf-8")
    result = run_cli("translate", run, "-i", source, "--format", "jsonl", "--qe-model", DATA / "kiwi-sparsemax")
    assert result.code == 0, result.err
    records = [json.loads(line) for line in result.out.splitlines()]
    expected = models["kiwi-sparsemax"].score([r["hypothesis"] for r in records], SOURCES[:2])
    assert [r["qe"] for r in records] == pytest.approx(expected, abs=1e-4)  # jsonl rounds to 4 decimals
    assert [r["nbest"][0]["qe"] for r in records] == [r["qe"] for r in records]
    with TestClient(create_app(reranked, ("en", "de"))) as client:
        found = client.post("/v1/translate", json={"text": SOURCES[:2], "options": {"scores": True}})
        assert found.status_code == 200, found.text
        hyps = [t["hypotheses"] for t in found.json()["translations"]]
        assert all(isinstance(h["qe"], float) and h["confidence"] is not None for x in hyps for h in x)


def test_bad_qe_options_are_one_line_exit_2(qe_run, run_cli):
    run = qe_run[0]
    assert_refused(run_cli("translate", run, "--rerank", "qe"), "--qe-model")
    assert_refused(run_cli("translate", run, "--rerank", "bleu", "--qe-model", DATA / "kiwi-sparsemax"), "--rerank")
    assert_refused(run_cli("translate", run, "--qe-model", DATA / "comet-softmax"), "CometKiwi")
