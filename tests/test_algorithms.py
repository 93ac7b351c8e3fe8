"""The registry of decoding algorithms (mtkit/decoding/algorithms.py): an algorithm registered from outside mtkit
reaches the command line (its own flag included) and the Python API without a change to either; the engines
dispatch by name; bad choices are one line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import mtkit
from mtkit.decoding import algorithms
from mtkit.inference.options import Options, check_instructions

TESTS = Path(__file__).resolve().parent
SOURCES = ["A man is riding a bike .", "Two dogs and a cat .", "The white tree ."]


@pytest.fixture(scope="module")
def run(toy_run_workdir) -> Path:
    return toy_run_workdir / "run"


@pytest.fixture
def shortest():
    """The toy algorithm registered in this process, unregistered afterwards."""
    import toy_algorithm

    algorithms.register(toy_algorithm.SHORTEST)
    yield toy_algorithm.SHORTEST
    algorithms.REGISTRY.pop("shortest", None)


def mtkit_with_toy(*args, stdin: str = "") -> subprocess.CompletedProcess:
    """``mtkit ARGS`` in a process that registered the toy algorithm before the command line was built."""
    code = "import sys, toy_algorithm; from mtkit.cli import main; sys.exit(main(sys.argv[1:]))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-c", code, *map(str, args)], input=stdin, capture_output=True, text=True, env=env
    )


def expected_shortest(run: Path, width: int) -> list[str]:
    model = mtkit.load(run, beam_size=width, nbest=width, device="cpu", dtype="float32")
    return [min(t.hypotheses, key=lambda h: (len(h.tokens), -h.score)).text for t in model.translate_batch(SOURCES)]


def test_a_registered_algorithm_reaches_the_api(run, shortest):
    model = mtkit.load(run, algorithm="shortest", shortest_width=4, device="cpu", dtype="float32")
    assert model.translate(SOURCES) == expected_shortest(run, 4)
    assert model.options.shortest_width == 4 and model.options.chosen is shortest


def test_a_registered_algorithm_reaches_the_command_line(run, shortest):
    helped = mtkit_with_toy("translate", "--help")
    assert helped.returncode == 0 and "--shortest-width" in helped.stdout and "--algorithm" in helped.stdout
    for quick in ([], ["--no-split-sentences"]):  # the fast parser, and Typer (a switch the fast one leaves to it)
        done = mtkit_with_toy(
            "translate",
            run,
            "--algorithm",
            "shortest",
            "--shortest-width",
            "4",
            "--dtype",
            "float32",
            *quick,
            stdin="\n".join(SOURCES) + "\n",
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == expected_shortest(run, 4)
    bad = mtkit_with_toy("translate", run, "--algorithm", "shortest", "--shortest-width", "1")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "mtkit: error: --shortest-width 1: input should be greater than or equal to 2"
    ]


def test_greedy_is_beam_search_of_one(run):
    greedy = mtkit.load(run, algorithm="greedy", device="cpu", dtype="float32")
    assert greedy.options.beam_size == 1  # a run's beam_size is not used
    assert greedy.translate(SOURCES) == mtkit.load(run, beam_size=1, device="cpu", dtype="float32").translate(SOURCES)


def test_sampling_is_the_sampling_algorithm(run):
    a = mtkit.load(run, sampling=True, seed=3, nbest=2, device="cpu", dtype="float32")
    b = mtkit.load(run, algorithm="sampling", seed=3, nbest=2, device="cpu", dtype="float32")
    assert a.options.algorithm == "sampling" and b.options.sampling
    assert [t.text for t in a.translate_batch(SOURCES)] == [t.text for t in b.translate_batch(SOURCES)]


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(algorithm="nope"), "--algorithm 'nope': unknown; use one of beam, greedy, sampling, mbr"),
        (
            dict(algorithm="greedy", top_p=0.9),
            "--top-p takes effect with --algorithm sampling only; add --algorithm sampling",
        ),
        (dict(algorithm="greedy", nbest=2), "--algorithm greedy gives one hypothesis a sentence: drop --nbest 2"),
        (
            dict(algorithm="greedy", sampling=True),
            "sampling=True is --algorithm sampling: drop it or --algorithm greedy",
        ),
        (dict(temperature="warm", sampling=True), "--temperature 'warm': input should be a valid float"),
        (dict(no_such=1), "unknown decoding option(s): no_such"),
    ],
)
def test_bad_choices_are_one_line(options, message):
    with pytest.raises(mtkit.MtkitError) as err:
        Options.build(**options)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_an_unknown_algorithm_on_the_command_line(run, run_cli):
    result = run_cli("translate", run, "--algorithm", "nope")
    assert result.code == 2
    assert result.err.strip() == "mtkit: error: --algorithm 'nope': unknown; use one of beam, greedy, sampling, mbr"


def test_constraints_need_an_algorithm_that_honours_them(shortest):
    check_instructions(Options(), constraints=True)  # beam search does
    with pytest.raises(
        mtkit.MtkitError, match="^constraints need an algorithm that honours them \\(beam\\); shortest cannot"
    ):
        check_instructions(Options(algorithm="shortest"), constraints=True)


def test_an_option_name_belongs_to_one_algorithm():
    with pytest.raises(ValueError, match="top_p of other belong to sampling"):
        algorithms.register(
            algorithms.Algorithm("other", "x", torch="x:y", params=(algorithms.Param("top_p", "float", 1.0),))
        )
    assert "other" not in algorithms.REGISTRY


@pytest.mark.parametrize("algorithm, most", [("beam", 4), ("greedy", 1), ("sampling", 0)])
def test_the_server_bounds_alternatives_by_the_algorithm(run, algorithm, most):
    """`mtkit serve --algorithm` reaches the model's spec: the most alternatives a request may ask for (the run
    decodes with beam_size 4; 0: no bound, samples)."""
    from mtkit.serving.models import model_spec

    assert model_spec(run, options={"algorithm": algorithm}).beam_size == most


# ----------------------------------------------------------------------- one call's algorithm, the config, the server
def test_a_call_may_choose_its_algorithm(run):
    model = mtkit.load(run, device="cpu", dtype="float32")  # beam search, as the run decodes
    sampled = mtkit.load(run, algorithm="sampling", seed=5, top_k=8, nbest=3, device="cpu", dtype="float32")
    per_call = model.translate_batch(SOURCES, algorithm="sampling", seed=5, top_k=8, nbest=3)
    assert [[h.text for h in t.hypotheses] for t in per_call] == [
        [h.text for h in t.hypotheses] for t in sampled.translate_batch(SOURCES)
    ]
    assert model.translate(SOURCES) == mtkit.load(run, device="cpu", dtype="float32").translate(SOURCES)  # kept
    # a sampling model's own options stay behind when a call chooses beam search
    assert sampled.options_for(algorithm="beam", nbest=1).params == ()
    with pytest.raises(mtkit.MtkitError, match="^device: fixed when the model loads; give it to mtkit.load"):
        model.translate_batch(SOURCES, device="cpu")
    with pytest.raises(mtkit.MtkitError, match="^--top-p takes effect with --algorithm sampling only"):
        model.translate_batch(SOURCES, top_p=0.9)


def test_the_config_takes_each_algorithms_options(tmp_path):
    from mtkit import config as cfgmod

    section = cfgmod.DecodingConfig(algorithm="mbr", mbr_candidates=8, mbr_utility="bleu")
    options = Options.build(section)
    assert (options.algorithm, options.mbr_candidates, options.mbr_utility) == ("mbr", 8, "bleu")
    tree = {"data": {"dir": str(tmp_path)}, "decoding": {"algorithm": "beam", "top_p": 0.9}}
    with pytest.raises(mtkit.MtkitError) as err:
        cfgmod.from_dict(tree)
    assert "top_p is an option of algorithm sampling, not beam: set algorithm: sampling or drop top_p" in str(err.value)
    tree["decoding"] = {"algorithm": "sampling", "top_p": 1.5}
    with pytest.raises(mtkit.MtkitError, match="'decoding.top_p': Input should be less than or equal to 1"):
        cfgmod.from_dict(tree)


def test_a_registered_algorithm_reaches_the_server(run, shortest):
    """The toy algorithm is in /openapi.json (a choice of ``options.algorithm``, its option a property bounded as
    registered) and a request naming it is decoded by it; its option without its name is a 422."""
    from fastapi.testclient import TestClient

    from mtkit.serving.app import create_app

    model = mtkit.load(run, device="cpu", dtype="float32")
    with TestClient(create_app(model, ("en", "de"))) as client:
        schema = client.get("/openapi.json").json()["components"]["schemas"]["RequestOptions"]
        [names] = [c["enum"] for c in schema["properties"]["algorithm"]["anyOf"] if "enum" in c]
        assert "shortest" in names and "mbr" in names
        [width] = [c for c in schema["properties"]["shortest_width"]["anyOf"] if c.get("type") == "integer"]
        assert width["minimum"] == 2
        asked = {"text": SOURCES, "options": {"algorithm": "shortest", "shortest_width": 4}}
        found = client.post("/v1/translate", json=asked)
        assert found.status_code == 200, found.text
        assert [t["text"] for t in found.json()["translations"]] == expected_shortest(run, 4)
        bad = client.post("/v1/translate", json={"text": SOURCES, "options": {"shortest_width": 4}})
        assert bad.status_code == 422
        assert 'shortest_width is an option of algorithm shortest: add "algorithm": "shortest"' in bad.json()["error"]
        low = client.post(
            "/v1/translate", json={"text": SOURCES, "options": {"algorithm": "shortest", "shortest_width": 1}}
        )
        assert low.status_code == 422 and "greater than or equal to 2" in low.json()["error"]


def test_a_request_may_choose_mbr_and_sampling(run):
    from fastapi.testclient import TestClient

    from mtkit.serving.app import create_app

    model = mtkit.load(run, device="cpu", dtype="float32")
    with TestClient(create_app(model, ("en", "de"))) as client:
        asked = {"text": SOURCES, "options": {"algorithm": "mbr", "mbr_utility": "bleu", "mbr_seed": 2}}
        found = client.post("/v1/translate", json=asked).json()["translations"]
        other = mtkit.load(run, device="cpu", dtype="float32")  # the served model's draws went on: a fresh one
        direct = other.translate_batch(SOURCES, algorithm="mbr", mbr_utility="bleu", mbr_seed=2, scores=False)
        assert [t["text"] for t in found] == [t.text for t in direct]
        asked = {"text": SOURCES[0], "options": {"algorithm": "sampling", "nbest": 6, "seed": 1}}
        hyps = client.post("/v1/translate", json=asked).json()["translations"][0]["hypotheses"]
        assert len(hyps) == 6  # more than the run's beam of 4: samples have no bound
        schema = client.get("/openapi.json").json()["components"]["schemas"]["RequestOptions"]
        rules = [r for r in schema["allOf"] if "nbest" in r["then"]["properties"]]
        bounds = {r["if"]["properties"]["algorithm"].get("const"): r["then"]["properties"] for r in rules}
        assert bounds["greedy"]["nbest"]["anyOf"][1]["maximum"] == 1
        assert bounds["sampling"]["nbest"]["anyOf"][1]["maximum"] == 64  # samples: the server's --max-hypotheses
        assert bounds[None]["nbest"]["anyOf"][1]["maximum"] == 4  # no algorithm named: the model's own beam
        assert bounds["mbr"]["nbest"]["anyOf"][1]["maximum"] == 64  # a request may raise mbr_candidates: the server's
        [candidates] = [c for c in schema["properties"]["mbr_candidates"]["anyOf"] if c.get("type") == "integer"]
        assert (candidates["minimum"], candidates["maximum"]) == (2, 64) and "mbr_utility" in schema["properties"]


def test_the_server_bounds_the_hypotheses_a_request_decodes(run):
    """--max-hypotheses bounds nbest and every option counting hypotheses (mbr_pseudo_references) in the schema and
    in the answer: a request past it is a 422 naming the bound."""
    from fastapi.testclient import TestClient

    from mtkit.flags import ServeLimits
    from mtkit.serving.app import create_app

    model = mtkit.load(run, device="cpu", dtype="float32")
    with TestClient(create_app(model, ("en", "de"), limits=ServeLimits(max_hypotheses=8))) as client:
        schema = client.get("/openapi.json").json()["components"]["schemas"]["RequestOptions"]["properties"]
        assert [c["maximum"] for c in schema["mbr_pseudo_references"]["anyOf"] if "maximum" in c] == [8]
        for options in (
            {"algorithm": "sampling", "nbest": 9},
            {"algorithm": "mbr", "mbr_pseudo_references": 9},
        ):
            bad = client.post("/v1/translate", json={"text": SOURCES[0], "options": options})
            assert bad.status_code == 422 and "less than or equal to 8" in bad.json()["error"], bad.text
        fine = client.post("/v1/translate", json={"text": SOURCES[0], "options": {"algorithm": "sampling", "nbest": 8}})
        assert fine.status_code == 200 and len(fine.json()["translations"][0]["hypotheses"]) == 8
