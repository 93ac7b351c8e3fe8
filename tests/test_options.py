"""The decoding options: every rule that ties two options together is checked by ``Options`` itself, and the
command line and ``mtkit.load`` answer the same request with the same error (tests/test_serve.py holds the
server to the same messages)."""

from __future__ import annotations

import dataclasses

import pytest

import mtkit
from mtkit import config as cfgmod
from mtkit.decoding import algorithms
from mtkit.inference.options import Options, check_instructions

# (the options, words of the one-line error); each a rule of Options.check
RULES = [
    (dict(beam_size=2, nbest=3), "nbest 3 is larger than beam_size 2"),
    (dict(engine="ctranslate2", alignments=True), "alignments (--alignments, --plot-attention) need the torch engine"),
    (dict(engine="ctranslate2", stopping="first"), "stopping 'first' needs the torch engine"),
    (dict(engine="ctranslate2", shortlist=10), "--shortlist needs the torch engine"),
    (dict(engine="ctranslate2", dtype="int4"), "--dtype 'int4': the ctranslate2 engine computes in one of"),
    (dict(device="cpu", dtype="float16"), "--dtype float16 needs a CUDA GPU"),
    (dict(device="cuda", dtype="int8"), "--dtype int8 is for the CPU"),
    (dict(temperature=0.5), "--temperature takes effect with --algorithm sampling only"),
    (dict(top_k=5, top_p=0.9), "--top-k, --top-p take effect with --algorithm sampling only"),
    (dict(sampling=True, temperature=0.0), "--temperature 0.0: input should be greater than 0"),
    (dict(sampling=True, top_p=1.5), "--top-p 1.5: input should be less than or equal to 1"),
    (dict(sampling=True, top_k=-1), "--top-k -1: input should be greater than or equal to 0"),
    (dict(engine="onnx"), "--engine 'onnx': use torch or ctranslate2"),
    (dict(beam_size=0), "'beam_size': Input should be greater than or equal to 1"),
    (dict(stopping="never"), "'stopping': Input should be 'first', 'beam_full' or 'exact'"),
]


@pytest.mark.parametrize("options, message", RULES, ids=[m.split(":")[0][:40] for _, m in RULES])
def test_each_rule_is_one_error_however_the_options_are_made(options, message):
    for make in (lambda: Options(**options), lambda: Options.build(**options), lambda: Options().replace(**options)):
        with pytest.raises(mtkit.MtkitError, match="^") as err:
            make()
        assert message in str(err.value)
        assert "\n" not in str(err.value)


def test_options_that_go_together_are_accepted():
    assert Options(beam_size=3, nbest=3).nbest == 3
    assert Options(sampling=True, nbest=4, beam_size=1).nbest == 4  # samples are not beams
    assert Options(sampling=True, temperature=0.7, top_k=10, top_p=0.9, seed=3).top_p == 0.9
    assert Options(engine="ctranslate2", dtype="int8_float32").dtype == "int8_float32"
    assert Options(device="cuda", dtype="float16").dtype == "float16"


def test_build_takes_the_run_section_then_the_overrides():
    section = cfgmod.DecodingConfig(beam_size=7, max_len_b=3, stopping="first")
    built = Options.build(section, beam_size=4, nbest=None, length_penalty=0.0)
    assert (built.beam_size, built.max_len_b, built.stopping, built.length_penalty) == (4, 3, "first", 0.0)
    assert built.nbest == section.nbest  # None keeps the section's value
    # every field of the section reaches the options (a field, or an algorithm's option in ``params``)
    registered = set(algorithms.params())
    assert set(cfgmod.DecodingConfig.model_fields) <= {f.name for f in dataclasses.fields(Options)} | registered
    assert registered <= set(cfgmod.DecodingConfig.model_fields)
    mbr = cfgmod.DecodingConfig(algorithm="mbr", mbr_candidates=12, mbr_utility="bleu")
    assert Options.build(mbr).params == (("mbr_candidates", 12), ("mbr_utility", "bleu"))
    assert Options.build(mbr, mbr_candidates=4).mbr_candidates == 4  # an override wins
    assert Options.build(mbr, algorithm="beam").params == ()  # the section's mbr options stay with mbr
    assert Options.build(cfgmod.DecodingConfig(), engine="ctranslate2").dtype is None  # the exported type
    with pytest.raises(mtkit.MtkitError, match="unknown decoding option.*beam_width"):
        Options.build(beam_width=3)


def test_replace_checks_the_new_combination_and_keeps_the_old():
    loaded = Options(beam_size=2)
    with pytest.raises(mtkit.MtkitError, match="nbest 5 is larger than beam_size 2"):
        loaded.replace(nbest=5)
    assert loaded.nbest == 1
    assert loaded.replace(nbest=None) is loaded
    assert loaded.replace(nbest=2, scores=True).scores


@pytest.mark.parametrize(
    "options, message",
    [
        (Options(engine="ctranslate2"), "constraints need --engine torch"),
        (Options(sampling=True), "constraints need an algorithm that honours them"),
        (Options(shortlist=20), "constraints need the whole target vocabulary"),
    ],
)
def test_constraints_need_the_torch_engine_beam_search_and_the_whole_vocabulary(options, message):
    check_instructions(Options(), constraints=True)
    check_instructions(options, constraints=False)  # prefixes and avoided phrases are fine everywhere
    with pytest.raises(mtkit.MtkitError, match=message):
        check_instructions(options, constraints=True)


# ------------------------------------------------------------------------------ the front doors
def _cli_flags(options: dict) -> list:
    flags = []
    for name, value in options.items():
        flag = "--" + name.replace("_", "-")
        flags += ["--algorithm", "sampling"] if name == "sampling" else [flag] if value is True else [flag, value]
    return flags


LOAD_RULES = [(o, m) for o, m in RULES if o.get("engine") != "ctranslate2" and o.get("device") != "cuda"]


@pytest.mark.parametrize("options, message", LOAD_RULES, ids=[m.split(":")[0][:40] for _, m in LOAD_RULES])
def test_the_cli_and_load_refuse_with_the_same_line(toy_run_workdir, run_cli, options, message):
    run_dir = toy_run_workdir / "run"
    result = run_cli("translate", run_dir, *_cli_flags(options), stdin="a dog\n")
    assert result.code == 2 and result.out == ""
    with pytest.raises(mtkit.MtkitError) as err:
        mtkit.load(run_dir, **options)
    assert message in str(err.value)
    assert result.err.strip() == f"mtkit: error: {err.value}"


def test_a_call_refuses_what_load_refuses(toy_run_workdir, run_cli):
    run_dir = toy_run_workdir / "run"
    model = mtkit.load(run_dir, beam_size=2)
    with pytest.raises(mtkit.MtkitError) as at_call:
        model.translate_batch(["a dog"], nbest=3)
    with pytest.raises(mtkit.MtkitError) as at_load:
        mtkit.load(run_dir, beam_size=2, nbest=3)
    result = run_cli("translate", run_dir, "--beam-size", 2, "--nbest", 3, stdin="a dog\n")
    assert str(at_call.value) == str(at_load.value)
    assert result.err.strip() == f"mtkit: error: {at_call.value}"
    assert model.options.nbest == 1 and model.translate("a dog")  # the loaded options are untouched


def test_the_server_refuses_a_request_with_the_line_the_cli_prints(toy_run_workdir, run_cli):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from mtkit.serving.app import create_app

    run_dir = toy_run_workdir / "run"
    model = mtkit.load(run_dir, beam_size=2)
    result = run_cli("translate", run_dir, "--beam-size", 2, "--nbest", 3, stdin="a dog\n")
    with TestClient(create_app(model, ("en", "de"))) as client:
        response = client.post("/v1/translate", json={"text": "a dog", "options": {"nbest": 3}})
        assert response.status_code == 422
        assert result.err.strip() == f"mtkit: error: {response.json()['error']}"
        ok = client.post("/v1/translate", json={"text": "a dog", "options": {"nbest": 2}})
        assert ok.status_code == 200 and len(ok.json()["translations"][0]["hypotheses"]) == 2


def test_the_server_refuses_alignments_from_ctranslate2_with_the_line_the_cli_prints(toy_run_workdir, run_cli):
    pytest.importorskip("fastapi")
    pytest.importorskip("ctranslate2")
    from fastapi.testclient import TestClient

    from mtkit.serving.app import create_app

    run_dir = toy_run_workdir / "run"
    result = run_cli("translate", run_dir, "--engine", "ctranslate2", "--alignments", stdin="a dog\n")
    with TestClient(create_app(mtkit.load(run_dir, engine="ctranslate2"), ("en", "de"))) as client:
        response = client.post("/v1/translate", json={"text": "a dog", "options": {"alignments": True}})
    assert response.status_code == 422
    assert result.code == 2 and result.err.strip() == f"mtkit: error: {response.json()['error']}"
