"""`mtkit export RUN --format web --output DIR`: a static site that translates in the browser, offline, with
transformers.js on onnxruntime-web's WebAssembly backend. Everything it loads is in DIR:

- ``index.html``, ``page.js`` and ``page.css`` (the look of ``mtkit serve``'s page): a text box translated as one
  types, the run's languages, a progress bar while the model loads and its size; ``window.mtkit = {ready,
  translate(lines)}`` for scripts;
- ``transformers.min.js`` (npm ``@huggingface/transformers``, self-contained) and onnxruntime-web's
  ``ort-wasm-simd-threaded.asyncify.{mjs,wasm}``, taken from the npm registry's tarballs of the pinned versions when
  the site is exported, checked against their integrity hashes and cached (``cache_dir``); ``--npm-dir`` reads the
  same tarballs from a folder instead (a machine without the registry);
- ``models/model/``: config.json (a MarianMT config: what transformers.js reads of it is the model class and the
  sizes of its caches), generation_config.json, tokenizer.json, tokenizer_config.json and the ONNX graphs
  (``onnx/encoder_model.onnx``, ``onnx/decoder_model_merged.onnx``; ``--quantization int8``: the ``_quantized``
  ones, which transformers.js loads as ``q8``), computed by ``web_onnx`` from the run's own model: a Transformer
  with sinusoidal or learned positions, pre-norm or post-norm; anything else is refused by key (``_check_run``);
- ``mtkit-web.json``: the languages, the quantization and the model's size, which the page shows.

A multilingual run is exported one direction at a time (``--target``, and ``--source`` where it has several), as an
Argos package is (``argos_export.package_languages``): its language token is forced as the first output token,
in the decoder's graph.
The site is written to a temporary sibling and renamed into place: whole or not at all.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import tarfile
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from mtkit import config as cfgmod
from mtkit.errors import MtkitError
from mtkit.files import fsync_tree, replace_dir
from mtkit.text.names import language_name

QUANTIZATIONS = ("float32", "int8")
REGISTRY = "https://registry.npmjs.org"
PAGE_FILES = ("index.html", "page.js")
SITE_META = "mtkit-web.json"
MODEL_DIR = "models/model"
DOWNLOAD_TIMEOUT = 60  # seconds a registry read may take


@dataclass(frozen=True)
class NpmPackage:
    """A pinned npm package: its name, version, the sha512 integrity the registry publishes for its tarball, and
    the files the site takes from it (path in the tarball -> name in the site)."""

    name: str
    version: str
    integrity: str
    files: tuple[tuple[str, str], ...]

    @property
    def tarball(self) -> str:
        """The tarball's file name, as the registry and ``npm pack`` name it."""
        return f"{self.name.lstrip('@').replace('/', '-')}-{self.version}.tgz"

    @property
    def url(self) -> str:
        return f"{REGISTRY}/{self.name}/-/{self.name.split('/')[-1]}-{self.version}.tgz"


TRANSFORMERS_JS = NpmPackage(
    "@huggingface/transformers",
    "4.3.2",
    "sha512-V3+dqf3iWlRYJ9I9GreM3zGQd0lAXnnoPeddmkOQYWAEE4l/+Fi6p7tx/qVUJlKQgLXGim2W76rTOzz+eC0i7g==",
    (("package/dist/transformers.min.js", "transformers.min.js"),),
)
ONNXRUNTIME_WEB = NpmPackage(  # the version transformers.js 4.3.2 depends on and bundles
    "onnxruntime-web",
    "1.31.0-dev.20260914-8d85527a0",
    "sha512-Iy7rtadoBgxS/LLvDr3QW38DB1PNXRnr0GJMcL0TAt7c9qjgVQl83UlGCVyeAnK2InpmW8Uc3PL8XIuqtDeF6g==",
    (
        ("package/dist/ort-wasm-simd-threaded.asyncify.mjs", "ort-wasm-simd-threaded.asyncify.mjs"),
        ("package/dist/ort-wasm-simd-threaded.asyncify.wasm", "ort-wasm-simd-threaded.asyncify.wasm"),
    ),
)
NPM_PACKAGES = (TRANSFORMERS_JS, ONNXRUNTIME_WEB)


# ------------------------------------------------------------------------------------------ npm packages
def cache_dir() -> Optional[Path]:
    """Where the npm tarballs are kept: ``$MTKIT_NPM_CACHE``, else ``$MTKIT_CACHE_DIR/npm``, else
    ``$XDG_CACHE_HOME/mtkit/npm``, else ``~/.cache/mtkit/npm``; None (nothing kept) for ``MTKIT_CACHE_DIR=off``."""
    if os.environ.get("MTKIT_NPM_CACHE"):
        return Path(os.environ["MTKIT_NPM_CACHE"])
    root = os.environ.get("MTKIT_CACHE_DIR")
    if root == "off":
        return None
    if not root:
        xdg = os.environ.get("XDG_CACHE_HOME")
        root = str(Path(xdg) / "mtkit") if xdg else str(Path.home() / ".cache" / "mtkit")
    return Path(root) / "npm"


def _matches(blob: bytes, integrity: str) -> bool:
    algorithm, _, digest = integrity.partition("-")
    return base64.b64encode(hashlib.new(algorithm, blob).digest()).decode() == digest


def tarball(package: NpmPackage, npm_dir: Optional[Path] = None) -> bytes:
    """The bytes of ``package``'s tarball, checked against its integrity hash.

    From ``npm_dir`` where given; else from the cache, else from the npm registry (then cached).

    Raises:
        MtkitError: the tarball is missing from ``npm_dir``, the registry cannot be reached, or the bytes do not
            match the pinned hash.
    """
    if npm_dir is not None:
        path = Path(npm_dir) / package.tarball
        if not path.is_file():
            raise MtkitError(
                f"--npm-dir {npm_dir}: no {package.tarball}; put the tarball there ({package.url}, or "
                f"npm pack {package.name}@{package.version})"
            )
        blob = path.read_bytes()
        if not _matches(blob, package.integrity):
            raise MtkitError(f"{path}: its sha512 is not {package.name}@{package.version}'s; download it again")
        return blob
    folder = cache_dir()
    cached = folder / package.tarball if folder is not None else None
    if cached is not None and cached.is_file():
        blob = cached.read_bytes()
        if _matches(blob, package.integrity):
            return blob
    try:
        with urllib.request.urlopen(package.url, timeout=DOWNLOAD_TIMEOUT) as answer:
            blob = answer.read()
    except (urllib.error.URLError, OSError) as err:
        reason = getattr(err, "reason", None) or err
        raise MtkitError(
            f"cannot download {package.url} ({reason}); on a machine without the npm registry, pass --npm-dir with "
            f"{package.tarball} in it"
        ) from None
    if not _matches(blob, package.integrity):
        raise MtkitError(f"{package.url}: the download's sha512 is not the pinned one; try again")
    if cached is None:
        return blob
    try:
        cached.parent.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_name(f".{cached.name}.{os.getpid()}.tmp")
        tmp.write_bytes(blob)
        os.replace(tmp, cached)
    except OSError:  # a cache that cannot be written costs the next export a download, nothing more
        pass
    return blob


def npm_files(npm_dir: Optional[Path] = None) -> dict[str, bytes]:
    """The site's JavaScript and WebAssembly files by name, from the pinned packages (``tarball``)."""
    out = {}
    for package in NPM_PACKAGES:
        with tarfile.open(fileobj=io.BytesIO(tarball(package, npm_dir)), mode="r:gz") as tar:
            for member, name in package.files:
                extracted = tar.extractfile(member)
                if extracted is None:  # pragma: no cover - the hash pins the tarball's contents
                    raise MtkitError(f"{package.tarball}: no {member}")
                out[name] = extracted.read()
    return out


# ------------------------------------------------------------------------------------------ the model
WEB_POSITIONS = ("sinusoidal", "learned")  # added to the embeddings; the others change every attention


def _check_run(cfg, where: str) -> None:
    """Refuse in one line a run whose model the web graphs cannot compute (``web_onnx``)."""
    model = cfg.model
    if model.arch != "transformer":
        raise MtkitError(
            f"{where}: model.arch is {model.arch!r} (an RNN); the web export runs Transformers: serve this model "
            "with mtkit serve"
        )
    if model.positions not in WEB_POSITIONS:
        raise MtkitError(
            f"{where}: model.positions = {model.positions!r} cannot be expressed in the web export (it adds "
            f"{' or '.join(WEB_POSITIONS)} positions to the embeddings): serve this model with mtkit serve"
        )
    if model.decoder_self != "attention":
        raise MtkitError(
            f"{where}: model.decoder_self = {model.decoder_self!r} cannot be expressed in the web export (its "
            "decoder caches self-attention's keys and values): serve this model with mtkit serve"
        )
    if not cfg.data.joint_vocab:
        raise MtkitError(
            f"{where}: data.joint_vocab is false; transformers.js encodes and decodes with one tokenizer, so export "
            "a run trained with data.joint_vocab: true"
        )


def _pieces(tokenizer) -> list[str]:
    """The piece of each of the model's ids (mtkit's: PAD, UNK, BOS, EOS first); an id without one (an imported
    OPUS-MT model's PAD, which its decoder never emits) gets a name of its own."""
    if tokenizer.vocab is None:
        return tokenizer.tgt_pieces(range(tokenizer.tgt_vocab_size))
    return [p if p is not None else f"<mtkit-{i}>" for i, p in enumerate(tokenizer.vocab.pieces)]


def model_files(file: Path, cfg, direction, quantization: str, folder: Path) -> dict:
    """Write the model's files into ``folder`` (``MODEL_DIR`` of the site); returns what ``mtkit-web.json`` says of
    them."""
    from mtkit import checkpoint as ckpt
    from mtkit.interop import m2m100_export, marian, web_onnx
    from mtkit.tokenizer import BOS, EOS, PAD, UNK

    loaded = ckpt.load_checkpoint(file)
    tokenizer = loaded.tokenizer
    if m2m100_export.hf_facts(tokenizer):
        raise MtkitError(
            f"{file}: an imported M2M-100 or NLLB-200 model, whose tokenizer transformers.js cannot be given here; "
            "export a run trained with mtkit, or an imported OPUS-MT model"
        )
    pieces = _pieces(tokenizer)
    vocab = {p: i for i, p in enumerate(pieces)}
    if len(vocab) != len(pieces):
        raise MtkitError(f"{file}: the vocabulary repeats a piece; tokenizer.json needs each once")
    special = {"pad": PAD, "unk": UNK, "eos": EOS, "start": BOS}
    cap = cfg.model.max_positions - 1
    if direction.target_prefix and direction.target_prefix not in vocab:
        raise MtkitError(f"{file}: the vocabulary has no language token {direction.target_prefix!r}")
    forced = vocab[direction.target_prefix] if direction.target_prefix else None
    # language tokens decode to no text: a multilingual run's targets; an imported vocabulary's tags, which mtkit's
    # decoding leaves out
    tags = [cfgmod.language_tag(t, cfg.data.tag_template) for t in cfg.data.targets] if forced is not None else []
    if tokenizer.vocab is not None:
        tags += sorted(tokenizer.vocab.tags)
    onnx_dir = folder / "onnx"
    onnx_dir.mkdir(parents=True)
    web_onnx.export_graphs(
        loaded.model, onnx_dir, limits=(cfg.decoding.max_len_a, cfg.decoding.max_len_b, cap), forced_first=forced
    )
    if quantization == "int8":
        web_onnx.quantize(onnx_dir)
        for name in ("encoder_model", "decoder_model_merged"):
            (onnx_dir / f"{name}.onnx").unlink()
    # what transformers.js reads of config.json: the model class and the sizes of the caches
    config = marian.config_json(cfg.model, vocab_size=len(pieces), pad=PAD, eos=EOS, start=BOS)
    config.pop("forced_eos_token_id", None)
    web_onnx.write_json(folder / "config.json", config)
    generation = {
        "decoder_start_token_id": BOS,
        "eos_token_id": EOS,
        "pad_token_id": PAD,
        "num_beams": 1,
        "do_sample": False,
        "max_length": cap + 2,  # the start token, the tokens, EOS: the graph ends every sentence before
    }
    web_onnx.write_json(folder / "generation_config.json", generation)
    spm = tokenizer.model_bytes()["src"]  # cuts the sources; the target's text is its pieces' with spaces for marks
    web_onnx.write_json(folder / "tokenizer.json", web_onnx.tokenizer_json(spm, vocab, special, tags))
    web_onnx.write_json(
        folder / "tokenizer_config.json", web_onnx.tokenizer_config(vocab, special, cfg.model.max_positions)
    )
    return {
        "model_bytes": sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()),
        # the source language's tag, which the page writes before every source as mtkit does (data.source_tag)
        "source_prefix": direction.source_prefix,
    }


# ------------------------------------------------------------------------------------------ the site
def page_files() -> dict[str, bytes]:
    """The page: this package's index.html and page.js, and the style sheet of ``mtkit serve``'s page (read as a
    file, so the two pages look alike and no serving module is imported)."""
    here = Path(__file__).parent / "web_page"
    out = {name: (here / name).read_bytes() for name in PAGE_FILES}
    out["page.css"] = (Path(__file__).parents[1] / "serving" / "page" / "page.css").read_bytes()
    return out


def _check_out(out: Path, force: bool) -> None:
    if not out.exists():
        return
    if not force:
        raise MtkitError(f"{out}: already exists; pass --force to replace it")
    if not out.is_dir() or (any(out.iterdir()) and not (out / SITE_META).is_file()):
        raise MtkitError(
            f"{out}: exists and is not a web export; --force only replaces an earlier export (choose another --output)"
        )


def export_main(
    *,
    run: Path,
    out: Path,
    quantization: Optional[str],
    force: bool,
    source: Optional[str] = None,
    target: Optional[str] = None,
    npm_dir: Optional[Path] = None,
) -> Path:
    """``mtkit export --format web``: write the static site of a run's checkpoint to ``out``, whole or not at all.

    Args:
        run: the run dir or checkpoint file (the checkpoint as translate picks it).
        out: the site's folder.
        quantization: ``float32`` (None: the default) or ``int8``.
        force: replace an earlier web export at ``out``.
        source: ``--source`` (a multilingual run with several sources), or None.
        target: ``--target`` (a multilingual run), or None.
        npm_dir: a folder holding the npm tarballs, instead of the registry and the cache.

    Returns:
        ``out``.

    Raises:
        MtkitError: a quantization other than ``QUANTIZATIONS``, ``out`` exists (without ``force``, or is not a
            web export), a run the web path cannot express (an RNN, pre-norm, positions other than sinusoidal, an
            SSRU decoder, separate vocabularies, an imported M2M-100 or NLLB-200 model), languages that do not make
            one direction, or the npm files cannot be had (``tarball``).
    """
    from mtkit import checkpoint as ckpt
    from mtkit.interop.argos_export import package_languages

    quantization = quantization or "float32"
    if quantization not in QUANTIZATIONS:
        raise MtkitError(f"--quantization {quantization!r}: --format web writes {' or '.join(QUANTIZATIONS)}")
    out = Path(out)
    _check_out(out, force)
    file = ckpt.resolve(Path(run))
    cfg = cfgmod.from_dict(ckpt.read_metadata(file)["config"], f"{file} (embedded config)")
    _check_run(cfg, str(file))
    direction = package_languages(cfg.data, source, target)
    try:
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError as err:
        raise MtkitError(f'--format web needs {err.name}: pip install "mtkit[web]"') from None
    scripts = npm_files(npm_dir)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.web-{os.getpid()}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        model = model_files(file, cfg, direction, quantization, tmp / MODEL_DIR)
        size = model["model_bytes"]
        for name, blob in {**page_files(), **scripts}.items():
            (tmp / name).write_bytes(blob)
        meta = {
            "source": direction.source,
            "target": direction.target,
            "source_name": language_name(direction.source),
            "target_name": language_name(direction.target),
            "quantization": quantization,
            "dtype": "q8" if quantization == "int8" else "fp32",
            "model": MODEL_DIR.split("/")[-1],
            **model,
            "max_new_tokens": cfg.model.max_positions,  # the graph ends every sentence first (web_onnx)
            "max_source": cfg.model.max_positions,  # subwords of a source, EOS included; the page cuts longer ones
            "transformers_js": TRANSFORMERS_JS.version,
            "onnxruntime_web": ONNXRUNTIME_WEB.version,
        }
        (tmp / SITE_META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        fsync_tree(tmp)
        replace_dir(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(
        f"exported {file} to {out}: a web page translating {direction.source} -> {direction.target} in the browser "
        f"({quantization}, model {size / 2**20:.1f} MiB); serve it with mtkit serve --web {out} (docs/browser.md)"
    )
    return out
