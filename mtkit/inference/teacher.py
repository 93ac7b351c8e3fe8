"""The teacher of ``mtkit distill``: a run dir or checkpoint, several of them (an ensemble: the torch engine averages
their probabilities at each step), or a CTranslate2 export, loaded through ``mtkit.load``, fingerprinted by the
bytes of its files, and asked for n-best lists. ``distill_main`` is the command; the stage itself, which needs
nothing of a model but ``Teacher.translate``, is ``mtkit.data.distill``.

Engines: ``auto`` takes CTranslate2 for an export, and for a single run dir or checkpoint when ctranslate2 is
installed and can run the model (converted on the fly); the torch engine otherwise (ensembles, RNNs, SSRU decoders).
"""

from __future__ import annotations

import dataclasses
import hashlib
from pathlib import Path
from typing import Optional, Sequence

from mtkit import config as cfgmod
from mtkit.errors import MtkitError
from mtkit.inference.api import TranslationModel, load
from mtkit.interop import ct2_export as ct2

ENGINES = ("auto", "torch", "ctranslate2")
SEARCH_KEYS = ("beam_size", "length_penalty", "max_len_a", "max_len_b")  # what changes the translations


@dataclasses.dataclass
class Teacher:
    """A loaded teacher (what ``data.distill.Teacher`` describes).

    Attributes:
        model: the ``TranslationModel``.
        members: {"path", "fingerprint"} per model, in the order given.
        fingerprint: sha256 over the members' fingerprints.
        target: the target language asked of a multilingual teacher, else None.
    """

    model: TranslationModel
    members: list
    fingerprint: str
    target: Optional[str] = None

    @property
    def tokenizer(self):
        return self.model.tokenizer

    @property
    def languages(self) -> tuple[str, str]:
        return self.model.languages

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(self.model.engine.targets)

    @property
    def engine(self) -> str:
        return self.model.options.engine

    @property
    def search(self) -> dict:
        """The options that change the translations: beam_size, length_penalty, max_len_a, max_len_b."""
        return {key: getattr(self.model.options, key) for key in SEARCH_KEYS}

    def translate(self, lines: list[str], nbest: int, **decoding) -> list[list[str]]:
        """Up to ``nbest`` translations of each line (one sentence each, never cut into several), best first.

        Args:
            lines: source sentences.
            nbest: hypotheses per line, at most the beam size.
            **decoding: this call's own decoding options (``TranslationModel.translate_batch``), e.g. a seed.

        Returns:
            One list of texts per line.
        """
        found = self.model.translate_batch(
            lines, nbest=nbest, scores=False, split_sentences=False, target=self.target, **decoding
        )
        return [[h.text for h in t.hypotheses] for t in found]


def file_fingerprint(path: Path) -> str:
    """The sha256 of a file's bytes, read a block at a time.

    Args:
        path: the file.

    Returns:
        The hex digest.
    """
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def member(path: Path) -> dict:
    """What identifies one teacher model.

    Args:
        path: a run dir (its checkpoint as translate picks it), a checkpoint, or an export dir.

    Returns:
        {"path": the checkpoint or export dir (absolute), "fingerprint": the sha256 of the checkpoint's bytes, or of
        the names and bytes of all the export dir's files}.

    Raises:
        MtkitError: ``path`` does not exist or holds no model.
    """
    from mtkit import checkpoint as ckpt

    path = Path(path)
    if not path.exists():
        raise MtkitError(f"{path}: no such teacher; give a run dir, a checkpoint or a CTranslate2 export dir")
    if ct2.is_export_dir(path):
        files = sorted(p for p in path.iterdir() if p.is_file())
        digest = hashlib.sha256()
        for p in files:
            digest.update(f"{p.name}\0{file_fingerprint(p)}\0".encode())
        return {"path": str(path.resolve()), "fingerprint": digest.hexdigest()}
    file = ckpt.resolve(path)
    ckpt.read_metadata(file)  # an mtkit checkpoint, or one line saying what it is
    return {"path": str(file.resolve()), "fingerprint": file_fingerprint(file)}


def pick_engine(paths: Sequence[Path], engine: str) -> str:
    """The engine a teacher runs on.

    Args:
        paths: the teacher's models.
        engine: ``auto`` (see the module docstring), ``torch`` or ``ctranslate2``.

    Returns:
        ``torch`` or ``ctranslate2``.

    Raises:
        MtkitError: an unknown engine, or an ensemble with an export in it.
    """
    if engine not in ENGINES:
        raise MtkitError(f"--engine {engine!r}: use auto, torch or ctranslate2")
    exports = [p for p in paths if ct2.is_export_dir(p)]
    if exports and len(paths) > 1:
        raise MtkitError(
            f"{exports[0]}: an ensemble of teachers runs on the torch engine; give run dirs or checkpoints, not a "
            "CTranslate2 export"
        )
    if engine != "auto":
        return engine
    if exports:
        return "ctranslate2"
    if len(paths) > 1:
        return "torch"
    try:
        ct2.import_ctranslate2()
        from mtkit import checkpoint as ckpt

        file = ckpt.resolve(Path(paths[0]))
        ct2.check_exportable(cfgmod.from_dict(ckpt.read_metadata(file)["config"]).model, str(file))
    except MtkitError:
        return "torch"
    return "ctranslate2"


def load_teacher(paths: Sequence[Path], *, engine: str = "auto", target: Optional[str] = None, **options) -> Teacher:
    """Load a teacher: one model, an ensemble (several run dirs or checkpoints), or an export.

    Args:
        paths: the teacher's models.
        engine: ``auto``, ``torch`` or ``ctranslate2``.
        target: the target language to ask of a multilingual teacher.
        **options: decoding options of ``mtkit.load`` (beam_size, batch_size, device, dtype, threads, ...).

    Returns:
        The teacher.

    Raises:
        MtkitError: a path that does not exist or holds no model, models that cannot form an ensemble, or options
            that do not go together.
    """
    if not paths:
        raise MtkitError("give at least one teacher")
    paths = [Path(p) for p in paths]
    members = [member(p) for p in paths]
    engine = pick_engine(paths, engine)
    model = load(paths[0], checkpoints=paths[1:], engine=engine, **options)
    fingerprint = hashlib.sha256("\0".join(m["fingerprint"] for m in members).encode()).hexdigest()
    return Teacher(model, members, fingerprint, target if model.engine.targets else None)


def distill_main(
    teachers: Sequence[Path],
    config: Path,
    overrides: list[str],
    *,
    select: str = "chrf",
    chunk_size: Optional[int] = None,
    keep_original: bool = False,
    engine: str = "auto",
    **options,
) -> dict:
    """``mtkit distill``: load the student's config and the teacher, then ``data.distill.distill``.

    Args:
        teachers: the teacher's models.
        config: the student's config file.
        overrides: ``--set`` items.
        select: ``chrf``, ``bleu`` or ``top``.
        chunk_size: sentences per chunk of the work folder.
        keep_original: train on the references too.
        engine: ``auto``, ``torch`` or ``ctranslate2``.
        **options: decoding options of the teacher (beam_size, batch_size, device, dtype, threads).

    Returns:
        The manifest of the student's data dir.

    Raises:
        MtkitError: what ``load_teacher`` and ``data.distill.distill`` raise, a bad config or ``--select``.
    """
    from mtkit.data.distill import CHUNK_SIZE, distill
    from mtkit.data.selection import check_selection

    cfg = cfgmod.load(config, overrides)
    check_selection(select)
    given = {k: v for k, v in options.items() if v is not None}
    teacher = load_teacher(
        teachers, engine=engine, target=cfg.data.tgt_lang, chunk_size=chunk_size or CHUNK_SIZE, **given
    )
    return distill(cfg, teacher, select=select, chunk_size=chunk_size, keep_original=keep_original)


def backtranslate_main(
    run: Path,
    mono: Path,
    out: Path,
    *,
    tag: Optional[str] = None,
    chunk_size: Optional[int] = None,
    skip_bad_lines: bool = False,
    engine: str = "auto",
    algorithm: Optional[str] = None,
    **options,
) -> dict:
    """``mtkit backtranslate``: load RUN, then ``data.backtranslate.backtranslate``.

    Args:
        run: the model (a run dir, checkpoint or export) translating MONO's language.
        mono: the monolingual text.
        out: the corpus folder.
        tag: the tag token of tagged back-translation, None for none.
        chunk_size: sentences per chunk of the work folder.
        skip_bad_lines: drop MONO's lines of invalid UTF-8.
        engine: ``auto`` (CTranslate2 where it runs the model and the algorithm does not draw), ``torch`` or
            ``ctranslate2``.
        algorithm: the decoding algorithm (default beam).
        **options: decoding options (beam_size, batch_size, top_k, seed..., device, dtype, threads); None: not given.

    Returns:
        The report of the corpus folder.

    Raises:
        MtkitError: bad inputs (checked before the model loads), options that do not go together.
    """
    from mtkit.data.backtranslate import CHUNK_SIZE, backtranslate, check_inputs, search_of

    check_inputs(Path(mono), Path(out), tag)
    given = {k: v for k, v in options.items() if v is not None}
    chosen = engine
    if engine == "auto":
        from mtkit.decoding import algorithms

        chosen = "torch" if algorithms.get(algorithm or "beam").seed else pick_engine([Path(run)], "auto")
    model = load_teacher(
        [run], engine=chosen, algorithm=algorithm or "beam", chunk_size=chunk_size or CHUNK_SIZE, **given
    )
    seed_option = model.model.options.chosen.seed  # chunk k draws from seed + k, on either engine
    return backtranslate(
        model,
        Path(mono),
        Path(out),
        search=search_of(model.model.options),
        seed_option=seed_option,
        tag=tag,
        chunk_size=chunk_size,
        skip_bad_lines=skip_bad_lines,
    )
