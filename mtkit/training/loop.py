"""The training loop of `mtkit train`: the ``Trainer`` repeats ``step.train_step``, one update each time.

Each update takes token batches from length buckets. ``train_step`` runs the label-smoothed loss fused with the
output projection, accumulates gradients (under no_sync with DDP), clips them and steps Adam at the learning rate
of a pure schedule. Every so many updates the loop validates (loss, BLEU, chrF through the search code) and saves
an atomic safetensors checkpoint that resumes bit for bit. The run's counters are a ``state.TrainState``.
How a run starts (its config, --resume, torchrun) is ``mtkit.training.launch``.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time
from pathlib import Path
from typing import Optional

import torch
from torch.nn.parallel import DistributedDataParallel

from mtkit import checkpoint as ckpt
from mtkit import config as cfgmod
from mtkit import lora
from mtkit.data.batches import ParallelData, direction_sample, make_batches, shard_batches
from mtkit.devices import float32_matmuls
from mtkit.errors import MtkitError
from mtkit.files import RunLock, atomic_write_bytes, atomic_write_text, remove_stale_temps
from mtkit.manifest import MANIFEST, read_manifest
from mtkit.memory import keep_freed_memory
from mtkit.models import build_model
from mtkit.plots import plot_curves
from mtkit.tokenizer import Tokenizer
from mtkit.training import distributed as distmod
from mtkit.training import state as state_mod
from mtkit.training.board import Board, open_board
from mtkit.training.console import Progress, Window, append_jsonl, print_summary, trim_metrics
from mtkit.training.finetune import start_from
from mtkit.training.optim import learning_rate, make_optimizer, model_width
from mtkit.training.state import TrainState
from mtkit.training.step import BatchFeed, StepPlan, TeacherForcing, settle, train_step
from mtkit.training.validate import ValidationResult, over_directions, validate, validation


class Trainer:
    """One training run: its data, model, optimizer and state, and the loop over them.

    Args:
        cfg: the run's config.
        resuming: continue from the run's newest checkpoint (``--resume``) when ``run`` starts.

    Raises:
        MtkitError: the data dir is not prepared, or fp16 is asked for without CUDA.
    """

    def __init__(self, cfg: cfgmod.Config, *, resuming: bool = False):
        self.cfg, self.t = cfg, cfg.training
        self.run_dir = Path(self.t.run_dir)
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.resuming = resuming
        if self.t.threads:
            torch.set_num_threads(self.t.threads)
        self.dist = distmod.setup(self.t.devices)
        self.device = self.dist.device
        self.matmuls = float32_matmuls(self.device, self.t.tf32)  # "tf32" or "fp32": the summary table shows it
        if self.device.type == "cpu":
            keep_freed_memory()
        data_dir = Path(cfg.data.dir)
        if not (data_dir / MANIFEST).is_file():
            raise MtkitError(f"{data_dir}: no prepared data (manifest.json missing); run 'mtkit prepare CONFIG' first")
        self.manifest = read_manifest(data_dir)
        self.tokenizer = Tokenizer.from_dir(data_dir)
        self.train_data = ParallelData(data_dir, "train")
        self.plan = StepPlan.for_device(self.device)  # how an update suits the device (step.py)
        self._feed: Optional[BatchFeed] = None
        valid = [s for s in self.manifest.get("splits", {}) if s == "valid" or s.startswith("valid.")]
        self.valid_data = {s: ParallelData(data_dir, s) for s in valid} or None  # valid.en-de: one direction
        if self.t.calibrate and "valid" not in self.manifest.get("splits", {}):
            raise MtkitError(
                f"{data_dir}: training.calibrate fits the confidence on the valid split, which this data dir lacks; "
                "add data.splits.valid and rerun `mtkit prepare`, or set training.calibrate false"
            )
        torch.manual_seed(self.t.seed + self.dist.rank)
        self.model = build_model(
            cfg.model, self.tokenizer.src_vocab_size, self.tokenizer.tgt_vocab_size, self.tokenizer.joint
        ).to(self.device)
        # training.lora: adapters on the model now (the base weights come in _start), only they train
        self.lora_layers = lora.inject(self.model, self.t.lora) if self.t.lora is not None else None
        self.lora_meta: Optional[dict] = None  # the checkpoints' "lora" entry, once the base is known
        if self.t.freeze_embeddings:
            lora.freeze_embeddings(self.model)
        if self.t.gradient_checkpointing:
            self.model.checkpoint_layers = True
        self.net = TeacherForcing(self.model)  # compiled and DDP-wrapped by run()
        self.optimizer = make_optimizer(self.model, self.t, self.lr_at(1))
        self.scaler = (
            torch.amp.GradScaler("cuda") if self.t.precision == "fp16" and self.device.type == "cuda" else None
        )
        if self.t.precision == "fp16" and self.device.type != "cuda":
            raise MtkitError(cfgmod.FP16_NEEDS_CUDA)
        self.state = TrainState()  # restored by run() on --resume
        self.stop_signal: Optional[str] = None  # the name of the first SIGINT / SIGTERM received
        self.board: Optional[Board] = None  # the TensorBoard writer of training.tensorboard (main rank, in run())

    # -- set-up -------------------------------------------------------------------------------------
    @property
    def feed(self) -> BatchFeed:
        """The training batches collated as ``plan`` says (made on first use, so a test may change the plan)."""
        if self._feed is None or self._feed.plan != self.plan:
            if self._feed is not None:
                self._feed.close()
            self._feed = BatchFeed(self.train_data, self.device, self.plan)
        return self._feed

    def lr_at(self, update: int, elapsed: float = 0.0) -> float:
        """The learning rate of update number ``update`` (from 1) after ``elapsed`` training seconds."""
        return learning_rate(update, self.t, model_width(self.cfg.model), elapsed)

    def autocast(self):
        """The autocast context of training.precision (none for fp32)."""
        if self.t.precision == "fp32":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.t.precision == "bf16" else torch.float16
        return torch.autocast(self.device.type, dtype=dtype)

    # -- checkpoints ------------------------------------------------------------------------------
    def save_checkpoint(self, valid: Optional[dict]) -> None:
        """Save ckpt_UPDATE.safetensors and prune the older ones (a collective: every rank calls it).

        Args:
            valid: the metrics of a validation at this update, or None.
        """
        bundle = state_mod.bundle(self, valid)  # gathers every rank's RNG state
        if self.dist.is_main:
            ckpt.save(self.ckpt_dir / f"ckpt_{self.state.update:07d}.safetensors", bundle)
            self.prune_checkpoints()
        distmod.barrier(self.dist)

    def save_best(self, valid: dict) -> None:
        """Save best.safetensors: the weights and state now, without the optimizer (main rank only)."""
        ckpt.save(self.ckpt_dir / "best.safetensors", state_mod.bundle(self, valid, train=False))

    def prune_checkpoints(self) -> None:
        """Delete the numbered checkpoints that training.keep_last and training.keep_best do not keep."""
        ckpt.prune(
            self.ckpt_dir,
            keep_last=self.t.keep_last,
            keep_best=self.t.keep_best if self.valid_data is not None else 0,
            best_metric=self.t.best_metric,
        )

    def restore(self) -> bool:
        """Continue from the newest checkpoint that loads; a run without one starts at update 0 (returns False).

        Raises:
            MtkitError: every checkpoint is damaged, or the newest one does not fit this run.
        """
        path, bundle, errors = ckpt.load_latest(self.ckpt_dir)
        if bundle is None:
            if self.dist.is_main:
                print(f"no checkpoint in {self.ckpt_dir} yet: starting from update 0")
            return False
        if self.dist.is_main:
            for err in errors:
                print(f"mtkit: warning: {err} -- resuming from {path.name} instead", file=sys.stderr)
        self.state = state_mod.restore(self, path, bundle)
        saved_world = bundle.metadata.get("world_size", 1)
        if self.dist.is_main:
            moved = (
                f" ({saved_world} -> {self.dist.world_size} processes)" if saved_world != self.dist.world_size else ""
            )
            print(f"resumed from {path.name}: update {self.state.update}, epoch {self.state.epoch}{moved}")
        return True

    def validate(self) -> dict:
        """``validate.validate``'s metrics of the model now on the valid split (each direction's, for a
        multilingual model: ``validate.over_directions``)."""
        if list(self.valid_data) == ["valid"]:
            return validate(self.model, self.valid_data["valid"], self.tokenizer, self.cfg, self.device, self.autocast)
        return over_directions(
            {
                s.partition(".")[2] or s: validate(self.model, d, self.tokenizer, self.cfg, self.device, self.autocast)
                for s, d in self.valid_data.items()
            }
        )

    def validate_and_record(self, metrics_path: Path, progress: Progress) -> Optional[ValidationResult]:
        """Validate, keep the best score and the patience counter, save best.safetensors and log the record.

        Every rank calls it and ends with the same state. Returns None without a valid split.
        """
        if self.valid_data is None:
            return None
        s = self.state
        result = validation(self.validate, update=s.update, best=s.best, cfg=self.cfg, dist=self.dist)
        s.record_validation(result.improved, result.score)
        if self.dist.is_main:
            if result.improved:
                self.save_best(result.metrics)
            record = {"kind": "valid", "update": s.update, "epoch": s.epoch, "elapsed": s.elapsed}
            record = {**record, "best": result.improved, **result.metrics}
            append_jsonl(metrics_path, record)
            if self.board is not None:
                self.board.valid(record)
            progress.log(record)
        return result

    # -- the loop ------------------------------------------------------------------------------------
    def run(self) -> None:
        """Train until a stop condition, validating and saving on the way; the run dir stays locked meanwhile.

        Raises:
            MtkitError: any failure a user can act on. Under DDP, a rank whose partner failed names the resume
                command.
        """
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self.ckpt_dir.mkdir(exist_ok=True)
        except OSError as err:
            raise MtkitError(
                f"{self.run_dir}: cannot create the run directory ({err.strerror or err}); "
                "choose another training.run_dir"
            ) from None
        lock = RunLock(self.run_dir) if self.dist.is_main else contextlib.nullcontext()
        handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
        with lock:
            if self.dist.is_main:
                remove_stale_temps(self.ckpt_dir)
                remove_stale_temps(self.run_dir)
            finished = False
            try:
                self._run()
                finished = True
            except RuntimeError as err:
                if not (self.dist.enabled and distmod.peer_lost(err)):
                    raise
                first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
                raise MtkitError(
                    f"rank {self.dist.rank}: another process of this run failed or stopped answering "
                    f"({first[:200]}); its own error is above. Continue from the last checkpoint "
                    f"with: mtkit train --resume {self.run_dir}"
                ) from None
            finally:
                for s, h in handlers.items():
                    if h is not None:
                        signal.signal(s, h)
                if self._feed is not None:
                    self._feed.close()
                if self.board is not None:  # what is queued reaches the event file, also on an interrupt
                    self.board.close()
                    self.board = None
                distmod.teardown(self.dist, wait=finished)

    def _install_signal_handlers(self):
        """A first SIGINT / SIGTERM asks the loop to save and stop after the update; a second one stops at once."""
        first_at = [0.0]

        def handler(signum, frame):
            # torchrun passes a Ctrl-C on to its workers, which also got it from the terminal: a repeat within
            # a second is that echo, not a second request
            if self.stop_signal is not None and time.monotonic() - first_at[0] > 1.0:  # second signal: stop now
                raise KeyboardInterrupt
            if self.stop_signal is None:
                self.stop_signal, first_at[0] = signal.Signals(signum).name, time.monotonic()

        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, handler)

    def _run(self) -> None:
        """The loop: update, log, validate, save, until a stop condition holds."""
        t, d = self.t, self.dist
        self._start()
        s = self.state  # the restored one on --resume
        metrics_path = self.run_dir / "metrics.jsonl"
        progress = Progress(enabled=d.is_main, total=t.max_updates, start=s.update)
        batches = self.epoch_batches()
        window = Window()
        run_start = time.perf_counter() - s.elapsed
        last_validated = last_saved = s.update if self.resuming else -1
        finished = None
        if t.max_updates and s.update >= t.max_updates:  # resuming a finished run trains nothing more
            finished = f"max_updates={t.max_updates} already reached"
        while finished is None:
            if s.position >= len(batches):  # the epoch is done
                if t.max_epochs and s.epoch + 1 > t.max_epochs:
                    s.position, finished = len(batches), f"max_epochs={t.max_epochs}"
                    break
                s.next_epoch()
                self.feed.drop()
                batches = self.epoch_batches()
            group = batches[s.position : s.position + t.update_freq]
            self.feed.ahead(batches[s.position + t.update_freq : s.position + 2 * t.update_freq])
            step = train_step(self, group, votes=lambda: self.stop_votes(run_start))
            s.advance(len(group), time.perf_counter() - run_start)
            window.add(step, d.world_size)
            stop, signalled = self.stop_reason(step.votes)
            validating = s.update % t.validate_every == 0 or (stop and not signalled and s.update != last_validated)
            saving = s.update % (t.save_every or t.validate_every) == 0 or stop
            if s.update % t.log_every == 0 or validating or saving:
                settle(window, self)  # losses kept on the device are read (and checked) before anything is saved
            if s.update % t.log_every == 0 and d.is_main:
                record = window.record(s.update, s.epoch, step.lr, s.elapsed)
                append_jsonl(metrics_path, record)
                if self.board is not None:
                    self.board.train(record)
                progress.log(record)
            progress.advance(s.update)
            valid = None
            if validating:
                result = self.validate_and_record(metrics_path, progress)
                valid = result.metrics if result else None
                last_validated = s.update
                if t.patience and s.bad_validations >= t.patience:
                    stop = stop or f"no improvement in {t.patience} validations (patience)"
            if (saving or stop) and s.update != last_saved:
                self.save_checkpoint(valid)
                last_saved = s.update
            finished = stop
        progress.close()
        if s.update != last_saved:
            self.save_checkpoint(None)
        if d.is_main:
            self._finish(finished)

    def _start(self) -> None:
        """Restore a resumed run, write its config and tokenizer, show the summary, wrap the model for training."""
        t, d = self.t, self.dist
        restored = self.restore() if self.resuming else False
        if not restored and self.cfg.model.init_from:  # a new run, or one stopped before its first checkpoint
            base = start_from(self.cfg, self.model, self.tokenizer)
            if self.lora_layers is not None:
                self.lora_meta = lora.metadata(self.t.lora, self.lora_layers, base)
        # each rank read the run dir on its own machine: a stale copy on one of them restores another update
        if not distmod.same_on_all_ranks(self.state.update, d):
            raise MtkitError(
                f"{self.ckpt_dir}: the {d.world_size} processes found different latest checkpoints; "
                "on several machines training.run_dir must be one shared directory"
            )
        if d.is_main:
            atomic_write_text(self.run_dir / "config.yaml", cfgmod.dump(self.cfg))
            self.tokenizer.save(self.run_dir, atomic_write_bytes)
            if self.resuming:
                trim_metrics(self.run_dir / "metrics.jsonl", self.state.update)
            # TensorBoard continues from the same update: what a killed run wrote past it is dropped
            self.board = open_board(self.cfg, self.state.update, str(self.run_dir / "config.yaml"))
            print_summary(self.cfg, self.model, self.manifest, self.dist, self.matmuls)
        if t.compile:
            self.net = torch.compile(self.net)
        if d.enabled:
            self.net = DistributedDataParallel(
                self.net, device_ids=[self.device.index] if self.device.type == "cuda" else None
            )
        self.model.train()
        self._install_signal_handlers()

    def epoch_batches(self) -> list:
        """This rank's batches of the state's epoch; the epoch's sampled segmentation is read where prepare wrote one.

        Raises:
            MtkitError: the corpus has no batch for this rank.
        """
        data, t, d = self.train_data, self.t, self.dist
        epoch, m = self.state.epoch, self.plan.multiple
        data.use_epoch(epoch)
        if self.cfg.data.temperature != 1.0:  # a multilingual model's directions, sampled by temperature
            side = "src" if self.manifest.get("target_tag", "source") == "source" else "tgt"
            idx = direction_sample(data.first_tokens(side), self.cfg.data.temperature, seed=t.seed, epoch=epoch)
            inner = make_batches(
                data.src_lengths[idx], data.tgt_lengths[idx], t.batch_tokens, seed=t.seed, epoch=epoch, multiple=m
            )
            batches = [idx[b] for b in inner]
        else:
            batches = make_batches(
                data.src_lengths, data.tgt_lengths, t.batch_tokens, seed=t.seed, epoch=epoch, multiple=m
            )
        batches = shard_batches(batches, d.rank, d.world_size)
        if not batches:
            raise MtkitError(
                f"{self.cfg.data.dir}: no training batch for rank {d.rank}; the corpus is too small for "
                f"{d.world_size} processes"
            )
        return batches

    def stop_votes(self, run_start: float) -> tuple[float, float, float]:
        """This rank's stop votes: (it wants to stop, it got a signal), each 0.0 or 1.0, and its training seconds.

        ``train_step`` sums them over the ranks with the update's losses, so that every rank stops after the same
        update and takes the same learning rate (the ranks' mean time, where the schedule follows the clock).
        ``run_start`` is the ``time.perf_counter()`` the run's training time counts from.
        """
        t = self.t
        elapsed = time.perf_counter() - run_start
        time_up = t.max_minutes is not None and elapsed / 60 >= t.max_minutes
        return 1.0 if (time_up or self.stop_signal) else 0.0, 1.0 if self.stop_signal else 0.0, elapsed

    def stop_reason(self, votes: list[float]) -> tuple[Optional[str], bool]:
        """Why to stop after this update (None: go on), and whether a signal asked for it.

        Args:
            votes: ``stop_votes`` summed over the ranks (``Step.votes``).
        """
        stop_votes, signal_votes = votes[:2]
        if self.t.max_updates and self.state.update >= self.t.max_updates:
            return f"max_updates={self.t.max_updates}", signal_votes > 0
        if stop_votes > 0:
            return self.stop_signal or (
                "signal" if signal_votes > 0 else f"max_minutes={self.t.max_minutes}"
            ), signal_votes > 0
        return None, signal_votes > 0

    def _finish(self, reason: str) -> None:
        """Average the last checkpoints and draw the curves if asked, and say where the run stopped (main rank)."""
        if self.t.average_last > 1:
            ckpt.average_main(self.run_dir, last=self.t.average_last, output=None)
        if self.t.curves:
            try:
                plot_curves(self.run_dir)
            except Exception as err:  # a plot must never fail a training run
                print(f"note: could not draw curves ({err})")
        print(f"stopped at update {self.state.update} ({reason}); run dir: {self.run_dir}")
        if self.stop_signal:
            print(f"resume with: mtkit train --resume {self.run_dir}")
