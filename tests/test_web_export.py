"""`mtkit export --format web` and `mtkit serve --web`: the exported page in a real browser (the system's Chromium,
driven by Playwright), running the transformers.js and onnxruntime-web the export fetched from the npm registry.

One float32 export of the session's tiny run (conftest.py's ``toy_run_workdir``), served by ``mtkit serve --web``'s
server, loaded once with every request off the page's origin blocked and recorded:

- ``window.mtkit.translate`` gives the CLI's greedy translation (``mtkit translate -b 1 --dtype float32``) of every
  line: the toy test set, whose half-trained model runs many sentences into their length limit, and lines that try
  the tokenizer (full-width letters, a no-break space, a tab, characters the vocabulary lacks) and one longer than
  the model's positions, which both cut;
- the page asked for nothing off its origin, and the server's two headers made it cross-origin isolated;
- the page's own controls translate what is typed, and show the languages and the model's size;
- the graphs are mtkit's own model: a pre-norm variant with learned positions decodes in onnxruntime (Python) as
  mtkit translate -b 1 does, and a row that has ended only gives EOS again;
- a run the web path cannot express is refused: one line, exit 2, nothing written.

MTKIT_WEB_SCREENSHOT=FILE.png saves a picture of the page with its translation.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import torch

from conftest import EN_WORDS, TOY_RUN_MAX_POSITIONS, assert_one_line_error

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("playwright")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))
from benchlib import CHROMIUM, own_origin_page  # noqa: E402

if not os.path.exists(CHROMIUM):
    pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium)", allow_module_level=True)

from playwright.sync_api import expect  # noqa: E402

from mtkit.checkpoint import resolve  # noqa: E402
from mtkit.checkpoint.store import Bundle, load, save  # noqa: E402
from mtkit.interop.web_export import SITE_META, TRANSFORMERS_JS  # noqa: E402
from mtkit.serving.web_site import ISOLATION  # noqa: E402

pytestmark = pytest.mark.slow  # an export and Chromium (about 20 s): under xdist it starts with the slow modules

TRICKY = [
    "Ｔｗｏ ｄｏｇｓ run .",  # full-width letters: SentencePiece's NFKC folds them
    "A\u00a0cat  sits\tin the park .",  # a no-break space, two spaces, a tab
    "The ☃ dog 漢字 runs .",  # characters no piece has
    "  a man  ",
    " ".join(EN_WORDS * 8) + " .",  # more subwords than the model has positions: cut, keeping its EOS
]


@pytest.fixture(scope="module")
def site(toy_run_workdir, tmp_path_factory, request) -> Path:
    """The float32 export; the npm tarballs come from the registry once, then from pytest's cache folder."""
    from conftest import cli

    out = tmp_path_factory.mktemp("web") / "site"
    with pytest.MonkeyPatch.context() as patch:
        cache = getattr(request.config, "cache", None)  # none under -p no:cacheprovider: a folder of this session
        npm = cache.mkdir("mtkit-npm") if cache is not None else tmp_path_factory.mktemp("npm")
        patch.setenv("MTKIT_NPM_CACHE", str(npm))
        assert cli("export", toy_run_workdir / "run", "--format", "web", "--output", out) == 0
    return out


@pytest.fixture(scope="module")
def served(site):
    """The page as ``mtkit serve --web`` serves it, loaded in Chromium: (page, origin, requests made off origin,
    the headers of the page's own response)."""
    with own_origin_page(site) as served:
        yield served


def test_the_export_writes_a_site_of_its_own_files(site):
    names = {p.relative_to(site).as_posix() for p in site.rglob("*") if p.is_file()}
    model = "models/model/"
    assert {
        "index.html",
        "page.js",
        "page.css",
        SITE_META,
        "transformers.min.js",
        "ort-wasm-simd-threaded.asyncify.mjs",
        "ort-wasm-simd-threaded.asyncify.wasm",
        model + "config.json",
        model + "generation_config.json",
        model + "tokenizer.json",
        model + "tokenizer_config.json",
        model + "onnx/encoder_model.onnx",
        model + "onnx/decoder_model_merged.onnx",
    } == names
    assert not list(site.parent.glob(".*tmp")), "a temporary sibling was left behind"


@pytest.mark.compares  # WebAssembly's float32 against PyTorch's: held token for token (docs/browser.md)
def test_the_page_translates_as_the_cli_greedy_offline(served, toy_run_workdir, run_cli):
    page, _origin, off_origin, _headers = served
    lines = (toy_run_workdir / "corpus" / "test.en").read_text(encoding="utf-8").splitlines() + TRICKY
    result = run_cli("translate", toy_run_workdir / "run", "-b", "1", "--dtype", "float32", stdin="\n".join(lines))
    assert result.code == 0, result.err
    expected = result.out.splitlines()
    assert len(expected) == len(lines)
    assert len(TRICKY[-1].split()) > TOY_RUN_MAX_POSITIONS
    before = page.evaluate("window.mtkit.spent()")
    got = page.evaluate("(lines) => window.mtkit.translate(lines)", lines)
    assert list(zip(lines, got)) == list(zip(lines, expected))
    spent = {k: v - before[k] for k, v in page.evaluate("window.mtkit.spent()").items()}
    # a line leaves its batch at its EOS: the decoder computed fewer rows than stepping whole batches would
    assert spent["encoder_s"] > 0 and spent["decoder_s"] > 0 and spent["decoder_calls"] > 0
    assert sum(len(t.split()) for t in expected) < spent["rows"] < spent["whole_batch_rows"]
    # two calls at once (a script's and the page's own, as one types) give what each gives alone
    both = page.evaluate(
        "(l) => Promise.all([window.mtkit.translate(l), window.mtkit.translate(l.slice(0, 5))])", lines
    )
    assert both == [expected, expected[:5]]
    assert off_origin == []


def test_the_server_isolates_the_page_for_threads(served):
    page, _origin, _off, headers = served
    for name, value in ISOLATION.items():
        assert headers.get(name.lower()) == value
    assert page.evaluate("crossOriginIsolated") is True


def test_the_page_translates_what_is_typed(served):
    page, _origin, off_origin, _headers = served
    expected = page.evaluate("(lines) => window.mtkit.translate(lines)", ["A man sits in the park .", "Two dogs ."])
    expect(page.locator("#source")).to_have_value("en")
    expect(page.locator("#source option")).to_have_text("English")
    expect(page.locator("#target")).to_have_value("de")
    expect(page.locator("#target option")).to_have_text("German")
    expect(page.locator("#model-size")).to_contain_text("MB (float32)")
    expect(page.locator("#loading")).to_be_hidden()
    assert page.evaluate("document.getElementById('progress').value") == 1  # the bar filled as the model loaded
    page.fill("#input", "A man sits in the park .\nTwo dogs .")
    expect(page.locator("#output")).to_have_text("\n".join(expected))
    assert off_origin == []
    if os.environ.get("MTKIT_WEB_SCREENSHOT"):  # the picture of the page translating offline (docs/browser.md)
        page.screenshot(path=os.environ["MTKIT_WEB_SCREENSHOT"])


def variant(toy_run_workdir, path: Path, **model) -> Path:
    """The toy run's checkpoint with other ``model`` settings in its config, and the weights they add: LayerNorms
    after the stacks (``norm: pre``), position tables (``positions: learned``)."""
    bundle = load(resolve(toy_run_workdir / "run"))
    metadata = {**bundle.metadata, "config": {**bundle.metadata["config"]}}
    metadata["config"]["model"] = {**metadata["config"]["model"], **model}
    weights = {k: torch.clone(v) for k, v in bundle.model.items()}
    d, positions = weights["tgt_embed.weight"].shape[1], TOY_RUN_MAX_POSITIONS
    generator = torch.Generator().manual_seed(0)
    if model.get("norm") == "pre":
        for name in ("encoder_norm", "decoder_norm"):
            weights[f"{name}.weight"], weights[f"{name}.bias"] = torch.ones(d), torch.zeros(d)
    if model.get("positions") == "learned":
        for name in ("src_pos", "tgt_pos"):
            weights[f"{name}.weight"] = torch.randn(positions, d, generator=generator) * 0.3
    save(path, Bundle(metadata, weights, bundle.tokenizer))
    return path


@pytest.mark.compares  # onnxruntime's float32 against PyTorch's, token for token
def test_the_graphs_compute_a_pre_norm_model_with_learned_positions(toy_run_workdir, tmp_path, run_cli):
    """The graphs are mtkit's own model: a pre-norm Transformer with learned positions (the toy run's weights, its
    config changed) decodes greedily in onnxruntime as mtkit translate -b 1 does, every row of one batch stepped
    until the last ends, as transformers.js steps them: an ended row only ever gives EOS again."""
    import numpy as np
    import onnxruntime

    from mtkit.checkpoint import load_checkpoint
    from mtkit.interop import web_onnx
    from mtkit.models.base import BOS, EOS, PAD

    checkpoint = variant(toy_run_workdir, tmp_path / "pre.safetensors", norm="pre", positions="learned")
    lines = (toy_run_workdir / "corpus" / "test.en").read_text(encoding="utf-8").splitlines()[:16]
    result = run_cli("translate", checkpoint, "-b", "1", "--dtype", "float32", stdin="\n".join(lines))
    assert result.code == 0, result.err
    loaded = load_checkpoint(checkpoint)
    web_onnx.export_graphs(loaded.model, tmp_path, limits=(1.5, 10, TOY_RUN_MAX_POSITIONS - 1))
    encoder = onnxruntime.InferenceSession(str(tmp_path / "encoder_model.onnx"))
    decoder = onnxruntime.InferenceSession(str(tmp_path / "decoder_model_merged.onnx"))
    sources = [ids + [EOS] for ids in loaded.tokenizer.encode_src(lines)]
    width = max(map(len, sources))
    ids = np.array([ids + [PAD] * (width - len(ids)) for ids in sources])
    mask = (ids != PAD).astype(np.int64)
    states = encoder.run(None, {"input_ids": ids, "attention_mask": mask})[0]
    heads, layers = loaded.model.cfg.heads, loaded.model.cfg.decoder_layers
    feeds = {
        i.name: np.zeros((len(lines), heads, 0, loaded.model.cfg.d_model // heads), np.float32)
        for i in decoder.get_inputs()[3:]
    }
    assert len(feeds) == 4 * layers
    ended = decoder.run(
        None,
        {
            "input_ids": np.full((len(lines), 1), EOS),
            "encoder_attention_mask": mask,
            "encoder_hidden_states": states,
            **feeds,
        },
    )[0]
    others = np.delete(ended[:, -1], EOS, axis=1)
    assert (others <= web_onnx.NEG).all()  # after EOS, only EOS again: whatever the model would say
    tokens, outputs = np.full((len(lines), 1), BOS), []
    while not outputs or not (outputs[-1] == EOS).all():
        answer = decoder.run(
            None, {"input_ids": tokens, "encoder_attention_mask": mask, "encoder_hidden_states": states, **feeds}
        )
        tokens = answer[0][:, -1].argmax(-1)[:, None]
        outputs.append(tokens[:, 0])
        feeds = {o.name.replace("present", "past_key_values"): v for o, v in zip(decoder.get_outputs()[1:], answer[1:])}
    steps = np.stack(outputs, axis=1)  # (lines, steps)
    ends = [list(row).index(EOS) for row in steps]
    assert all((row[end:] == EOS).all() for row, end in zip(steps, ends))
    got = loaded.tokenizer.decode_tgt([list(row[:end]) for row, end in zip(steps, ends)])
    assert list(zip(lines, got)) == list(zip(lines, result.out.splitlines()))


@pytest.mark.parametrize(
    "key, value, needle",
    [("positions", "rope", "model.positions = 'rope'"), ("decoder_self", "ssru", "model.decoder_self = 'ssru'")],
)
def test_a_run_the_web_path_cannot_express_is_refused(toy_run_workdir, tmp_path, run_cli, key, value, needle):
    checkpoint = variant(toy_run_workdir, tmp_path / "other.safetensors", **{key: value})
    out = tmp_path / "site"
    assert_one_line_error(run_cli("export", checkpoint, "--format", "web", "--output", out), needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.safetensors"]


def test_bad_flags_are_one_line(toy_run_workdir, tmp_path, run_cli):
    run = toy_run_workdir / "run"
    out = tmp_path / "site"
    assert_one_line_error(
        run_cli("export", run, "--format", "web", "--output", out, "--quantization", "int16"), "--quantization"
    )
    npm = tmp_path / "npm"
    npm.mkdir()
    missing = run_cli("export", run, "--format", "web", "--output", out, "--npm-dir", npm)
    assert_one_line_error(missing, "--npm-dir", TRANSFORMERS_JS.tarball)
    (npm / TRANSFORMERS_JS.tarball).write_bytes(b"not the package")
    changed = run_cli("export", run, "--format", "web", "--output", out, "--npm-dir", npm)
    assert_one_line_error(changed, TRANSFORMERS_JS.tarball, "sha512")
    assert_one_line_error(run_cli("serve", "--web", tmp_path), "not a web export")
    assert not out.exists()
