"""How `mtkit train` starts: the config of a new or resumed run (``--resume`` checks what may change), and
``--gpus N``, which relaunches the command under torchrun on this machine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Optional

import torch

from mtkit import checkpoint as ckpt
from mtkit import config as cfgmod
from mtkit.errors import MtkitError
from mtkit.training import distributed as distmod
from mtkit.training.board import writer_class
from mtkit.training.loop import Trainer

STOP_KEYS = {
    "max_updates",
    "max_epochs",
    "max_minutes",
    "patience",
    "validate_every",
    "save_every",
    "log_every",
    "keep_last",
    "keep_best",
    "average_last",
    "valid_max_sentences",
    "tensorboard",
    "threads",
    "compile",
    "devices",
    "run_dir",
}


def _differences(a: dict, b: dict, prefix: str = "") -> list[str]:
    keys = sorted(set(a) | set(b))
    out = []
    for k in keys:
        path = f"{prefix}{k}"
        if isinstance(a.get(k), dict) and isinstance(b.get(k), dict):
            out += _differences(a[k], b[k], path + ".")
        elif a.get(k) != b.get(k) and not (prefix == "training." and k in STOP_KEYS):
            out.append(path)
    return out


def resolve_config(config: Optional[Path], overrides: list[str], resume: Optional[Path], force: bool):
    """The config of the run to train, and whether it resumes.

    With ``resume`` the run's saved config is the base. A CONFIG given too must match it, and so must the
    ``overrides``, but for the stopping and logging keys (``STOP_KEYS``); ``force`` accepts any difference.

    Args:
        config: the CONFIG file, or None.
        overrides: the ``--set KEY=VALUE`` items.
        resume: the run dir of ``--resume``, or None for a new run.
        force: ``--force``.

    Returns:
        (config, resuming).

    Raises:
        MtkitError: no config at all, a new run in a run dir that holds checkpoints, a run dir without
            config.yaml, or a config that differs from the run's without ``force``.
    """
    if resume is None:
        if config is None:
            raise MtkitError("give a CONFIG file, or --resume RUN_DIR to continue a run")
        cfg = cfgmod.load(config, overrides)
        if cfg.training is None:
            raise MtkitError(f"{config}: missing section 'training' (at least training.run_dir)")
        run_dir = Path(cfg.training.run_dir)
        if ckpt.list_checkpoints(run_dir / "checkpoints"):
            raise MtkitError(
                f"{run_dir}: already holds checkpoints; continue it with "
                f"'mtkit train --resume {run_dir}' or set another training.run_dir"
            )
        return cfg, False
    saved_path = Path(resume) / "config.yaml"
    if not saved_path.is_file():
        raise MtkitError(f"{resume}: not a run directory (no config.yaml); start it with mtkit train CONFIG")
    saved = cfgmod.load(saved_path, overrides)
    if config is None and overrides and not force:
        diff = _differences(cfgmod.to_dict(cfgmod.load(saved_path, [])), cfgmod.to_dict(saved))
        if diff:
            raise MtkitError(
                f"--set changes the run's config {saved_path} at {', '.join(diff[:4])}; only stopping "
                "and logging keys may change on resume: add --force to resume with it anyway"
            )
    if config is not None:
        given = cfgmod.load(config, overrides)
        diff = _differences(cfgmod.to_dict(saved), cfgmod.to_dict(given))
        if diff and not force:
            raise MtkitError(
                f"{config}: differs from the run's config {saved_path} at {', '.join(diff[:4])}; "
                "drop CONFIG to resume as saved, or add --force to resume with it"
            )
        saved = given
    if saved.training is None:
        raise MtkitError(f"{saved_path}: missing section 'training'")
    if Path(saved.training.run_dir).resolve() != Path(resume).resolve():
        saved = cfgmod.from_dict(cfgmod.apply_overrides(cfgmod.to_dict(saved), [f"training.run_dir={resume}"]))
    return saved, True


def train_main(*, config: Optional[Path], overrides: list[str], resume: Optional[Path], force: bool, gpus: int):
    """`mtkit train`: resolve the config, then train here or relaunch under torchrun for ``gpus`` > 1.

    Returns:
        The run's config.

    Raises:
        MtkitError: what ``resolve_config``, ``launch_torchrun`` or the ``Trainer`` raise.
    """
    cfg, resuming = resolve_config(config, overrides, resume, force)  # config errors once, before any launch
    if cfg.training.tensorboard:  # a missing package fails here, before any launch or update
        writer_class(str(config if config is not None else Path(resume) / "config.yaml"))
    if gpus > 1 and "LOCAL_RANK" not in os.environ:
        launch_torchrun(gpus, cfg, config=config, overrides=overrides, resume=resume, force=force)
        return cfg
    Trainer(cfg, resuming=resuming).run()
    return cfg


def launch_torchrun(
    nproc: int, cfg, *, config: Optional[Path], overrides: list[str], resume: Optional[Path], force: bool
) -> None:
    """Run `mtkit train` again as ``nproc`` processes under `torchrun --standalone` on this machine.

    With training.devices cpu (or auto without a GPU) the processes train on the CPU over gloo. A SIGTERM is
    passed on to torchrun, which passes it on to the workers; they save and stop.

    Raises:
        MtkitError: more processes than visible CUDA GPUs, or torchrun exited with an error.
        KeyboardInterrupt: the workers were interrupted (they said where they stopped and how to resume).
    """
    device = distmod.pick_device(cfg.training.devices)
    if device.type == "cuda" and nproc > torch.cuda.device_count():
        raise MtkitError(
            f"--gpus {nproc}: only {torch.cuda.device_count()} CUDA GPU(s) visible; "
            f"use --gpus {torch.cuda.device_count()} or set training.devices: cpu"
        )
    args = ["train"] + ([str(config)] if config is not None else [])
    args += [a for item in overrides for a in ("--set", item)]
    args += (["--resume", str(resume)] if resume is not None else []) + (["--force"] if force else [])
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}", "-m", "mtkit"]
    proc = subprocess.Popen(cmd + args)
    interrupted = []

    def forward(signum, frame):  # torchrun passes it on to the workers, which save and stop
        interrupted.append(signum)
        proc.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    while True:
        try:
            code = proc.wait()
            break
        except KeyboardInterrupt:  # the workers got the same Ctrl-C: wait while they save and stop
            interrupted.append(signal.SIGINT)
    if interrupted:
        raise KeyboardInterrupt  # the workers said where they stopped and how to resume
    if code:
        raise MtkitError(f"torchrun exited with code {code}; see the messages of the failing rank above")
