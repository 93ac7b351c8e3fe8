"""Fine-tuning: a new run that starts from another run's weights and vocabulary (``model.init_from: RUN``).

The config's model section is RUN's (``config.load`` fills it in: only the dropouts may change), `mtkit prepare`
encodes the corpus with RUN's tokenizer, and `mtkit train` starts from the checkpoint translate would use in RUN
(an imported Marian model's, or a trained run's). A data dir prepared with another vocabulary is refused before
any update, so a vocabulary mismatch cannot reach the weights; a resumed run continues from its own checkpoints.
"""

from __future__ import annotations

from pathlib import Path

from mtkit import checkpoint as ckpt
from mtkit import config as cfgmod
from mtkit import lora
from mtkit.config import INIT_FROM_OWN_KEYS
from mtkit.errors import MtkitError
from mtkit.tokenizer import Tokenizer


def start_from(cfg: cfgmod.Config, model, tokenizer: Tokenizer) -> Path:
    """Load the weights of the run ``cfg.model.init_from`` into ``model``.

    Args:
        cfg: the new run's config; ``model`` was built from it.
        model: the model to fill.
        tokenizer: the new run's tokenizer; it must be the one of init_from.

    Returns:
        The checkpoint the weights came from.

    Raises:
        MtkitError: another vocabulary, a model section that differs from the checkpoint's, or an unreadable
            checkpoint.
    """
    run = Path(cfg.model.init_from)
    file = ckpt.resolve(run)
    bundle = ckpt.load(file)
    if Tokenizer.from_model_bytes(bundle.tokenizer).fingerprint() != tokenizer.fingerprint():
        raise MtkitError(
            f"{cfg.data.dir}: was prepared with another vocabulary than model.init_from {run}; rerun "
            "`mtkit prepare CONFIG --force`, which encodes the corpus with that run's tokenizer"
        )
    theirs = cfgmod.from_dict(bundle.metadata["config"], f"{file} (embedded config)").model.model_dump()
    ours = cfg.model.model_dump()
    for key, value in ours.items():
        if key not in INIT_FROM_OWN_KEYS and theirs.get(key) != value:
            raise MtkitError(
                f"model.{key} = {value!r} differs from {theirs.get(key)!r} of model.init_from {file}; "
                f"its config.yaml does not match its checkpoint"
            )
    weights = ckpt.whole_weights(file) if bundle.metadata.get("lora") else bundle.model  # a LoRA run's: merged
    if any(lora.is_adapter(name) for name in model.state_dict()):  # training.lora: the base under the adapters
        ckpt.load_base_weights(model, weights, file)
    else:
        ckpt.load_weights(model, weights, file)
    print(f"starting from {file} (model.init_from)")
    return file
