"""Quality estimates (mtkit/inference/confidence.py): the calibration is isotonic and monotone, words take their
subwords' probability, `mtkit calibrate` writes what later loads use, and every front door carries the confidence:
the API, jsonl, the server's /v1/translate and --mark-below; bad input is one line."""

from __future__ import annotations

import json
import math
import random
import shutil
from pathlib import Path

import pytest

import mtkit
from mtkit.inference.confidence import Calibration, agreement, calibration_error, features, spearman, words

SOURCES = ["A man is riding a bike .", "Two dogs and a cat .", "The white tree ."]


@pytest.fixture(scope="module")
def run(toy_run_workdir) -> Path:
    return toy_run_workdir / "run"


@pytest.fixture(scope="module")
def calibrated(run, tmp_path_factory) -> Path:
    """A copy of the toy run, calibrated on its valid split (the shared run stays uncalibrated)."""
    from mtkit.inference.calibrate import calibrate_main

    copy = tmp_path_factory.mktemp("calibrated") / "run"
    shutil.copytree(run, copy)
    calibrate_main(run=copy, device="cpu", dtype="float32")
    return copy


def test_the_fit_is_isotonic_and_the_map_monotone():
    rng = random.Random(0)
    scores = [rng.uniform(-3, 0) for _ in range(300)]
    quality = [min(max(0.5 + 0.15 * s + rng.gauss(0, 0.15), 0), 1) for s in scores]
    cal = Calibration.fit(scores, quality)
    assert list(cal.y) == sorted(cal.y) and list(cal.x) == sorted(cal.x) and cal.fitted_on == 300
    grid = [-4 + i / 50 for i in range(250)]
    mapped = [cal(x) for x in grid]
    assert all(a <= b for a, b in zip(mapped, mapped[1:])) and all(0 <= m <= 1 for m in mapped)
    # pool adjacent violators by hand: (1, .2) (2, .6) (3, .4) (4, .9) -> blocks .2 | (.6 .4) pooled .5 | .9
    cal = Calibration.fit([1, 2, 3, 4], [0.2, 0.6, 0.4, 0.9])
    assert cal.x == (1.0, 2.5, 4.0) and cal.y == pytest.approx((0.2, 0.5, 0.9))
    assert cal(0) == 0.2 and cal(5) == 0.9 and cal(3.25) == pytest.approx(0.7)
    # it brings the calibration error down on its own data
    assert calibration_error([cal(s) for s in scores], quality) <= calibration_error(
        [math.exp(s) for s in scores], quality
    )


def test_words_take_their_subwords_probability():
    pieces = ["\u2581Ein", "\u2581Fahr", "rad", "."]
    found = words(pieces, [-0.1, -0.5, -0.2, -0.3, -0.05])  # the last: EOS's
    assert [w for w, _ in found] == ["Ein", "Fahrrad."]
    assert [c for _, c in found] == pytest.approx([math.exp(-0.1), math.exp(-1.0)])
    assert spearman([1, 2, 3, 4], [10, 20, 30, 25]) == pytest.approx(0.8)


def test_the_api_gives_every_hypothesis_its_confidence(run):
    model = mtkit.load(run, device="cpu", dtype="float32", nbest=2)
    for translation in model.translate_batch(SOURCES):
        for h in translation.hypotheses:
            mean = sum(h.token_log_probs) / len(h.token_log_probs)
            assert h.confidence == pytest.approx(math.exp(mean))  # uncalibrated: the geometric mean probability
            assert " ".join(w for w, _ in h.word_confidences) == h.text
            assert all(0 < c <= 1 for _, c in h.word_confidences)
    assert model.translate_batch(SOURCES[0], scores=False).best.confidence is None


def test_the_linear_score_is_fitted_then_mapped_monotonically(tmp_path):
    """Least squares finds the weights of a quality that is linear in two figures; the confidence is the isotonic
    map of that score; the file keeps features, weights and samples, and a file of mean log-prob knots alone (as
    written before there were features) still loads as that."""
    rng = random.Random(1)
    rows = [{"mean_log_prob": rng.uniform(-3, 0), "log_length": rng.uniform(0, 3)} for _ in range(200)]
    quality = [0.8 + 0.1 * r["mean_log_prob"] - 0.05 * r["log_length"] for r in rows]
    cal = Calibration.fit_features(rows, quality, ("mean_log_prob", "log_length"))
    assert cal.weights == pytest.approx((0.8, 0.1, -0.05)) and cal.features == ("mean_log_prob", "log_length")
    assert [cal.confidence(r) for r in rows] == pytest.approx(quality, abs=1e-9)
    ordered = sorted(rows, key=cal.score)
    mapped = [cal.confidence(r) for r in ordered]
    assert all(a <= b for a, b in zip(mapped, mapped[1:]))
    cal.save(tmp_path)
    assert Calibration.load(tmp_path) == cal
    (tmp_path / "calibration.json").write_text(json.dumps({"x": [-2.0, -1.0], "y": [0.3, 0.6]}), encoding="utf-8")
    old = Calibration.load(tmp_path)
    assert old.features == ("mean_log_prob",) and old.confidence({"mean_log_prob": -1.5}) == pytest.approx(0.45)
    with pytest.raises(mtkit.MtkitError, match="needs the translation's log_length"):
        cal.confidence({"mean_log_prob": -1.0})


def test_agreement_is_the_mean_chrf_against_the_samples():
    from sacrebleu.metrics.chrf import CHRF

    hyps, samples = ["Ein Mann fährt Rad .", "Zwei Hunde ."], ["Ein Mann fährt ein Rad .", "Ein Mann radelt ."]
    chrf = CHRF()
    expected = [sum(chrf.sentence_score(h, [s]).score for s in samples) / 200 for h in hyps]
    assert agreement(hyps, samples) == pytest.approx(expected, abs=1e-6)
    assert agreement(hyps, []) == [0.0, 0.0]


def test_calibrate_writes_what_later_loads_use(calibrated, run_cli):
    cal = Calibration.load(calibrated)
    assert cal.fitted_on == 30 and list(cal.y) == sorted(cal.y) and cal.samples == 0
    assert cal.features == ("mean_log_prob", "log_length", "log_source_length")
    model = mtkit.load(calibrated, device="cpu", dtype="float32")
    for t in model.translate_batch(SOURCES):
        figures = features(t.best.token_log_probs, len(t.source_tokens))
        assert t.best.confidence == pytest.approx(cal.confidence(figures))
    result = run_cli("calibrate", calibrated, "--max-sentences", "20", "--device", "cpu")
    assert result.code == 0 and "calibrated on 20 sentences of valid: Spearman" in result.out


def test_jsonl_and_mark_below_carry_the_confidence(calibrated, run_cli, tmp_path):
    src = tmp_path / "in.en"
    src.write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    result = run_cli("translate", calibrated, "-i", src, "--format", "jsonl", "--nbest", "2", "--dtype", "float32")
    records = [json.loads(line) for line in result.out.splitlines()]
    model = mtkit.load(calibrated, device="cpu", dtype="float32", nbest=2)
    for record, t in zip(records, model.translate_batch(SOURCES)):
        assert record["confidence"] == round(t.best.confidence, 4)
        assert [w for w, _ in record["words"]] == [w for w, _ in t.best.word_confidences]
        assert [n["confidence"] for n in record["nbest"]] == [round(h.confidence, 4) for h in t.hypotheses]
    marked = run_cli("translate", calibrated, "-i", src, "--mark-below", "0.9", "--dtype", "float32")
    assert marked.code == 0
    flagged = 0
    for line, t in zip(marked.out.splitlines(), mtkit.load(calibrated, dtype="float32").translate_batch(SOURCES)):
        low = [w for w, c in t.best.word_confidences if c < 0.9]
        assert line.count('<span class="mtkit-low"') == len(low)
        for w in low:
            assert f'">{w}</span>' in line
        flagged += len(low)
    assert flagged > 0  # the toy model is unsure of some words: the marking was exercised


def test_the_server_answers_with_the_confidence(calibrated):
    from fastapi.testclient import TestClient

    from mtkit.serving.app import create_app
    from mtkit.serving.languages import run_languages

    model = mtkit.load(calibrated, device="cpu", dtype="float32")
    with TestClient(create_app(model, run_languages(calibrated))) as client:
        answer = client.post("/v1/translate", json={"text": SOURCES, "options": {"scores": True}})
    assert answer.status_code == 200
    expected = model.translate_batch(SOURCES)
    for out, t in zip(answer.json()["translations"], expected):
        hyp = out["hypotheses"][0]
        assert hyp["confidence"] == pytest.approx(t.best.confidence)
        assert [w for w, _ in hyp["words"]] == [w for w, _ in t.best.word_confidences]


@pytest.mark.parametrize(
    "args, message",
    [
        (["--mark-below", "0"], "--mark-below 0.0: a confidence in (0, 1]"),
        (["--mark-below", "0.5", "--format", "jsonl"], "--mark-below writes one HTML line per input line"),
    ],
)
def test_bad_mark_below_is_one_line(run, run_cli, args, message):
    result = run_cli("translate", run, *args)
    assert result.code == 2 and message in result.err and len(result.err.strip().splitlines()) == 1


def test_calibrating_with_samples_makes_every_translation_draw_them(run, tmp_path, run_cli):
    """`mtkit calibrate --samples 3`: the agreement joins the figures, and a later translation's confidence is the
    calibration's map of its figures with its agreement against the 3 epsilon samples the API draws (seed 0)."""
    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    result = run_cli("calibrate", copy, "--samples", "3", "--device", "cpu")
    assert result.code == 0 and "log_source_length, agreement" in result.out, result.err
    cal = Calibration.load(copy)
    assert cal.samples == 3 and cal.features[-1] == "agreement" and len(cal.weights) == 5
    model = mtkit.load(copy, device="cpu", dtype="float32")
    drawn = mtkit.load(copy, device="cpu", dtype="float32", algorithm="sampling", nbest=3, epsilon=0.02, seed=0)
    drawn = drawn.translate_batch(SOURCES, scores=False)  # a fresh model's draws with seed 0
    model.translate_batch(SOURCES, algorithm="sampling", seed=0)  # the API's own stream of seed 0 moves on...
    for t, d in zip(model.translate_batch(SOURCES), drawn):  # ...but the confidence's samples start it afresh
        agrees = agreement([t.best.text], [h.text for h in d.hypotheses])[0]
        figures = features(t.best.token_log_probs, len(t.source_tokens), agrees)
        assert t.best.confidence == pytest.approx(cal.confidence(figures))
    too_many = run_cli("calibrate", copy, "--samples", "65")
    assert too_many.code == 2 and "--samples 65: use 0 (none) to 64" in too_many.err
    (copy / "calibration.json").write_text(json.dumps({"x": [0.0], "y": [0.5], "features": ["agreement"]}))
    damaged = run_cli("translate", copy, "-i", copy / "config.yaml")
    assert damaged.code == 2 and "not a calibration" in damaged.err and len(damaged.err.strip().splitlines()) == 1


def test_calibrating_what_cannot_be_calibrated_is_one_line(run, run_cli, tmp_path):
    not_a_run = run_cli("calibrate", tmp_path)
    assert not_a_run.code == 2 and "not a run directory (no config.yaml)" in not_a_run.err
    missing = run_cli("calibrate", run, "--split", "dev")
    assert missing.code == 2 and "no split 'dev'" in missing.err and len(missing.err.strip().splitlines()) == 1


def test_training_calibrates_at_the_end_when_asked(toy_run_workdir, tmp_path, run_cli):
    """training.calibrate: `mtkit train` fits the confidence on the valid split once training stops; a data dir
    without one is refused before any training."""
    import yaml

    config = yaml.safe_load((toy_run_workdir / "config.yaml").read_text(encoding="utf-8"))
    config["training"].update(run_dir=str(tmp_path / "run"), max_updates=4, validate_every=4, calibrate=True)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    result = run_cli("train", path)
    assert result.code == 0, result.err
    assert "calibrated on 30 sentences of valid" in result.out
    assert Calibration.load(tmp_path / "run") is not None
    config["data"]["splits"].pop("valid")
    config["data"]["dir"] = str(tmp_path / "data-without-valid")
    config["training"]["run_dir"] = str(tmp_path / "run2")
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    assert run_cli("prepare", path).code == 0
    refused = run_cli("train", path)
    assert refused.code == 2 and "training.calibrate fits the confidence on the valid split" in refused.err
    assert not (tmp_path / "run2" / "checkpoints").exists()
