"""`mtkit export --format argos` of imported M2M-100 and NLLB-200 models (`mtkit import-hf`): one package per
direction, which argostranslate installs and translates with as mtkit does.

Small random models of both kinds are built as tests/test_m2m.py builds them, but with 1,024 positions (as the
released models have), so that mtkit's output limit can be Argos's (CTranslate2's default of 256 tokens): a random
model rarely ends a sentence. Each is imported and exported one direction (en -> de, eng_Latn -> deu_Latn).

- The package: CTranslate2 itself puts the source language's token first in every source (``add_source_bos`` with
  that token as ``bos_token`` in model/config.json), metadata.json's ``target_prefix`` is the target's token, and the
  package's SentencePiece model has every language token (and PAD, BOS, EOS) as a control symbol; the package's
  model/ translates through mtkit as the run does.
- With the real argostranslate (the environment of benchmarks/argos/venvs.sh, offline, as tests/test_argos.py runs
  it): installed with ``install_from_path``, its greedy translations (``ARGOS_BEAM_SIZE=1``, float32) equal
  `mtkit translate RUN --source X --target Y -b 1`, and with its own search (beam 4, length penalty 0.2, compute
  type auto) `mtkit translate PACKAGE/model` under the same search (``--search ctranslate2``).
- Bad input (no --target, a language the model lacks, no --source where it has several) is refused in one line.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from test_argos import HAVE_CT2, run_in, tool_pythons

from conftest import assert_one_line_error, cli, toy_pairs
from test_m2m import LANGS, build_m2m100, build_nllb, train_spm

pytestmark = [
    pytest.mark.skipif(not HAVE_CT2, reason='ctranslate2 is not installed (pip install "mtkit[ct2]")'),
    pytest.mark.usefixtures("one_thread"),
]
SOURCES = [s for s, _ in toy_pairs(10, seed=5)]  # one sentence each (Argos decodes a paragraph's sentences together)
ARGOS_MAX_OUTPUT = 256  # CTranslate2's max_decoding_length, which argostranslate leaves at its default
FOLDERS = {"m2m100": "translate-en_de-1_0", "nllb": "translate-eng_Latn_deu_Latn-1_0"}


@pytest.fixture(scope="module")
def venvs() -> dict[str, Path]:
    """The Python of each tool's virtual environment (built once by benchmarks/argos/venvs.sh)."""
    return tool_pythons()


@pytest.fixture(scope="module")
def imports(tmp_path_factory, one_thread) -> dict[str, tuple[Path, Path]]:
    """{family: (the imported run, its package of LANGS' source -> first target)}."""
    root = tmp_path_factory.mktemp("argos-imports")
    spm_model = train_spm(root)
    out = {}
    for name, build in (("m2m100", build_m2m100), ("nllb", build_nllb)):
        build(root / name, spm_model, positions=1024)
        run, package = root / f"run-{name}", root / f"{name}.argosmodel"
        assert cli("import-hf", root / name, "--output", run) == 0
        source, (target, _) = LANGS[name]
        assert cli("export", run, "--format", "argos", "--source", source, "--target", target, "--output", package) == 0
        out[name] = run, package
    return out


def unpacked(package: Path, into: Path) -> Path:
    with zipfile.ZipFile(package) as zf:
        zf.extractall(into)
    (folder,) = list(into.iterdir())
    return folder


@pytest.mark.parametrize("name", ["m2m100", "nllb"])
def test_the_package_of_an_import(imports, name, tmp_path, run_cli):
    import sentencepiece as spm

    from mtkit.checkpoint import load_checkpoint
    from mtkit.interop.ct2_export import ct2_vocabularies
    from mtkit.tokenizer import BOS, EOS, PAD

    run, package = imports[name]
    source, (target, other) = LANGS[name]
    template = load_checkpoint(run).config.data.tag_template
    source_tag, target_tag, other_tag = (template.replace("{lang}", code) for code in (source, target, other))
    folder = unpacked(package, tmp_path)
    assert folder.name == FOLDERS[name]
    meta = json.loads((folder / "metadata.json").read_text(encoding="utf-8"))
    assert (meta["from_code"], meta["to_code"], meta["target_prefix"]) == (source, target, target_tag)
    assert (folder / "minisbd" / f"{source}.onnx").is_file()
    # CTranslate2 puts the source language's token first itself; the decoder keeps its start token
    config = json.loads((folder / "model" / "config.json").read_text(encoding="utf-8"))
    tokenizer = load_checkpoint(run).tokenizer
    names = ct2_vocabularies(tokenizer)[1]
    assert (config["add_source_bos"], config["bos_token"]) == (True, source_tag)
    assert (config["decoder_start_token"], config["eos_token"], config["add_source_eos"]) == (names[BOS], "</s>", True)
    export = json.loads((folder / "model" / "mtkit_export.json").read_text(encoding="utf-8"))
    assert export["runtime"]["sources"] == [source]
    # the SentencePiece model: text cut as the import cuts it; every language token and special one decodes to nothing
    own = spm.SentencePieceProcessor(model_proto=tokenizer.model_bytes()["src"])
    packaged = spm.SentencePieceProcessor(model_file=str(folder / "sentencepiece.model"))
    controls = set(tokenizer.vocab.tags) | {names[PAD], names[BOS], names[EOS]}
    assert len(tokenizer.vocab.tags) >= 100 and all(packaged.is_control(packaged.piece_to_id(t)) for t in controls)
    assert packaged.get_piece_size() == own.get_piece_size() + len({t for t in controls if own.piece_to_id(t) == 0})
    for text in SOURCES:
        pieces = own.encode(text, out_type=str)
        assert packaged.encode(text, out_type=str) == pieces
        assert packaged.decode_pieces([target_tag, *pieces, other_tag, names[PAD]]) == own.decode_pieces(pieces)
    # the package's model translates through mtkit as the run does, its one source taken for granted
    flags = ("-b", 1, "--dtype", "float32", "--max-len-a", 0, "--max-len-b", 30, "--threads", 1)
    want = run_cli("translate", run, "--source", source, "--target", target, *flags, stdin="\n".join(SOURCES))
    got = run_cli("translate", folder / "model", "--target", target, *flags, stdin="\n".join(SOURCES))
    assert want.code == got.code == 0, (want.err, got.err)
    assert got.out == want.out and len(set(want.out.splitlines())) > len(SOURCES) // 2
    other_source = run_cli("translate", folder / "model", "--source", other, "--target", target, stdin="A dog .")
    assert_one_line_error(other_source, f"unknown source {other!r}", source)


def test_bad_directions_are_refused_in_one_line(imports, tmp_path, run_cli):
    nllb, m2m = imports["nllb"][0], imports["m2m100"][0]
    out = tmp_path / "x.argosmodel"

    def export(run, *flags):
        return run_cli("export", run, "--format", "argos", *flags, "--output", out)

    assert_one_line_error(export(nllb), "pass --target (one of 202 languages: ace_Arab, ace_Latn, acm_Arab, ...)")
    assert_one_line_error(export(nllb, "--target", "deu_LatN"), "--target 'deu_LatN'", "nearest deu_Latn")
    assert_one_line_error(export(nllb, "--target", "deu_Latn"), "several source languages: pass --source")
    assert_one_line_error(
        export(nllb, "--source", "eng_Latx", "--target", "deu_Latn"), "--source 'eng_Latx'", "nearest eng_Latn"
    )
    assert_one_line_error(export(m2m, "--source", "en", "--target", "xx"), "--target 'xx'", "100 languages")
    assert_one_line_error(export(m2m, "--source", "de", "--target", "de"), "both 'de'")
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------------------- the real argostranslate
def argos_translations(venvs, imports, tmp_path, settings: dict) -> tuple[dict, Path]:
    """Both packages installed by argostranslate (``settings``: its environment settings), SOURCES translated
    into each package's target; (the answer, the packages folder)."""
    directions = [[LANGS[name][0], LANGS[name][1][0]] for name in ("m2m100", "nllb")]
    job = {"install": [str(imports[name][1]) for name in ("m2m100", "nllb")], "directions": directions}
    home = tmp_path / "home"
    answer = run_in(venvs["argos"], home, {**job, "each": SOURCES}, tmp_path, settings)
    assert answer["installed"] == ["en-de", "eng_Latn-deu_Latn"]
    return answer, home / "packages"


def assert_real_text(translations: list[str], name: str) -> None:
    """Not one output for every sentence, and no language token anywhere."""
    assert len(set(translations)) > len(SOURCES) // 2
    tags = ("__de__", "__en__", "__fr__") if name == "m2m100" else ("deu_Latn", "eng_Latn", "fra_Latn", "Latn")
    assert not any(tag in t for t in translations for tag in tags), translations


@pytest.mark.slow
def test_argos_translate_greedy_equals_mtkit_translate_of_the_run(venvs, imports, tmp_path, run_cli):
    settings = {"ARGOS_BEAM_SIZE": "1", "ARGOS_COMPUTE_TYPE": "float32"}
    answer, _ = argos_translations(venvs, imports, tmp_path, settings)
    limits = ("--max-len-a", 0, "--max-len-b", ARGOS_MAX_OUTPUT, "--threads", 1)
    for name, (run, _) in imports.items():
        source, (target, _) = LANGS[name]
        flags = ("--source", source, "--target", target, "-b", 1, "--dtype", "float32", *limits)
        done = run_cli("translate", run, *flags, stdin="\n".join(SOURCES))
        assert done.code == 0, done.err
        assert answer[f"{source}-{target}"] == done.out.splitlines(), name
        assert_real_text(done.out.splitlines(), name)


@pytest.mark.slow
def test_argos_translate_s_own_search_equals_mtkit_s_on_the_package(venvs, imports, tmp_path, run_cli):
    """argostranslate's defaults: beam 4, length penalty 0.2 (CTranslate2's score / length ** 0.2), compute type
    auto; mtkit's CTranslate2 engine under CTranslate2's own search on the installed package's model."""
    answer, packages = argos_translations(venvs, imports, tmp_path, {})
    search = ("--search", "ctranslate2", "-b", 4, "--length-penalty", 0.2, "--dtype", "auto")
    limits = ("--max-len-a", 0, "--max-len-b", ARGOS_MAX_OUTPUT, "--threads", 1)
    for name in imports:
        source, (target, _) = LANGS[name]
        model = packages / FOLDERS[name] / "model"
        done = run_cli("translate", model, "--target", target, *search, *limits, stdin="\n".join(SOURCES))
        assert done.code == 0, done.err
        assert answer[f"{source}-{target}"] == done.out.splitlines(), name
        assert_real_text(done.out.splitlines(), name)
