"""Several models behind one ``mtkit serve`` (mtkit/serving/models.py, pool.py, routing.py, dispatch.py).

Three tiny runs with chosen language codes: ``en-de``, ``de-en`` and a multilingual ``en-mul`` (en into fr and
cs). Their decoding batch size is 1, so a sentence's translation does not depend on the sentences it is batched with:
each answer is compared exactly with ``mtkit.load(run).translate`` by hand.

- Routing: each pair reaches its model, a multilingual model gets its target; a pivot (de -> en -> fr) equals the
  two models run one after the other; ``/languages`` lists the pivot-reachable targets; ``model`` picks among named
  models serving one pair.
- Detection: real English and German sentences (Multi30k val) with source auto, detected and routed per item.
- Memory: ``--max-models 1`` under concurrent requests unloads and reloads, on the one model thread, with the answers
  of models that stay loaded; a model whose weights break after start is a 503 with the reason, shown in
  ``/v1/models``, while the other serves.
- Several model threads (``--parallel-models``): two models translate at once, each on its share of the cores.
- A models file: paths relative to it, an entry's decoding over the command line's; --preload.
- Bad input, each one line: unknown language, unreachable pair, two unnamed models for one pair, a models file with
  an unknown key, missing, not YAML, a model path that does not exist.
- libretranslatepy against a real uvicorn serving two models: languages(), detect(), translate(q, "auto", target).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import threading
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from conftest import TINY_TRANSFORMER, assert_one_line_error, cli, toy_pairs, write_lines

pytest.importorskip("fastapi")
pytest.importorskip("py3langid")

from fastapi.testclient import TestClient  # noqa: E402
from test_serve import DEADLINE, assert_error, uvicorn_server  # noqa: E402

import mtkit  # noqa: E402
from mtkit.errors import MtkitError  # noqa: E402
from mtkit.serving.app import create_models_app  # noqa: E402
from mtkit.serving.languages import data_directions  # noqa: E402
from mtkit.serving.models import model_spec, model_specs, read_models_file  # noqa: E402
from mtkit.serving.pool import ModelPool, load_spec  # noqa: E402
from mtkit.serving.threads import (  # noqa: E402
    model_thread,
    model_threads,
    share_cores,  # noqa: E402
)

pytestmark = pytest.mark.usefixtures("one_thread")
MULTI30K = Path(__file__).resolve().parent.parent / "data" / "multi30k"


def val_sentences(lang: str, n: int = 4) -> list[str]:
    """The first ``n`` Multi30k validation sentences of ``lang`` shorter than 60 characters."""
    with gzip.open(MULTI30K / f"val.{lang}.gz", "rt", encoding="utf-8") as f:
        return [line.strip() for line in f if len(line) < 60][:n]


def train(root: Path, data: dict) -> Path:
    """A tiny Transformer trained for a few updates on ``data``; its run directory."""
    config = {
        "data": {"dir": str(root / "data"), "vocab_size": 100, **data},
        "model": {**TINY_TRANSFORMER, "max_positions": 128},
        "training": {
            "run_dir": str(root / "run"),
            "max_updates": 120,
            "batch_tokens": 400,
            "lr": 5e-3,
            "warmup_updates": 5,
            "validate_every": 120,
            "log_every": 120,
            "threads": 1,
            "valid_max_sentences": 5,
        },
        "decoding": {"beam_size": 2, "batch_size": 1, "threads": 1, "device": "cpu"},
    }
    root.mkdir(parents=True)
    (root / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    assert cli("prepare", root / "config.yaml") == 0
    assert cli("train", root / "config.yaml") == 0
    return root / "run"


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Three runs: en-de, de-en, and en-mul (en into fr and cs: German words, and German words reversed)."""
    root = tmp_path_factory.mktemp("models")
    corpus = {}
    for split, n, seed in (("train", 200, 0), ("valid", 10, 1)):
        pairs = toy_pairs(n, seed)
        corpus[split] = {
            "en": write_lines(root / "corpus" / f"{split}.en", [p[0] for p in pairs]),
            "de": write_lines(root / "corpus" / f"{split}.de", [p[1] for p in pairs]),
            "cs": write_lines(root / "corpus" / f"{split}.cs", [" ".join(p[1].split()[::-1]) for p in pairs]),
        }

    def splits(src: str, tgt: str) -> dict:
        return {split: {"src": str(files[src]), "tgt": str(files[tgt])} for split, files in corpus.items()}

    directions = [
        {"src_lang": "en", "tgt_lang": "fr", "splits": splits("en", "de")},
        {"src_lang": "en", "tgt_lang": "cs", "splits": splits("en", "cs")},
    ]
    return {
        "en-de": train(root / "en-de", {"src_lang": "en", "tgt_lang": "de", "splits": splits("en", "de")}),
        "de-en": train(root / "de-en", {"src_lang": "de", "tgt_lang": "en", "splits": splits("de", "en")}),
        "en-mul": train(root / "en-mul", {"directions": directions}),
    }


@pytest.fixture(scope="module")
def loaded(runs) -> dict:
    """Each run loaded by hand, as the Python API loads it."""
    return {name: mtkit.load(run) for name, run in runs.items()}


@pytest.fixture(scope="module")
def client(runs):
    """A server of the three runs, named by their folders, none of them loaded yet."""
    specs = [model_spec(run, name=name) for name, run in runs.items()]
    with TestClient(create_models_app(ModelPool(specs))) as c:
        yield c


def translate(client, text, **fields) -> dict:
    response = client.post("/v1/translate", json={"text": text, **fields})
    assert response.status_code == 200, response.text
    return response.json()


def route(*legs: str) -> list[dict]:
    """A route as /v1/translate answers it, from ``model:src-tgt`` strings."""
    out = []
    for leg in legs:
        model, pair = leg.rsplit(":", 1)
        source, target = pair.split("-")
        out.append({"model": model, "source": source, "target": target})
    return out


# ------------------------------------------------------------------------------------------------ specs
def test_directions_are_read_without_loading_the_weights(runs):
    assert [s.directions for s in model_specs(list(runs.values()), None)] == [
        (("en", "de"),),
        (("de", "en"),),
        (("en", "fr"), ("en", "cs")),
    ]
    assert [s.multilingual for s in model_specs(list(runs.values()), None)] == [False, False, True]


def test_a_many_to_many_run_serves_its_trained_directions():
    from mtkit.config import DataConfig

    files = {"train": {"src": "a", "tgt": "b"}}
    data = DataConfig(
        dir="d",
        directions=[
            {"src_lang": "en", "tgt_lang": "de", "splits": files},
            {"src_lang": "de", "tgt_lang": "en", "splits": files},
            {"src_lang": "de", "tgt_lang": "fr", "splits": {"test": files["train"]}},  # zero-shot: evaluated only
        ],
    )
    assert data_directions(data) == ((("en", "de"), ("de", "en")), True)


def test_a_models_file_reads_relative_paths_and_its_decoding_wins(runs, tmp_path):
    folder = tmp_path / "conf"
    folder.mkdir()
    models = folder / "models.yaml"
    relative = os.path.relpath(runs["en-de"], folder)
    models.write_text(
        yaml.safe_dump([{"path": relative}, {"path": relative, "name": "b", "decoding": {"beam_size": 1}}])
    )
    first, second = read_models_file(models, options={"beam_size": 3, "threads": 1})
    assert first.path.resolve() == second.path.resolve() == runs["en-de"].resolve()
    assert (first.name, first.named, second.name, second.named) == ("run", False, "b", True)
    assert first.options == {"beam_size": 3, "threads": 1} and first.beam_size == 3  # the command line's
    assert second.options == {"beam_size": 1, "threads": 1} and second.beam_size == 1  # the entry's own wins


def test_preload_loads_the_first_max_models(runs):
    pool = ModelPool([model_spec(runs[name], name=name) for name in ("en-de", "de-en")], max_models=1)
    assert pool.preload() == [] and [m["loaded"] for m in pool.status()] == [True, False]


# ---------------------------------------------------------------------------------------------- routing
def test_each_pair_reaches_its_model(client, loaded):
    en, de = "A man sits in the park .", "Ein Hund läuft im Garten ."
    by_hand = [loaded["en-de"].translate(en), loaded["en-mul"].translate(en, target="fr")]
    by_hand.append(loaded["en-mul"].translate(en, target="cs"))
    assert all(by_hand) and len(set(by_hand)) == 3  # each model (and target) answers its own way
    assert translate(client, en, source="en", target="de")["translations"] == [
        {"text": loaded["en-de"].translate(en), "route": route("en-de:en-de")}
    ]
    assert translate(client, [de], source="de", target="en")["translations"] == [
        {"text": loaded["de-en"].translate(de), "route": route("de-en:de-en")}
    ]
    for target in ("fr", "cs"):  # a multilingual model gets its target with the call
        found = translate(client, en, source="en", target=target)["translations"][0]
        assert found == {"text": loaded["en-mul"].translate(en, target=target), "route": route(f"en-mul:en-{target}")}
    listed = {m["name"]: m for m in client.get("/v1/models").json()["models"]}
    assert listed["en-mul"]["directions"] == ["en-fr", "en-cs"] and listed["en-mul"]["loaded"]
    assert all(m["error"] is None for m in listed.values())


def test_a_pivot_equals_the_two_models_by_hand(client, loaded):
    texts = ["Ein Mann sitzt im Park .", "Zwei Hunde spielen mit einem Ball ."]
    expected = loaded["en-mul"].translate(loaded["de-en"].translate(texts), target="fr")
    assert expected != loaded["en-mul"].translate(texts, target="fr")  # the first leg made a difference
    answer = translate(client, texts, source="de", target="fr")
    assert answer["translations"] == [{"text": t, "route": route("de-en:de-en", "en-mul:en-fr")} for t in expected]
    libre = client.post("/translate", json={"q": texts[0], "source": "de", "target": "fr"})
    assert libre.json() == {"translatedText": expected[0]}  # LibreTranslate's clients get the text alone
    assert client.get("/languages").json() == [
        {"code": "en", "name": "English", "targets": ["de", "fr", "cs"]},
        {"code": "de", "name": "German", "targets": ["en", "fr", "cs"]},
        {"code": "fr", "name": "French", "targets": []},
        {"code": "cs", "name": "Czech", "targets": []},
    ]
    settings = client.get("/frontend/settings").json()
    assert settings["language"] == {
        "source": {"code": "en", "name": "English"},
        "target": {"code": "de", "name": "German"},
    }


def test_named_models_share_a_pair_and_a_request_picks_one(tmp_path, runs, loaded):
    models = tmp_path / "models.yaml"
    models.write_text(
        yaml.safe_dump(
            [
                {"path": str(runs["en-de"]), "name": "main"},
                {"path": str(runs["de-en"]), "name": "other", "languages": ["en-de"]},  # renamed: serves en-de
            ]
        )
    )
    text = "A dog runs ."
    with TestClient(create_models_app(ModelPool(read_models_file(models)))) as client:
        first = translate(client, text, target="de")["translations"][0]
        assert first == {"text": loaded["en-de"].translate(text), "route": route("main:en-de")}
        picked = translate(client, text, target="de", model="other")["translations"][0]
        assert picked == {"text": loaded["de-en"].translate(text), "route": route("other:en-de")}
        assert_error(client.post("/v1/translate", json={"text": "a", "model": "nope"}), 400, "unknown model", "main")


# ------------------------------------------------------------------------------------------- detection
def test_auto_detects_and_routes_each_item(client, loaded):
    english, german = val_sentences("en"), val_sentences("de")
    mixed = [english[0], german[0], english[1], german[1], german[2]]
    fr_from_en = loaded["en-mul"].translate([english[0], english[1]], target="fr")
    fr_from_de = loaded["en-mul"].translate(loaded["de-en"].translate(german[:3]), target="fr")
    expected = [fr_from_en[0], fr_from_de[0], fr_from_en[1], fr_from_de[1], fr_from_de[2]]
    answer = client.post("/translate", json={"q": mixed, "source": "auto", "target": "fr"}).json()
    assert answer["translatedText"] == expected
    assert [d["language"] for d in answer["detectedLanguage"]] == ["en", "de", "en", "de", "de"]
    assert all(d["confidence"] > 50 for d in answer["detectedLanguage"])
    # /v1/translate: no source where the server reads two languages is auto
    found = translate(client, [german[3], english[2]], target="fr")["translations"]
    assert [t["detected_language"]["language"] for t in found] == ["de", "en"]
    assert [t["route"] for t in found] == [route("de-en:de-en", "en-mul:en-fr"), route("en-mul:en-fr")]
    one = client.post("/translate", json={"q": german[0], "target": "en"}).json()
    assert one["translatedText"] == loaded["de-en"].translate(german[0]) and one["detectedLanguage"]["language"] == "de"


def test_a_text_already_in_the_target_language_stays_as_it_is(client, loaded):
    # as Argos Translate and LibreTranslate answer: source auto detected as the target, or the same code given
    english, german = val_sentences("en"), val_sentences("de")
    answer = client.post("/translate", json={"q": [english[0], german[0]], "source": "auto", "target": "en"}).json()
    assert answer["translatedText"] == [english[0], loaded["de-en"].translate(german[0])]
    found = translate(client, german[1], source="de", target="de", model="de-en")["translations"][0]
    assert found["text"] == german[1] and found["route"] == []


def test_a_named_model_detects_among_its_own_sources(client, loaded):
    # English text sent to the de-en model with no source: the model reads German only, so no detection runs
    english = val_sentences("en")[0]
    found = translate(client, english, model="de-en")["translations"][0]
    assert found["text"] == loaded["de-en"].translate(english) and "detected_language" not in found
    assert found["route"] == route("de-en:de-en")


def test_an_empty_target_is_no_language(client):
    assert_error(client.post("/v1/translate", json={"text": "a", "target": ""}), 400, "unknown language ''")
    item = client.post("/v1/translate", json={"text": [{"text": "a", "target": ""}], "target": "de"})
    assert_error(item, 422, "text item 1", "target ''")


def test_a_document_in_auto_goes_the_route_of_its_language(client, loaded, tmp_path):
    source = tmp_path / "notes.txt"
    source.write_text("\n\n".join(val_sentences("de")) + "\n", encoding="utf-8")
    expected = tmp_path / "expected.txt"
    loaded["de-en"].translate_file(source, expected)
    answer = client.post(
        "/v1/translate_file", files={"file": ("notes.txt", source.read_bytes())}, data={"target": "en"}
    )
    assert answer.status_code == 200, answer.text
    assert answer.content == expected.read_bytes()


# ------------------------------------------------------------------------------------------- bad input
def test_unknown_languages_and_unreachable_pairs_are_400(client):
    assert_error(client.post("/v1/translate", json={"text": "a", "source": "xx", "target": "de"}), 400, "'xx'")
    assert_error(client.post("/translate", json={"q": "a", "source": "en", "target": "xx"}), 400, "unknown language")
    reachable = "en to de, fr, cs; de to en, fr (via en), cs (via en)"
    unreachable = client.post("/v1/translate", json={"text": "a", "source": "fr", "target": "de"})
    assert_error(unreachable, 400, reachable, "not fr to de")
    assert_error(client.post("/translate", json={"q": "a", "source": "cs", "target": "en"}), 400, reachable)
    assert_error(client.post("/translate", json={"q": "a", "source": "en"}), 400, "missing target")
    assert_error(client.post("/v1/translate", json={"text": "a", "source": "en"}), 400, "choose one")
    wrong = client.post("/v1/translate", json={"text": "a", "source": "en", "target": "de", "model": "de-en"})
    assert_error(wrong, 400, "model de-en translates de-en, not en to de")


def test_two_unnamed_models_for_one_pair_are_refused_at_start(run_cli, runs, tmp_path):
    assert_one_line_error(run_cli("serve", runs["en-de"], runs["en-de"]), "both translate en-de", "name each")
    models = tmp_path / "models.yaml"
    models.write_text(yaml.safe_dump([{"path": str(runs["en-de"]), "name": "a"}, {"path": str(runs["en-de"])}]))
    assert_one_line_error(run_cli("serve", "--models", models), "both translate en-de")


@pytest.mark.parametrize(
    "entries, words",
    [
        ([{"path": "RUN", "nmae": "x"}], ["entry 1", "unknown key 'nmae'"]),
        ([{"path": "RUN"}, {"path": "RUN", "name": "b", "decoding": {"beam": 2}}], ["entry 2 (b)", "'decoding.beam'"]),
        ([{"path": "RUN", "decoding": {"beam_size": 0}}], ["entry 1", "'beam_size'", "greater than"]),
        ([{"path": "RUN", "languages": ["en"]}], ["entry 1", "'languages.0'", "source-target"]),
        ([{"path": "RUN", "engine": "onnx"}], ["entry 1", "'engine'"]),
        ([{"name": "x"}], ["entry 1 (x)", "missing required key 'path'"]),
        ([{"path": "no-such-run"}], ["entry 1", "no-such-run", "no such run directory"]),
        ([{"path": "RUN", "languages": ["en-de", "en-fr"]}], ["entry 1", "languages", "one direction"]),
        ({"path": "RUN"}, ["a YAML list of models"]),
    ],
)
def test_a_bad_models_file_is_one_line(run_cli, runs, tmp_path, entries, words):
    def with_run(value):
        if isinstance(value, dict):
            return {k: str(runs["en-de"]) if v == "RUN" else with_run(v) for k, v in value.items()}
        return [with_run(v) for v in value] if isinstance(value, list) else value

    models = tmp_path / "models.yaml"
    models.write_text(yaml.safe_dump(with_run(entries)))
    assert_one_line_error(run_cli("serve", "--models", models), str(models), *words)


def test_a_models_file_missing_or_not_yaml_and_a_missing_run_are_one_line(run_cli, tmp_path):
    assert_one_line_error(run_cli("serve", "--models", tmp_path / "none.yaml"), "none.yaml", "not found")
    broken = tmp_path / "broken.yaml"
    broken.write_text("- path: [unclosed\n")
    assert_one_line_error(run_cli("serve", "--models", broken), "broken.yaml", "YAML syntax error")
    assert_one_line_error(run_cli("serve", tmp_path / "gone"), "gone", "no such run directory")
    assert_one_line_error(run_cli("serve"), "no model to serve")
    assert_one_line_error(run_cli("serve", tmp_path, "--max-models", "0"), "--max-models")
    assert_one_line_error(run_cli("serve", tmp_path, "--parallel-models", "0"), "--parallel-models")


# -------------------------------------------------------------------------------------- memory and load
ENGLISH = [f"A {w} runs in the park ." for w in ("dog", "cat", "man", "child")]
GERMAN = [f"Ein {w} sitzt im Garten ." for w in ("Hund", "Katze", "Mann", "Kind")]


def post_mixed(client) -> dict[int, dict]:
    """Eight concurrent ``/v1/translate`` requests, an English and a German sentence in turn; answers by index."""
    answers: dict[int, dict] = {}

    def post(i: int) -> None:
        text, source = (ENGLISH[i // 2], "en") if i % 2 == 0 else (GERMAN[i // 2], "de")
        answers[i] = client.post("/v1/translate", json={"text": text, "source": source}).json()

    threads = [threading.Thread(target=post, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE)
    return answers


def assert_mixed_answers(answers: dict[int, dict], loaded: dict) -> None:
    """Each answer of ``post_mixed`` is its model's own translation, as the Python API gives it."""
    for i in range(8):
        model, text = (loaded["en-de"], ENGLISH[i // 2]) if i % 2 == 0 else (loaded["de-en"], GERMAN[i // 2])
        assert answers[i]["translations"][0]["text"] == model.translate(text), (i, answers[i])


class _Meeting:
    """A loaded model whose first batch waits (``barrier``) until the other model's first batch has begun too."""

    def __init__(self, model, barrier: threading.Barrier):
        self._model, self._barrier, self._met = model, barrier, False

    def __getattr__(self, name):
        return getattr(self._model, name)

    def translate_batch(self, lines, **kwargs):
        if not self._met:
            self._barrier.wait()  # broken (an error) after its timeout if the other model never starts
            self._met = True
        return self._model.translate_batch(lines, **kwargs)


def test_two_model_threads_translate_two_models_at_once(runs, loaded):
    barrier = threading.Barrier(2, timeout=20)
    models: dict[str, _Meeting] = {}

    def load(spec):
        models[spec.name] = _Meeting(load_spec(spec), barrier)
        return models[spec.name]

    specs, parallel = share_cores([model_spec(runs[name], name=name) for name in ("en-de", "de-en")], 2, None, 2)
    assert parallel == 2 and [spec.options["threads"] for spec in specs] == [1, 1]
    executors = model_threads(parallel)
    pool = ModelPool(specs, load=load)
    executors[0].submit(pool.preload).result(DEADLINE)
    with TestClient(create_models_app(pool, executor=executors)) as client:
        answers = post_mixed(client)
    for executor in executors:
        executor.shutdown()
    assert_mixed_answers(answers, loaded)  # one worker would leave the first model at its barrier: an error


def test_share_cores_gives_each_model_its_share_when_every_model_stays_in_memory(runs):
    specs = [model_spec(runs[name], name=name) for name in ("en-de", "de-en", "en-mul")]
    own = specs[:2] + [replace(specs[2], options={**specs[2].options, "threads": 3})]
    shared, parallel = share_cores(own, 4, None, 8)
    assert parallel == 3 and [spec.options["threads"] for spec in shared] == [2, 2, 3]  # given threads are kept
    assert share_cores(specs, 2, None, 1)[0][0].options["threads"] == 1  # never 0
    with pytest.raises(MtkitError, match=r"^--parallel-models 4 needs every model in memory, and --max-models 1"):
        share_cores(specs, 4, 1, 8)  # fewer in memory than models: refused, not quietly one thread
    assert share_cores(specs, 2, 3, 8)[1] == 2
    assert share_cores(specs, 1, None, 8) == (specs, 1)


def test_one_model_in_memory_under_concurrent_requests(runs, loaded):
    executor = model_thread()
    model_thread_id = executor.submit(threading.get_ident).result(DEADLINE)
    seen: list[tuple[str, int, int]] = []  # (what, thread, models in memory)

    def load(spec):
        seen.append(("load", threading.get_ident(), pool.resident_count()))
        return load_spec(spec)

    specs = [model_spec(runs[name], name=name) for name in ("en-de", "de-en")]
    pool = ModelPool(specs, max_models=1, load=load)
    with TestClient(create_models_app(pool, executor=executor)) as client:
        answers = post_mixed(client)
        listed = client.get("/v1/models").json()["models"]
        metrics = client.get("/metrics").text
    executor.shutdown()
    assert_mixed_answers(answers, loaded)
    assert [m["loaded"] for m in listed].count(True) == 1
    assert {thread for _, thread, _ in seen} == {model_thread_id}  # loaded on the thread that translates
    assert all(resident == 0 for _, _, resident in seen)  # room was made first: never two in memory
    loads = sum(float(line.split()[-1]) for line in metrics.splitlines() if line.startswith("mtkit_model_loads_total"))
    unloads = [line for line in metrics.splitlines() if line.startswith("mtkit_model_unloads_total")]
    assert loads == len(seen) >= 2 and sum(float(line.split()[-1]) for line in unloads) == loads - 1
    assert "mtkit_models_resident 1.0" in metrics and "process_resident_memory_bytes" in metrics
    for name in ("en-de", "de-en"):
        assert f'mtkit_batch_sentences_count{{model="{name}"}} 4.0' in metrics  # one sentence per batch
        assert f'mtkit_model_sentences_total{{model="{name}"}} 4.0' in metrics


def flip_a_weight(path: Path) -> None:
    """Flip one bit of a model weight in a checkpoint: the file still parses, the weight's CRC-32 fails."""
    data = bytearray(path.read_bytes())
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + size])
    name = next(k for k in header if k.startswith("model."))
    data[8 + size + header[name]["data_offsets"][0]] ^= 0x01
    path.write_bytes(bytes(data))


def test_a_broken_model_is_503_while_the_other_serves(runs, loaded, tmp_path, run_cli):
    broken = tmp_path / "de-en"
    shutil.copytree(runs["de-en"], broken)
    specs = [model_spec(runs["en-de"], name="en-de"), model_spec(broken, name="de-en")]
    with TestClient(create_models_app(ModelPool(specs))) as client:
        for path in (broken / "checkpoints").glob("*.safetensors"):  # after start: the spec was read
            flip_a_weight(path)
        for _ in range(2):  # the second is refused without another try
            failed = client.post("/v1/translate", json={"text": "Ein Hund .", "source": "de", "target": "en"})
            assert_error(failed, 503, "model de-en is not available", "corrupted")
            assert int(failed.headers["retry-after"]) >= 1
        served = translate(client, "A dog runs .", source="en")["translations"][0]["text"]
        assert served == loaded["en-de"].translate("A dog runs .")
        listed = {m["name"]: m for m in client.get("/v1/models").json()["models"]}
        assert "corrupted" in listed["de-en"]["error"] and not listed["de-en"]["loaded"]
        assert listed["en-de"] == {
            "name": "en-de",
            "path": str(runs["en-de"]),
            "engine": "torch",
            "directions": ["en-de"],
            "loaded": True,
            "error": None,
        }
        assert 'mtkit_model_failures_total{model="de-en"} 1.0' in client.get("/metrics").text
    # --preload loads every model at start: a broken one stops the start with its reason
    assert_one_line_error(run_cli("serve", runs["en-de"], broken, "--preload"), "de-en", "corrupted")


# ------------------------------------------------------------------------------ a real server, a real client
def test_libretranslatepy_against_two_models(runs, loaded):
    from libretranslatepy import LibreTranslateAPI

    english, german = val_sentences("en", 2), val_sentences("de", 2)
    specs = model_specs([runs["en-de"], runs["de-en"]], None)
    with uvicorn_server(create_models_app(ModelPool(specs))) as (_server, port):
        api = LibreTranslateAPI(f"http://127.0.0.1:{port}")
        assert api.languages(timeout=DEADLINE) == [
            {"code": "en", "name": "English", "targets": ["de"]},
            {"code": "de", "name": "German", "targets": ["en"]},
        ]
        assert api.detect(german[0], timeout=DEADLINE)[0]["language"] == "de"
        assert api.detect(english[0], timeout=DEADLINE)[0]["language"] == "en"
        for text in german:
            assert api.translate(text, "auto", "en", timeout=DEADLINE) == loaded["de-en"].translate(text)
        for text in english:
            assert api.translate(text, "auto", "de", timeout=DEADLINE) == loaded["en-de"].translate(text)
