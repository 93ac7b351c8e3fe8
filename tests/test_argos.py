"""`mtkit export --format argos`: packages that Argos Translate and LibreTranslate install and translate with, offline.

- The package: one folder in a zip (the CTranslate2 model, sentencepiece.model, minisbd/<source>.onnx,
  metadata.json, README.md); --quantization reaches the model; a multilingual run gives one package per --target,
  its language tokens made control symbols in the package's SentencePiece model; what Argos cannot run is refused
  in one line, exit 2, with nothing written.
- With the real tools, each in the virtual environment benchmarks/argos/venvs.sh builds (.venv-argos, reused while
  its requirements file is unchanged; about 1.5 minutes to build on two cores): argostranslate installs the packages
  with ``install_from_path`` and translates exactly what the package's CTranslate2 model gives under Argos's own
  settings (beam 4, length penalty 0.2: computed here with ctranslate2 and sentencepiece, the reference); its default
  sentence splitter, MiniSBD, splits with the package's rule model; LibreTranslate's server starts on the installed
  packages and answers /translate with the same translations. Every process of those tools runs with HOME and
  XDG folders of its own and its HTTP(S) proxy set to a closed local port, so a download fails at once instead of
  reaching out; the tests check that nothing tried.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Optional

import pytest
import yaml

from conftest import (
    SUBPROCESS_ENV,
    TINY_TRANSFORMER,
    assert_one_line_error,
    cli,
    free_port,
    prepare_and_train,
    write_toy_splits,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks" / "argos"))
from argos_offline import offline_env as tool_env  # noqa: E402

try:
    import ctranslate2

    HAVE_CT2 = True
except ImportError:
    HAVE_CT2 = False

pytestmark = [
    pytest.mark.skipif(not HAVE_CT2, reason='ctranslate2 is not installed (pip install "mtkit[ct2]")'),
    pytest.mark.usefixtures("one_thread"),
]
ROOT = Path(__file__).resolve().parent.parent
VENVS = ROOT / ".venv-argos"
ARGOS_BEAM, ARGOS_LENGTH_PENALTY = 4, 0.2  # argostranslate.translate.apply_packaged_translation's search


# ------------------------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def bilingual_run(toy_run_workdir) -> Path:
    """The toy en -> de Transformer of conftest (150 updates)."""
    return toy_run_workdir / "run"


@pytest.fixture(scope="module")
def multilingual_run(tmp_path_factory) -> Path:
    """A tiny multilingual Transformer, en -> de and de -> en, its language token first in the decoder."""
    root = tmp_path_factory.mktemp("argos-multi")
    splits = write_toy_splits(root, sizes=(("train", 300, 0), ("valid", 20, 1)))
    back = {name: {"src": files["tgt"], "tgt": files["src"]} for name, files in splits.items()}
    directions = [
        {"src_lang": "en", "tgt_lang": "de", "splits": splits},
        {"src_lang": "de", "tgt_lang": "en", "splits": back},
    ]
    config = {
        "data": {"dir": str(root / "data"), "vocab_size": 100, "directions": directions},
        "model": {**TINY_TRANSFORMER, "max_positions": 64},
        "training": {
            "run_dir": str(root / "run"),
            "max_updates": 150,
            "batch_tokens": 600,
            "lr": 3e-3,
            "warmup_updates": 20,
            "validate_every": 150,
            "log_every": 50,
            "threads": 1,
            "valid_max_sentences": 10,
            "valid_bleu": False,
        },
        "decoding": {"beam_size": 2, "threads": 1, "device": "cpu"},
    }
    prepare_and_train(root, config)
    return root / "run"


@pytest.fixture(scope="module")
def packages(bilingual_run, multilingual_run, tmp_path_factory) -> dict[str, Path]:
    """en_de.argosmodel (the bilingual run) and de_en.argosmodel (the multilingual run's --target en)."""
    out = tmp_path_factory.mktemp("argos-packages")
    assert cli("export", bilingual_run, "--format", "argos", "--output", out / "en_de.argosmodel") == 0
    assert cli("export", multilingual_run, "--format", "argos", "--target", "en", "-o", out / "de_en.argosmodel") == 0
    return {"en-de": out / "en_de.argosmodel", "de-en": out / "de_en.argosmodel"}


def unpacked(package: Path, into: Path) -> Path:
    """The package's one folder, unzipped under ``into``."""
    with zipfile.ZipFile(package) as zf:
        zf.extractall(into)
    (folder,) = list(into.iterdir())
    return folder


def toy_sources(workdir: Path) -> list[str]:
    return (workdir / "corpus" / "test.en").read_text(encoding="utf-8").splitlines()


# -------------------------------------------------------------------------------------------- the package
def test_a_package_is_one_folder_with_what_argos_reads(packages, bilingual_run, tmp_path):
    with zipfile.ZipFile(packages["en-de"]) as zf:
        names = zf.namelist()
    tops = {name.split("/")[0] for name in names}
    assert tops == {"translate-en_de-1_0"}
    folder = unpacked(packages["en-de"], tmp_path)
    for name in ("model/model.bin", "model/config.json", "sentencepiece.model", "minisbd/en.onnx", "README.md"):
        assert (folder / name).is_file(), name
    meta = json.loads((folder / "metadata.json").read_text(encoding="utf-8"))
    assert meta["from_code"] == "en" and meta["to_code"] == "de"
    assert meta["from_name"] == "English" and meta["to_name"] == "German"
    assert meta["type"] == "translate" and meta["package_version"] and "target_prefix" not in meta
    # the bilingual run's one SentencePiece model, byte for byte; the model dir is an mtkit export too
    assert (folder / "sentencepiece.model").read_bytes() == (bilingual_run / "spm.src.model").read_bytes()
    export = json.loads((folder / "model" / "mtkit_export.json").read_text(encoding="utf-8"))
    assert export["quantization"] == "float32" and export["tokenizer"] == {"src": "spm.model", "tgt": "spm.model"}
    assert "English -> German" in (folder / "README.md").read_text(encoding="utf-8")


def test_quantization_reaches_the_packaged_model(bilingual_run, tmp_path, run_cli):
    result = run_cli("export", bilingual_run, "--format", "argos", "-q", "int8", "--output", tmp_path / "q.argosmodel")
    assert result.code == 0, result.err
    assert "int8" in result.out and "install_from_path" in result.out
    folder = unpacked(tmp_path / "q.argosmodel", tmp_path / "unpacked")
    assert json.loads((folder / "model" / "mtkit_export.json").read_text())["quantization"] == "int8"
    translator = ctranslate2.Translator(str(folder / "model"), device="cpu", compute_type="default")
    assert "int8" in translator.compute_type


def test_a_multilingual_package_forces_its_language_token_which_decodes_to_nothing(
    packages, multilingual_run, tmp_path
):
    import sentencepiece as spm

    folder = unpacked(packages["de-en"], tmp_path)
    meta = json.loads((folder / "metadata.json").read_text(encoding="utf-8"))
    assert (meta["from_code"], meta["to_code"], meta["target_prefix"]) == ("de", "en", "<2en>")
    assert (folder / "minisbd" / "de.onnx").is_file()
    own = spm.SentencePieceProcessor(model_proto=(multilingual_run / "spm.src.model").read_bytes())
    packaged = spm.SentencePieceProcessor(model_file=str(folder / "sentencepiece.model"))
    assert own.get_piece_size() == packaged.get_piece_size()
    for tag in ("<2en>", "<2de>"):
        i = own.piece_to_id(tag)
        assert packaged.piece_to_id(tag) == i and packaged.is_control(i) and not own.is_control(i)
        text = "Ein Mann sieht zwei Hunde im Park ."
        ids = own.encode(text)
        assert packaged.decode([i, *ids]) == own.decode(ids) != own.decode([i, *ids])
        assert packaged.encode(text) == ids


def test_a_multilingual_run_needs_a_target(multilingual_run, tmp_path, run_cli):
    result = run_cli("export", multilingual_run, "--format", "argos", "--output", tmp_path / "x.argosmodel")
    assert_one_line_error(result, "--target", "de, en")
    result = run_cli(
        "export", multilingual_run, "--format", "argos", "--target", "fr", "--output", tmp_path / "x.argosmodel"
    )
    assert_one_line_error(result, "--target 'fr'")
    assert list(tmp_path.iterdir()) == []


def test_the_languages_of_a_package(tmp_path):
    from mtkit.config import DataConfig
    from mtkit.errors import MtkitError
    from mtkit.interop.argos_export import package_languages

    bilingual = DataConfig(dir=str(tmp_path), src_lang="en", tgt_lang="de")
    assert package_languages(bilingual, None, None) == ("en", "de", "", "")
    assert package_languages(bilingual, "en", "de") == ("en", "de", "", "")
    with pytest.raises(MtkitError, match="translates en -> de only"):
        package_languages(bilingual, None, "fr")

    def multi(**keys):
        directions = [
            {"src_lang": s, "tgt_lang": t} for s, t in (("en", "de"), ("en", "fr"), ("de", "en"), ("fr", "de"))
        ]
        return DataConfig(dir=str(tmp_path), directions=directions, **keys)

    assert package_languages(multi(), "en", "fr") == ("en", "fr", "<2fr>", "")
    assert package_languages(multi(), None, "fr") == ("en", "fr", "<2fr>", "")  # the one direction into fr
    assert package_languages(multi(tag_template=">>{lang}<<"), "de", "en") == ("de", "en", ">>en<<", "")
    with pytest.raises(MtkitError, match="several source languages: pass --source \\(one of en, fr\\)"):
        package_languages(multi(), None, "de")
    with pytest.raises(MtkitError, match="both 'en'"):
        package_languages(multi(), "en", "en")
    with pytest.raises(MtkitError, match="target_tag is 'source'"):
        package_languages(multi(target_tag="source"), "en", "de")
    # a model that reads its source language as a token (an imported NLLB-200 model): that token first in the source
    tagged = {"source_tag": True, "target_tag": "decoder", "tag_template": "{lang}"}
    many = DataConfig(dir=str(tmp_path), languages=[f"l{i:02d}_Latn" for i in range(20)], **tagged)
    assert package_languages(many, "l01_Latn", "l02_Latn") == ("l01_Latn", "l02_Latn", "l02_Latn", "l01_Latn")
    with pytest.raises(MtkitError, match="pass --source \\(one of 19 languages: l00_Latn, l01_Latn, l03_Latn, ...\\)"):
        package_languages(many, None, "l02_Latn")
    with pytest.raises(
        MtkitError, match="--target 'l02_latn': this run's targets are 20 languages, the nearest l02_Latn"
    ):
        package_languages(many, "l01_Latn", "l02_latn")
    with pytest.raises(MtkitError, match="--source 'eng_Latn': this run's source languages are 20 languages"):
        package_languages(many, "eng_Latn", "l02_Latn")
    tuned = DataConfig(dir=str(tmp_path), directions=[{"src_lang": "eng_Latn", "tgt_lang": "deu_Latn"}], **tagged)
    assert package_languages(tuned, None, "deu_Latn") == ("eng_Latn", "deu_Latn", "deu_Latn", "eng_Latn")


def test_bad_input_is_one_line_and_nothing_is_written(bilingual_run, toy_run_workdir, tmp_path, run_cli):
    out = tmp_path / "en_de.argosmodel"
    out.write_bytes(b"not a package")
    result = run_cli("export", bilingual_run, "--format", "argos", "--output", out)
    assert_one_line_error(result, "already exists", "--force")
    result = run_cli("export", bilingual_run, "--format", "argos", "--output", out, "--force")
    assert_one_line_error(result, "not an Argos Translate package")
    assert out.read_bytes() == b"not a package"
    result = run_cli("export", bilingual_run, "--format", "argos", "--output", tmp_path / "d", "-q", "int3")
    assert_one_line_error(result, "--quantization 'int3'")
    result = run_cli("export", bilingual_run, "--target", "de", "--output", tmp_path / "ct2")
    assert_one_line_error(result, "--format argos")
    # an RNN: refused before anything is written
    tree = yaml.safe_load((toy_run_workdir / "config.yaml").read_text(encoding="utf-8"))
    tree["model"] = {"arch": "bahdanau", "embed_dim": 16, "hidden_size": 16}
    tree["training"] = {**tree["training"], "run_dir": str(tmp_path / "rnn"), "max_updates": 2, "validate_every": 2}
    (tmp_path / "rnn.yaml").write_text(yaml.safe_dump(tree), encoding="utf-8")
    assert cli("train", tmp_path / "rnn.yaml") == 0
    result = run_cli("export", tmp_path / "rnn", "--format", "argos", "--output", tmp_path / "rnn.argosmodel")
    assert_one_line_error(result, "Transformer")
    # learned positions for fewer subwords than Argos feeds a model
    tree["model"] = {**TINY_TRANSFORMER, "positions": "learned", "max_positions": 128}
    tree["training"]["run_dir"] = str(tmp_path / "learned")
    (tmp_path / "learned.yaml").write_text(yaml.safe_dump(tree), encoding="utf-8")
    assert cli("train", tmp_path / "learned.yaml") == 0
    result = run_cli("export", tmp_path / "learned", "--format", "argos", "--output", tmp_path / "l.argosmodel")
    assert_one_line_error(result, "'learned' with max_positions 128", "1024")
    names = ["en_de.argosmodel", "learned", "learned.yaml", "rnn", "rnn.yaml"]
    assert sorted(p.name for p in tmp_path.iterdir()) == names


def test_force_replaces_an_earlier_package(bilingual_run, tmp_path, run_cli):
    out = tmp_path / "en_de.argosmodel"
    assert run_cli("export", bilingual_run, "--format", "argos", "-q", "int8", "--output", out).code == 0
    small = out.stat().st_size
    assert run_cli("export", bilingual_run, "--format", "argos", "--output", out, "--force").code == 0
    assert out.stat().st_size > small  # float32 now
    assert sorted(p.name for p in tmp_path.iterdir()) == ["en_de.argosmodel"]  # no temp files left


# ----------------------------------------------------------------------------------- the reference
def sentencepiece_model(folder: Path):
    import sentencepiece as spm

    return spm.SentencePieceProcessor(model_file=str(folder / "sentencepiece.model"))


def argos_reference(folder: Path, sentences: list[list[str]], compute_type: str) -> list[str]:
    """What Argos Translate's call makes of each paragraph, given as its sentences: CTranslate2 at beam 4 with length
    penalty 0.2 on each sentence (the target prefix forced), the sentences' pieces decoded together, the prefix and
    one leading space taken off. argostranslate loads the model with compute_type "auto" (CTranslate2's fastest
    type on this CPU: int8 where it has the instructions for it); LibreTranslate's fork with the model's own type
    ("default")."""
    import sentencepiece as spm

    meta = json.loads((folder / "metadata.json").read_text(encoding="utf-8"))
    prefix = meta.get("target_prefix", "")
    sp = spm.SentencePieceProcessor(model_file=str(folder / "sentencepiece.model"))
    translator = ctranslate2.Translator(str(folder / "model"), device="cpu", intra_threads=1, compute_type=compute_type)
    out = []
    for paragraph in sentences:
        pieces = [sp.encode(s, out_type=str) for s in paragraph]
        results = translator.translate_batch(
            pieces,
            target_prefix=[[prefix]] * len(pieces) if prefix else None,
            max_batch_size=32,
            batch_type="tokens",
            beam_size=ARGOS_BEAM,
            length_penalty=ARGOS_LENGTH_PENALTY,
            replace_unknowns=True,
        )
        text = sp.decode_pieces([p for r in results for p in r.hypotheses[0]]).replace("\u2581", " ")
        text = text.replace("_", " ")
        text = text[len(prefix) :] if prefix and text.startswith(prefix) else text
        out.append(text[1:] if text.startswith(" ") else text)
    return out


# ----------------------------------------------------------------------------------- the real tools
def offline_env(home: Path) -> dict:
    """benchmarks/argos/argos_offline.py's environment, on the tests' own (one thread)."""
    return tool_env(home, threads=1, base=SUBPROCESS_ENV)


@pytest.fixture(scope="module")
def venvs() -> dict[str, Path]:
    """The Python of each tool's virtual environment (built once by benchmarks/argos/venvs.sh)."""
    return tool_pythons()


def tool_pythons() -> dict[str, Path]:
    """{"argos": ..., "libretranslate": ...}: the Python of each tool's virtual environment, which
    benchmarks/argos/venvs.sh builds where it is missing or out of date."""
    done = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "argos" / "venvs.sh"), str(VENVS)],
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return {name: VENVS / name / "bin" / "python" for name in ("argos", "libretranslate")}


ARGOS_SCRIPT = """
import json, sys
import argostranslate.package as package
import argostranslate.translate as translate

job = json.load(open(sys.argv[1], encoding="utf-8"))
for path in job["install"]:
    package.install_from_path(path)
answer = {"installed": sorted(f"{p.from_code}-{p.to_code}" for p in package.get_installed_packages())}
for source, target, texts in job.get("translate", []):  # each direction's own sentences
    answer[f"{source}-{target}"] = [translate.translate(t, source, target) for t in texts]
for source, target in job.get("directions", []):  # several packages: each direction's translations of "each"
    answer[f"{source}-{target}"] = [translate.translate(t, source, target) for t in job["each"]]
if "split" in job:
    from minisbd import SBDetect
    detector = SBDetect(job["split"], use_gpu=False)
    answer["sentences"] = [detector.sentences(t) for t in job["split_texts"]]
json.dump(answer, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
"""


def run_in(python: Path, home: Path, job: dict, tmp_path: Path, settings: Optional[dict] = None) -> dict:
    """Run ARGOS_SCRIPT on ``job`` with ``python`` offline (``offline_env``, plus argostranslate's ``settings``,
    such as ``ARGOS_BEAM_SIZE``); its JSON answer."""
    (tmp_path / "job.json").write_text(json.dumps(job), encoding="utf-8")
    (tmp_path / "argos_job.py").write_text(ARGOS_SCRIPT, encoding="utf-8")
    done = subprocess.run(
        [str(python), str(tmp_path / "argos_job.py"), str(tmp_path / "job.json"), str(tmp_path / "answer.json")],
        capture_output=True,
        text=True,
        env={**offline_env(home), **(settings or {})},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((tmp_path / "answer.json").read_text(encoding="utf-8"))


def english_sources(workdir: Path) -> tuple[list[str], list[str]]:
    """The toy test sentences and one longer than the model's max_positions (128) in subwords (Argos feeds up to
    1024); and three paragraphs of two of them ("... . Two ...")."""
    long = " ".join(s.rstrip(" .") for s in toy_sources(workdir)[20:30]) + " ."
    sources = [*toy_sources(workdir)[:20], long]
    return sources, [f"{a} {b}" for a, b in zip(sources[0:6:2], sources[1:6:2])]


def german_sources(workdir: Path) -> tuple[list[str], str]:
    sources = (workdir / "corpus" / "test.de").read_text(encoding="utf-8").splitlines()[:10]
    return sources, f"{sources[0]} {sources[1]}"


@pytest.fixture(scope="module")
def argos_answer(venvs, packages, toy_run_workdir, tmp_path_factory) -> tuple[dict, Path]:
    """Both packages installed offline into a new home by argostranslate, which then translates each direction's
    sentences: one process for the tests below (its start-up takes seconds). (The answer, the home.)"""
    work = tmp_path_factory.mktemp("argos-job")
    english, pairs = english_sources(toy_run_workdir)
    german, paragraph = german_sources(toy_run_workdir)
    job = {
        "install": [str(packages["en-de"]), str(packages["de-en"])],
        "translate": [["en", "de", english + pairs], ["de", "en", [*german, paragraph]]],
    }
    return run_in(venvs["argos"], work / "home", job, work), work / "home"


@pytest.mark.slow
def test_argos_translate_installs_offline_and_translates_as_the_model_does(argos_answer, toy_run_workdir):
    answer, home = argos_answer
    sources, pairs = english_sources(toy_run_workdir)
    assert answer["installed"] == ["de-en", "en-de"]
    folder = home / "packages" / "translate-en_de-1_0"
    assert (folder / "model" / "model.bin").is_file()
    expected = argos_reference(folder, [[s] for s in sources], "auto")
    assert answer["en-de"][: len(sources)] == expected
    assert len(sentencepiece_model(folder).encode(sources[-1])) > 128
    # a paragraph of two sentences is cut in two by the package's splitter and each is translated on its own
    split = argos_reference(folder, [[a, b] for a, b in zip(sources[0:6:2], sources[1:6:2])], "auto")
    assert answer["en-de"][len(sources) :] == split
    assert split != argos_reference(folder, [[p] for p in pairs], "auto")  # unsplit, the model says something else
    assert not (home / "data" / "argos-translate" / "minisbd").exists()  # MiniSBD downloaded nothing


@pytest.mark.slow
def test_argos_translate_forces_a_multilingual_package_s_language(argos_answer, toy_run_workdir):
    answer, home = argos_answer
    sources, _ = german_sources(toy_run_workdir)
    folder = home / "packages" / "translate-de_en-1_0"
    expected = argos_reference(folder, [[s] for s in sources] + [[sources[0], sources[1]]], "auto")
    assert answer["de-en"] == expected
    assert not any("<2" in t for t in answer["de-en"])  # the language token never shows, in any sentence


@pytest.mark.slow
def test_minisbd_splits_with_the_package_s_rule(venvs, tmp_path):
    from mtkit.interop.sentence_rules import minisbd_model

    (tmp_path / "en.onnx").write_bytes(minisbd_model("en"))
    texts = [
        "A man rides a bike. Two dogs play in the park! Is it red? yes it is.",
        "Only one sentence here",
        'He is 3.5 m tall. "Hello," she said.',
        "日本語です。次の文！",
        "End.\n\nA new paragraph. And more.",
    ]
    answer = run_in(
        venvs["argos"],
        tmp_path / "home",
        {"install": [], "split": str(tmp_path / "en.onnx"), "split_texts": texts},
        tmp_path,
    )
    assert answer["sentences"] == [
        ["A man rides a bike.", "Two dogs play in the park!", "Is it red? yes it is."],
        ["Only one sentence here"],
        ["He is 3.5 m tall.", '"Hello," she said.'],
        ["日本語です。", "次の文！"],
        ["End.", "A new paragraph.", "And more."],
    ]


@pytest.mark.slow
def test_libretranslate_serves_the_packages_offline(venvs, packages, toy_run_workdir, tmp_path):
    import httpx

    home = tmp_path / "home"
    installed = run_in(
        venvs["libretranslate"], home, {"install": [str(packages["en-de"]), str(packages["de-en"])]}, tmp_path
    )
    assert installed["installed"] == ["de-en", "en-de"]
    port = free_port()
    log = open(tmp_path / "libretranslate.log", "w", encoding="utf-8")
    command = [
        str(venvs["libretranslate"].parent / "libretranslate"),
        *("--host", "127.0.0.1", "--port", str(port), "--load-only", "en,de", "--threads", "2"),
        *("--disable-web-ui", "--disable-files-translation"),
    ]
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=offline_env(home))
    url = f"http://127.0.0.1:{port}"
    client = httpx.Client(trust_env=False)  # straight to the local server, whatever proxy this machine has
    try:
        deadline = time.monotonic() + 120
        while True:
            assert server.poll() is None, (tmp_path / "libretranslate.log").read_text()
            try:
                languages = client.get(f"{url}/languages", timeout=5).json()
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "LibreTranslate did not answer in 120 s"
                time.sleep(0.5)
        assert {lang["code"]: sorted(lang["targets"]) for lang in languages} == {
            "en": ["de", "en"],
            "de": ["de", "en"],
        }
        sources = toy_sources(toy_run_workdir)[:12]
        answers = [
            client.post(f"{url}/translate", json={"q": s, "source": "en", "target": "de"}, timeout=60).json()
            for s in sources
        ]
        german = (toy_run_workdir / "corpus" / "test.de").read_text(encoding="utf-8").splitlines()[:4]
        back = client.post(f"{url}/translate", json={"q": german, "source": "de", "target": "en"}, timeout=60).json()
    finally:
        client.close()
        server.terminate()
        server.wait(timeout=30)
        log.close()
    folder = home / "packages" / "translate-en_de-1_0"
    expected = argos_reference(folder, [[s] for s in sources], "default")
    # LibreTranslate gives the source's capital and final mark to the translation; where the model's output has them
    # already (the toy sentences start upper case and end in " ."), the answer is the translation itself
    same = [i for i, e in enumerate(expected) if e[:1].isupper() and e.endswith(".")]
    assert len(same) >= len(sources) // 2, expected
    assert [answers[i]["translatedText"] for i in same] == [expected[i] for i in same]
    assert all(a["translatedText"] for a in answers)
    reverse = argos_reference(home / "packages" / "translate-de_en-1_0", [[s] for s in german], "default")
    assert len(back["translatedText"]) == len(german)
    for got, want in zip(back["translatedText"], reverse):
        if want[:1].isupper() and want.endswith("."):
            assert got == want
        assert "<2" not in got
    text = (tmp_path / "libretranslate.log").read_text(encoding="utf-8")
    assert "Updating language models" not in text and "Downloading" not in text  # nothing was fetched
