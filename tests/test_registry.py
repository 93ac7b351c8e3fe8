"""The engines run what the registry's entries bring (mtkit/decoding/algorithms.py): every registered option at
the edges of its declared range runs on both engines (found from the registry, so a new option is covered without a
new test), a plugin's algorithm runs on CTranslate2 through the API, the command line and HTTP, a call's seed
reproduces the call on both engines, and a calibrated run's scored translation works on CTranslate2."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import mtkit
from conftest import cli
from mtkit.decoding import algorithms

SOURCES = ["A man is riding a bike .", "Two dogs ."]
ENGINES = ("torch", "ctranslate2")


@pytest.fixture(scope="module")
def run(toy_run_workdir) -> Path:
    return toy_run_workdir / "run"


@pytest.fixture(scope="module")
def exported(run, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("registry") / "ct2"
    assert cli("export", run, "-o", out) == 0
    return out


def load(run: Path, exported: Path, engine: str, **options):
    if engine == "ctranslate2":
        return mtkit.load(exported, **options)
    return mtkit.load(run, device="cpu", dtype="float32", **options)


@pytest.fixture(scope="module")
def comet_hub(tmp_path_factory):
    """A Hugging Face cache holding a tiny COMET-22 model under the default ``comet_model``, for mbr_utility comet."""
    from huggingface_hub import constants
    from test_comet import DATA, place_in_hub_cache

    cache = tmp_path_factory.mktemp("hub")
    place_in_hub_cache(cache, "mtkit-tests/tiny-xlmr", DATA / "encoder")
    place_in_hub_cache(cache, algorithms.COMET_MODEL, DATA / "comet-softmax")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(constants, "HF_HUB_CACHE", str(cache))
        yield cache


def edge_cases() -> list[tuple[str, str, object]]:
    """(algorithm, option, value) for every registered option's edges (``Param.edges``)."""
    return [(a.name, p.name, value) for a in algorithms.REGISTRY.values() for p in a.params for value in p.edges()]


@pytest.mark.parametrize("engine", ENGINES)
def test_every_option_at_the_edges_of_its_range_runs_on_both_engines(run, exported, engine, comet_hub):
    cases = edge_cases()
    assert {name for _, name, _ in cases} == set(algorithms.params())  # every option, each engine
    ran, refused = 0, 0
    for algorithm, name, value in cases:
        param = algorithms.params()[name][1]
        options = {"algorithm": algorithm, name: value}
        if engine not in algorithms.get(algorithm).engines:
            continue
        if param.engines and engine not in param.engines and value != param.default:
            with pytest.raises(mtkit.MtkitError) as err:  # the registry says so: refused in one line, naming it
                load(run, exported, engine, **options)
            assert param.cli_flag in str(err.value) and "\n" not in str(err.value)
            refused += 1
            continue
        model = load(run, exported, engine)
        found = model.translate_batch(SOURCES, scores=True, **options)
        assert len(found) == len(SOURCES), (algorithm, name, value)
        for translation in found:
            assert isinstance(translation.text, str), (algorithm, name, value)
            assert all(h.log_prob == h.log_prob for h in translation.hypotheses), (algorithm, name, value)  # no NaN
        ran += 1
    assert ran and (refused > 0) == (engine == "ctranslate2")


def test_nucleus_sampling_keeps_the_most_likely_subword_whatever_top_p():
    import torch

    from mtkit.decoding.sampling import filter_top_k_top_p

    logits = torch.tensor([[0.0, 3.0, 1.0], [2.0, 2.0, -1.0]])
    kept = filter_top_k_top_p(logits, 0, 4.3e-223) > -1e8
    assert kept.tolist() == [[False, True, False], [True, False, False]]


def test_the_smallest_temperature_draws_the_most_likely_subword(run):
    model = mtkit.load(run, device="cpu", dtype="float32")
    tiny = model.translate(SOURCES, algorithm="sampling", temperature=5e-324, seed=3)
    assert tiny == mtkit.load(run, device="cpu", dtype="float32", beam_size=1).translate(SOURCES)


# ---------------------------------------------------------------------------------------------- a plugin on CT2
@pytest.fixture
def shortest():
    import toy_algorithm

    algorithms.register(toy_algorithm.SHORTEST)
    yield toy_algorithm.SHORTEST
    algorithms.REGISTRY.pop("shortest", None)


def expected_shortest(exported: Path, width: int) -> list[str]:
    model = mtkit.load(exported, beam_size=width, nbest=width)
    return [min(t.hypotheses, key=lambda h: (len(h.tokens), -h.score)).text for t in model.translate_batch(SOURCES)]


def test_a_plugin_algorithm_runs_on_ctranslate2_through_the_api_and_http(exported, shortest):
    from fastapi.testclient import TestClient

    from mtkit.serving.app import create_app

    assert shortest.engines == ENGINES
    model = mtkit.load(exported, algorithm="shortest", shortest_width=4)
    assert model.translate(SOURCES) == expected_shortest(exported, 4)
    served = mtkit.load(exported)
    with TestClient(create_app(served, ("en", "de"))) as client:
        asked = {"text": SOURCES, "options": {"algorithm": "shortest", "shortest_width": 4}}
        found = client.post("/v1/translate", json=asked)
        assert found.status_code == 200, found.text
        assert [t["text"] for t in found.json()["translations"]] == expected_shortest(exported, 4)


def test_a_plugin_algorithm_runs_on_ctranslate2_on_the_command_line(exported):
    from test_algorithms import mtkit_with_toy

    done = mtkit_with_toy(
        "translate", exported, "--algorithm", "shortest", "--shortest-width", "4", stdin="\n".join(SOURCES) + "\n"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == expected_shortest(exported, 4)


# ------------------------------------------------------------------------------------------------------ seeds
@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("algorithm, seed", [("sampling", "seed"), ("mbr", "mbr_seed")])
def test_a_calls_seed_reproduces_the_call_on_both_engines(run, exported, engine, algorithm, seed):
    model = load(run, exported, engine)
    own = {"nbest": 3} if algorithm == "sampling" else {"mbr_pseudo_references": 3}

    def draw(value):
        return [
            [h.text for h in t.hypotheses]
            for t in model.translate_batch(SOURCES, algorithm=algorithm, **own, **{seed: value})
        ]

    first = draw(7)
    assert draw(7) == first  # the same call, the same output
    assert draw(8) != first or algorithm == "mbr"  # another seed, other samples (MBR may still agree)
    assert draw(7) == first
    # without a call's seed, calls continue the loaded seed's stream, which starts as a fresh model's
    loaded = load(run, exported, engine, algorithm="sampling", seed=7, nbest=3)
    if algorithm == "sampling":
        assert [[h.text for h in t.hypotheses] for t in loaded.translate_batch(SOURCES)] == first


# ------------------------------------------------------------------------------------------------ calibration
def test_a_calibrated_runs_scored_translation_on_ctranslate2(run, tmp_path):
    from mtkit.inference.confidence import Calibration, features

    copy = tmp_path / "run"
    shutil.copytree(run, copy)
    assert cli("calibrate", copy, "--samples", "2") == 0
    calibration = Calibration.load(copy)
    assert calibration.samples == 2 and calibration.without_samples is not None
    assert "agreement" not in calibration.without_samples.features
    model = mtkit.load(copy, engine="ctranslate2")
    assert model.calibration == calibration.without_samples  # CTranslate2 cannot draw epsilon samples
    for translation in model.translate_batch(SOURCES, scores=True):
        best = translation.best
        values = features(best.token_log_probs, len(translation.source_tokens))
        assert best.confidence == pytest.approx(calibration.without_samples.confidence(values))
    assert mtkit.load(copy, device="cpu", dtype="float32").calibration == calibration  # torch draws them
    from mtkit.inference.calibrate import calibrate_main

    with pytest.raises(mtkit.MtkitError, match=r"^--samples 2 draws epsilon samples, which this engine cannot \(--"):
        calibrate_main(run=copy, samples=2, engine="ctranslate2")
    # a file written before the fit without samples was kept: refused when scores are asked, in one line
    record = json.loads((copy / "calibration.json").read_text())
    del record["without_samples"]
    (copy / "calibration.json").write_text(json.dumps(record))
    old = mtkit.load(copy, engine="ctranslate2")
    assert old.translate(SOURCES)  # plain text needs no confidence
    with pytest.raises(mtkit.MtkitError) as err:
        old.translate_batch(SOURCES, scores=True)
    message = str(err.value)
    assert "cannot draw" in message and "mtkit calibrate" in message and "\n" not in message


# ------------------------------------------------------------------------------------------------------- docs
def test_the_docs_list_the_registered_algorithms_and_engines():
    """docs/decoding.md's table has a row per registered entry, in order, with the engines it runs on; the
    README's example names every one."""
    root = Path(__file__).resolve().parent.parent
    lines = (root / "docs" / "decoding.md").read_text().splitlines()
    start = lines.index(next(line for line in lines if line.startswith("| algorithm |"))) + 2
    rows = [line for line in lines[start:][: next(i for i, x in enumerate(lines[start:]) if not x.startswith("|"))]]
    names = [row.split("`")[1] for row in rows]
    assert names == list(algorithms.REGISTRY)
    for row, entry in zip(rows, algorithms.REGISTRY.values()):
        engines = row.rstrip(" |").rsplit("|", 1)[1]
        assert [e for e in ENGINES if e in engines] == list(entry.engines), row
    [example] = [line for line in (root / "README.md").read_text().splitlines() if "--algorithm greedy" in line]
    assert all(name in example for name in algorithms.REGISTRY), example


# ------------------------------------------------------------------------------------------------------- HTTP
def test_a_request_sets_mbr_candidates_and_any_value_in_range_runs(run):
    """Every option a call may set reaches a request (mbr_candidates among them, bounded as nbest is), and a value
    its range admits is answered, not a 500: the nucleus of a top_p too small for float32 keeps the best subword."""
    from fastapi.testclient import TestClient

    from mtkit.serving.app import create_app

    model = mtkit.load(run, device="cpu", dtype="float32")
    greedy = model.translate("A dog runs .", beam_size=1)
    with TestClient(create_app(model, ("en", "de"))) as client:
        asked = {"text": SOURCES, "options": {"algorithm": "mbr", "mbr_candidates": 4, "nbest": 2}}
        found = client.post("/v1/translate", json=asked)
        assert found.status_code == 200, found.text
        direct = mtkit.load(run, device="cpu", dtype="float32").translate_batch(
            SOURCES, algorithm="mbr", mbr_candidates=4, nbest=2, scores=False
        )
        assert [[h["text"] for h in t["hypotheses"]] for t in found.json()["translations"]] == [
            [h.text for h in t.hypotheses] for t in direct
        ]
        tiny = {"text": "A dog runs .", "options": {"algorithm": "sampling", "top_p": 4.3e-223, "seed": 1}}
        answered = client.post("/v1/translate", json=tiny)
        assert answered.status_code == 200, answered.text
        assert answered.json()["translations"][0]["text"] == greedy


def test_a_request_sets_the_search_bounds_a_call_may_set(run):
    from fastapi.testclient import TestClient

    from mtkit.serving.app import create_app

    model = mtkit.load(run, device="cpu", dtype="float32")
    bounds = {"length_penalty": 0.0, "max_len_a": 0.0, "max_len_b": 1}
    expected = [t.text for t in model.translate_batch(SOURCES, scores=False, **bounds)]
    assert expected != model.translate(SOURCES)  # the bounds change the answer
    with TestClient(create_app(model, ("en", "de"))) as client:
        found = client.post("/v1/translate", json={"text": SOURCES, "options": bounds})
        assert found.status_code == 200, found.text
        assert [t["text"] for t in found.json()["translations"]] == expected
        for name, value in (("length_penalty", 10.5), ("max_len_a", -1), ("max_len_b", 1025)):
            bad = client.post("/v1/translate", json={"text": SOURCES, "options": {name: value}})
            assert bad.status_code == 422 and f"options.{name}" in bad.json()["error"], bad.text


@pytest.mark.parametrize("engine", ENGINES)
def test_the_search_bounds_at_the_edges_of_their_range_run(run, exported, engine):
    """The decoding section's length penalty and output limits, at their edges, on both engines: outputs capped
    by the model's positions, never wrapped round or overflowed."""
    model = load(run, exported, engine)
    longest = model.translate(SOURCES, max_len_a=1e308)
    assert longest == model.translate(SOURCES, max_len_b=10**9) and all(longest)
    assert model.translate(SOURCES, max_len_a=0.0, max_len_b=0) == ["", ""]
    for penalty in (0.0, 10.0):
        assert len(model.translate(SOURCES, length_penalty=penalty)) == len(SOURCES)
    with pytest.raises(mtkit.MtkitError, match="length_penalty"):
        model.translate(SOURCES, length_penalty=10.5)
