"""`mtkit merge-lora`: a LoRA run's adapters merged into its base weights, as a run directory of its own."""

from __future__ import annotations

from pathlib import Path

from mtkit import checkpoint as ckpt
from mtkit.errors import MtkitError

MERGED_CHECKPOINT = "ckpt_0000000.safetensors"


def merge_main(run: Path, out: Path, force: bool = False) -> Path:
    """`mtkit merge-lora`: a run directory whose one checkpoint holds ``run``'s adapters merged into its base weights.

    The new run translates, serves, exports and fine-tunes (``model.init_from``) as any run, without PEFT and without
    the base run. Its config is ``run``'s without ``training.lora`` and ``model.init_from``.

    Args:
        run: a LoRA run directory or checkpoint (the checkpoint translate would use).
        out: the new run directory.
        force: replace an earlier ``out`` that is a run directory.

    Returns:
        ``out``.

    Raises:
        MtkitError: ``run`` holds no LoRA checkpoint, ``out`` exists (without ``force``), or what loading raises.
    """

    from mtkit import config as cfgmod
    from mtkit.files import check_new_run_dir

    file = ckpt.resolve(Path(run))
    if not ckpt.read_metadata(file).get("lora"):
        raise MtkitError(f"{file}: holds no LoRA adapters (training.lora); its weights are whole already")
    out = Path(out)
    check_new_run_dir(out, force)
    loaded = ckpt.load_checkpoint(file)  # the adapters merged into the base weights
    tree = cfgmod.to_dict(loaded.config)
    tree["model"]["init_from"] = None
    if tree.get("training"):
        tree["training"]["lora"] = None
        tree["training"]["run_dir"] = str(out)
    cfg = cfgmod.from_dict(tree)
    meta = {k: v for k, v in loaded.metadata.items() if k != "lora"}
    meta.update(config=cfgmod.to_dict(cfg), merged_from=str(file))
    bundle = ckpt.Bundle(meta, loaded.model.state_dict(), loaded.tokenizer.model_bytes())
    ckpt.save_run(out, cfg, loaded.tokenizer, bundle, MERGED_CHECKPOINT, "merge")
    layers = len(loaded.metadata["lora"]["layers"])
    print(f"merged the LoRA adapters of {layers} layers of {file} into its base weights -> {out}")
    return out
