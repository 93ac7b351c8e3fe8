"""Building an engine from what ``mtkit.load`` is given: ``ct2_engine`` for a CTranslate2 export (or a run converted
on the fly), ``torch_engine`` for a run dir or checkpoints (int8 where it pays, a shortlist where asked)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from mtkit.errors import MtkitError
from mtkit.inference.options import Options
from mtkit.interop import ct2_export as ct2
from mtkit.languages import run_languages, run_sources

if TYPE_CHECKING:
    from mtkit.inference.ct2_engine import Ct2Engine
    from mtkit.inference.torch_engine import TorchEngine


def ct2_engine(paths: list[Path], overrides: dict) -> "Ct2Engine":
    """The CTranslate2 engine for an export dir (``mtkit export``), or for a run dir / checkpoint converted on the
    fly; ``overrides["dtype"]`` is CTranslate2's compute type (default: the type the model was exported with)."""
    from mtkit.inference.ct2_engine import Ct2Engine

    if len(paths) > 1:
        raise MtkitError("--engine ctranslate2 translates with one model; ensembles (--checkpoint) need --engine torch")
    ct2.import_ctranslate2()
    path, tmp = Path(paths[0]), None
    try:
        if ct2.is_export_dir(path):
            model_dir = path
        else:  # a run dir or checkpoint: convert to a temporary dir, which CTranslate2 reads once
            tmp = Path(tempfile.mkdtemp(prefix="mtkit-ct2-"))
            model_dir = tmp / "model"
            ct2.convert(path, model_dir, None)
        meta, tokenizer = ct2.read_export(model_dir)
        facts = meta.get("runtime")
        if facts is None:  # written before exports recorded it: from the embedded config, through the schema
            from mtkit import config as cfgmod

            facts = ct2.runtime_facts(cfgmod.from_dict(meta["config"], f"{model_dir} (embedded config)"))
        options = Options.build(facts["decoding"], **overrides)
        engine = Ct2Engine(
            model_dir, tokenizer, options, max_positions=meta["max_positions"], in_memory=tmp is not None
        )
        engine.languages, engine.targets = tuple(facts["languages"]), tuple(facts["targets"])
        engine.target_tag, engine.tag_template = facts["target_tag"], facts["tag_template"]
        engine.source_tag = bool(facts.get("source_tag", False))
        engine.sources = tuple(facts.get("sources", ()))
        return engine
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)


def int8_kernels(device) -> bool:
    """Whether ``device`` is a CPU whose PyTorch has the x86 int8 kernels (fbgemm / x86: AVX2 and up); elsewhere
    (GPUs, ARM CPUs) ``dtype: auto`` is float32 without measuring."""
    import torch

    return device.type == "cpu" and torch.backends.quantized.engine in ("x86", "fbgemm")


def torch_engine(paths: list[Path], overrides: dict) -> "TorchEngine":
    """The torch engine for a run dir or checkpoint, ensembled with any further ones (``--checkpoint``). torch is
    imported here, not with this module: the CTranslate2 engine runs without it."""
    import torch

    from mtkit import checkpoint as ckpt
    from mtkit import config as cfgmod
    from mtkit.decoding.shortlist import Shortlisted, check_model, load_lexicon
    from mtkit.devices import float32_matmuls, pick_device
    from mtkit.inference.kernels import choose_cpu_dtype
    from mtkit.inference.torch_engine import Ensemble, TorchEngine
    from mtkit.memory import keep_freed_memory
    from mtkit.models.int8 import quantize_int8

    first_file = ckpt.resolve(paths[0])
    meta_cfg = cfgmod.from_dict(ckpt.read_metadata(first_file)["config"], str(first_file))
    options = Options.build(meta_cfg.decoding, **overrides)
    if options.threads:
        torch.set_num_threads(options.threads)
    device = pick_device(options.device)
    float32_matmuls(device, tf32=True)  # float32 decoding on a GPU multiplies in TF32 (a CPU is left as it is)
    if device.type == "cpu":
        keep_freed_memory()
    choice = None
    if options.dtype == "auto":  # float weights first: the kernels are timed on their shapes, then int8 if it pays
        loaded = [ckpt.load_checkpoint(p, device, torch.float32) for p in paths]
        choice = choose_cpu_dtype(loaded[0].model) if int8_kernels(device) else None
        dtype_name = choice.dtype if choice is not None else "float32"
        if dtype_name == "int8":
            for item in loaded:
                item.model = quantize_int8(item.model)
    else:
        dtype_name = options.dtype
        options.check_device(device.type, dtype_name)
        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "int8": torch.qint8}
        loaded = [ckpt.load_checkpoint(p, device, dtype[dtype_name]) for p in paths]
    tokenizer = loaded[0].tokenizer
    for other in loaded[1:]:
        if other.tokenizer.fingerprint() != tokenizer.fingerprint():
            raise MtkitError(
                f"{other.path}: uses another tokenizer than {loaded[0].path}; ensembles need one vocabulary"
            )
    model = loaded[0].model if len(loaded) == 1 else Ensemble([x.model for x in loaded])
    if options.shortlist:
        check_model(model)
        run_dir = first_file.parent.parent if first_file.parent.name == "checkpoints" else first_file.parent
        lexicon = load_lexicon(run_dir, Path(meta_cfg.data.dir), tokenizer)
        model = Shortlisted(
            model,
            lexicon,
            per_source=options.shortlist,
            frequent=options.shortlist_frequent,
            copy_source=meta_cfg.data.joint_vocab,
        )
    engine = TorchEngine(model, tokenizer, options, device)
    engine.dtype_name = dtype_name
    engine.dtype_reason = (
        choice.reason()
        if choice is not None
        else f"dtype {options.dtype}" + (" -> float32: no x86 int8 kernels here" if options.dtype == "auto" else "")
    )
    engine.languages, engine.targets = run_languages(meta_cfg.data)
    engine.target_tag, engine.tag_template = meta_cfg.data.target_tag, meta_cfg.data.tag_template
    engine.source_tag = meta_cfg.data.source_tag
    engine.sources = run_sources(meta_cfg.data)
    return engine
