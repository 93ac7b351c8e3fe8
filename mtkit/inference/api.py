"""The Python API: ``load`` builds a ``TranslationModel`` from a run dir, checkpoint or CTranslate2 export, with
any decoding option of ``mtkit translate``; ``mtkit translate`` itself streams through the object ``load``
returns. Results are ``results.Translation`` / ``results.Hypothesis``.

    import mtkit
    model = mtkit.load("runs/demo", beam_size=5)
    model.translate(["A man is riding a bike.", ""])       # ["Ein Mann fährt Fahrrad.", ""]
    model.translate_batch(lines, nbest=3)                  # [Translation(source, source_tokens, hypotheses)]
    model.translate("A dog runs.", prefix="Ein", constraints=["Hund"], avoid=["Katze"])
    model.translate([{"text": "A dog runs.", "prefix": "Ein"}, mtkit.Segment("A cat.", avoid=("Hund",))])
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Iterable, Optional, Sequence, Union

from mtkit.errors import MtkitError
from mtkit.inference import paragraphs
from mtkit.inference.agreement import calibration_for, draw_samples
from mtkit.inference.confidence import Calibration, agreement, sentence_confidence
from mtkit.inference.confidence import words as confidence_words
from mtkit.inference.engine import Engine
from mtkit.inference.glossaries import WithGlossary, as_glossary, guide
from mtkit.inference.languages import with_first, without_first
from mtkit.inference.loading import ct2_engine, torch_engine
from mtkit.inference.options import Options, check_flags
from mtkit.inference.quality import estimator_for
from mtkit.inference.results import Hypothesis, Translation
from mtkit.inference.segments import Segment, with_parallel
from mtkit.interop import ct2_export as ct2
from mtkit.languages import LISTED_IN_FULL, language_tag, nearest_codes

PathLike = Union[str, Path]
Line = Union[str, bytes, Segment, dict]


class TranslationModel:
    """A loaded model and its decoding options: lines in, translations out, one per line and in order.

    Any string is a line: an empty or whitespace-only one gets no hypothesis (text ""). A line is cut into
    sentences (a line break always ends one) unless ``split_sentences=False``, where whitespace inside a line,
    line breaks included, separates words as spaces do (the command line reads a line break as the end of a
    line). A line beyond the model's length limit is truncated (``truncated`` counts them). Lines are
    translated ``options.chunk_size`` at a time, each chunk sorted by length and cut into batches, as
    ``mtkit translate`` does. One call at a time: the object is not thread-safe. Translate on the thread that
    loaded it (``serving.threads.model_thread`` gives a thread that can do both).
    """

    # PyTorch's OpenMP threads belong to the thread that starts them: a second team on the same cores slows
    # decoding down (docs/benchmarks.md, serving).

    def __init__(self, engine: Engine, calibration: Optional[Calibration] = None, source: Optional[str] = None):
        self.engine = engine
        self.calibration = calibration  # the run's (mtkit calibrate), for hypotheses' confidence
        self.quality = None  # a quality.QualityEstimator (qe_model): each hypothesis's qe, --rerank qe
        # the source language of a model that reads it as a token (``mtkit.load(source=)``; a run fine-tuned from
        # such a model on one source language: that one)
        only = engine.sources if engine.source_tag and len(engine.sources) == 1 else ()
        self.source = source if source is not None else (only[0] if only else None)

    @property
    def options(self) -> Options:
        """The options the model was loaded with (each call may change nbest, scores and alignments)."""
        return self.engine.options

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    @property
    def truncated(self) -> int:
        """Lines cut to the model's length limit so far."""
        return self.engine.truncated

    @property
    def max_src(self) -> int:
        """Source subwords a line may have (longer ones are truncated)."""
        return self.engine.max_src

    @property
    def max_chars(self) -> int:
        """Characters of a line beyond which it is cut before tokenization (see ``engine.max_chars_for``)."""
        return self.engine.max_chars

    def translate(self, lines: Union[Line, Iterable[Line]], **instructions) -> Union[str, list[str]]:
        """The best translation of each line (a str for a single line); ``instructions``: ``prefix``,
        ``constraints``, ``avoid``, ``split_sentences``, ``format`` and ``glossary`` as for ``translate_batch``."""
        found = self.translate_batch(lines, scores=False, **instructions)
        return found.text if isinstance(found, Translation) else [t.text for t in found]

    def translate_batch(
        self,
        lines: Union[Line, Iterable[Line]],
        *,
        nbest: Optional[int] = None,
        scores: bool = True,
        alignments: bool = False,
        prefix=None,
        constraints=None,
        avoid=None,
        split_sentences: Optional[bool] = None,
        format: str = "text",
        target: Optional[str] = None,
        source: Optional[str] = None,
        glossary=None,
        **decoding,
    ) -> Union[Translation, list[Translation]]:
        """A ``Translation`` per line (one for a single line) with up to ``nbest`` hypotheses (default: the loaded
        ``nbest``), best first; ``scores``: fill score, log_prob and token_log_probs (on the CTranslate2 engine
        this costs a rescoring pass); ``alignments``: fill each hypothesis's cross-attention (torch engine).

        A line is a str, or a ``Segment`` / dict ``{"text", "prefix", "constraints", "avoid"}`` carrying its
        instructions (docs/decoding.md):

        - ``prefix``: the text of every hypothesis starts with it; the model writes what follows. Its subwords
          are forced and cost nothing: a hypothesis's ``tokens`` include them, their ``token_log_probs`` are
          0.0, and ``log_prob`` / ``score`` are those of the continuation given the prefix (the length penalty
          counts the continuation's subwords and EOS).
        - ``constraints``: phrases every hypothesis contains (beam search, torch engine).
        - ``avoid``: phrases no hypothesis contains after the prefix.

        The same can be given as keywords: for a single line ``prefix="..."``, ``constraints=[...]``,
        ``avoid=[...]``; for a list of lines, parallel lists with one entry per line (None: nothing for that
        line), e.g. ``constraints=[["Hund"], None]``. A line may not get one field both ways. Instructions are
        checked before anything is translated: a bad one raises ``MtkitError`` naming the line.

        A plain line is cut into sentences (``split_sentences``; default: as loaded, on unless ``mtkit.load(...,
        split_sentences=False)``): all sentences of all lines share batches, and each line comes back with its
        own whitespace around and between them (``Translation.sentences`` has each one's details). A line with
        instructions is one sentence. ``format="html"``: each line is an HTML fragment; its text is translated
        and its inline tags go around the target words aligned to the words they enclosed (torch engine, one
        hypothesis per line; docs/documents.md).

        ``target``: the target language of a multilingual model (one of ``targets``; a line's own ``target``
        wins), needed where the model has several. ``source``: the source language of a model that reads it as a
        token (``sources``; an imported M2M-100 or NLLB-200 model); default: the one ``mtkit.load`` was given.
        ``glossary``: a ``text.glossary.Glossary``, a dict {source term: target term}, pairs or a TSV/CSV file; each
        sentence holding source terms must contain their target terms (``inference.glossaries``).

        ``decoding``: this call's decoding options, as ``mtkit.load`` takes them, but for those fixed when the model
        loaded (``options.LOAD_TIME``: engine, device, dtype, threads, shortlist): ``algorithm="mbr"``,
        ``beam_size=8``, ``top_p=0.9``... A new algorithm leaves the loaded one's own options behind. A seed given
        here starts the call's draws from it: the same call with the same seed gives the same output (on either
        engine); without one, calls continue the stream of the loaded seed.
        """
        options = self.options_for(nbest=nbest, scores=scores, alignments=alignments, **decoding)
        self.check_format(format, options)
        if options.chosen.seed in decoding:  # a call's own seed: its draws start from it, as a fresh model's would
            self.engine.restart_draws(options)
        source = source if source is not None else self.source
        self.check_source(source)
        single = isinstance(lines, (str, bytes, Segment, dict))
        if single:
            prefix, constraints, avoid = (None if x is None else [x] for x in (prefix, constraints, avoid))
        segments = with_parallel(_as_lines([lines] if single else lines), prefix, constraints, avoid)
        guidance = []
        for i, segment in enumerate(segments):
            try:
                guidance.append(self.engine.guidance(segment, options))
                self.check_target(segment.target or target)
            except MtkitError as err:
                raise MtkitError(f"line {i + 1}: {err}") from None
        if target is not None:
            segments = [s if s.target else dataclasses.replace(s, target=target) for s in segments]
        split = options.split_sentences if split_sentences is None else split_sentences
        planned = paragraphs.plan(segments, source or self.languages[0], split_sentences=split, fmt=format)
        guidance = [None if i is None else guidance[i] for i in planned.origin]
        guidance = guide(self.engine, planned.sentences, guidance, as_glossary(glossary), options)
        found: list = [None] * len(planned.sentences)
        for attention in (False, True):  # tags are placed by the cross-attention: only where a sentence has some
            picked = [i for i, needs in enumerate(planned.attention) if (alignments or needs) == attention]
            if picked:
                done = self._translate_sentences(
                    [planned.sentences[i] for i in picked],
                    [guidance[i] for i in picked],
                    options if options.alignments == attention else options.replace(alignments=attention),
                    scores,
                    source,
                )
                for i, translation in zip(picked, done):
                    found[i] = translation
        out = planned.rebuild(found)
        out = self.quality.annotate(out, scores) if self.quality is not None else out
        return out[0] if single else out

    def _translate_sentences(
        self, sentences: list, guidance: list, options: Options, scores: bool, source: Optional[str] = None
    ) -> list:
        """One ``Translation`` per sentence, ``options.chunk_size`` at a time (each chunk sorted and batched)."""
        out: list[Translation] = []
        for start in range(0, len(sentences), options.chunk_size):
            chunk = sentences[start : start + options.chunk_size]
            chunk_guidance = guidance[start : start + options.chunk_size]
            ids = self.engine.encode([self._tagged(s, source) for s in chunk])
            forced = self._forced_tags(chunk)
            if forced:  # the target language as the decoder's first token: forced, then taken off the outputs
                chunk_guidance = [with_first(g, tag) for g, tag in zip(chunk_guidance, forced)]
            found = self.engine.translate_ids(ids, chunk_guidance if any(chunk_guidance) else None, options)
            if forced:
                found = [[without_first(h) for h in hyps] for hyps in found]
            samples = self._samples(ids, forced) if scores else [None] * len(chunk)
            # the hypotheses of sentences without a prefix are detokenised together: one call for the chunk
            prefixed = [bool(_prefix_of(segment)) for segment in chunk]
            plain = [h.tokens for hyps, p in zip(found, prefixed) if not p for h in hyps]
            texts = iter(self.engine.tokenizer.decode_tgt(plain))
            for segment, src_ids, hyps, p, drawn in zip(chunk, ids, found, prefixed, samples):
                decoded = None if p else [next(texts) for _ in hyps]
                out.append(self._translation(segment, src_ids, hyps, scores, options.alignments, decoded, drawn))
        return out

    def _samples(self, ids: list, forced: list) -> list:
        """The texts of the epsilon samples each sentence draws for its confidence's ``agreement`` (the run's
        calibration asks for ``samples`` a sentence), or None each where it asks for none. The draws start afresh
        from seed 0 at every chunk, so a sentence translated again in the same company gets the same confidence."""
        count = self.calibration.samples if self.calibration is not None else 0
        if not count:
            return [None] * len(ids)
        return draw_samples(self.engine, self.options, count, ids, forced)

    def translate_file(self, source: PathLike, target: PathLike, *, format: Optional[str] = None, glossary=None):
        """Translate the document ``source`` (.txt, .md, .html, .docx, .srt, .po, .xliff; ``format`` overrides the
        name's ending) into ``target``, written whole or not at all; returns ``documents.files.DocumentStats``.
        ``glossary`` as for ``translate_batch``. Raises ``MtkitError`` naming the file for a document that cannot be
        read or written."""
        from mtkit.documents.files import translate_file

        model = self if glossary is None else WithGlossary(self, as_glossary(glossary))
        return translate_file(model, Path(source), Path(target), fmt=format)

    @property
    def targets(self) -> tuple[str, ...]:
        """The languages the model translates into: its directions' targets, or its one target language."""
        return self.engine.targets or (self.languages[1],)

    def check_target(self, target: Optional[str]) -> None:
        """Raise ``MtkitError`` unless ``target`` (None: none given) is one this model can translate into."""
        targets = self.targets
        if target is None:
            if self.engine.targets and len(targets) > 1:
                raise MtkitError(f"this model translates into {', '.join(targets)}; choose one with --target")
            return
        if target not in targets:
            raise MtkitError(f"unknown target {target!r}; {_named(targets, target, 'translates into')}")

    @property
    def sources(self) -> tuple[str, ...]:
        """The languages the model translates from: those it reads as a token (a many-to-many model's languages, or
        the directions' sources of a run fine-tuned from one), else its one source ("" where it has several)."""
        if self.engine.source_tag:
            return self.engine.sources or self.engine.targets
        return (self.languages[0],)

    def check_source(self, source: Optional[str]) -> None:
        """Raise ``MtkitError`` unless ``source`` (None: none given, the loaded one then) is a language this model can
        translate from, given where the model reads it as a token (``data.source_tag``)."""
        source = source if source is not None else self.source
        if not self.engine.source_tag:
            own = self.languages[0]
            if source is not None and own and source != own:
                raise MtkitError(f"unknown source {source!r}; this model translates from {own}")
            return
        if source is None:
            sources = self.sources
            raise MtkitError(
                f"this model reads the source language as a token; name it with --source (one of {len(sources)}: "
                f"{', '.join(sources[:3])}, ...)"
            )
        if source not in self.sources:
            raise MtkitError(f"unknown source {source!r}; {_named(self.sources, source, 'translates from')}")

    def _tagged(self, segment: Segment, source: Optional[str] = None) -> str:
        """A sentence as the model reads it: after its target language's token, for a multilingual model whose
        token goes first in the source (``target_tag: source``), or after its source language's token, for one
        that reads that (``source_tag``)."""
        if self.engine.source_tag and source:
            return f"{language_tag(source, self.engine.tag_template)} {segment.text}"
        if not self.engine.targets or self.engine.target_tag != "source":
            return segment.text
        return f"{language_tag(segment.target or self.targets[0], self.engine.tag_template)} {segment.text}"

    def _forced_tags(self, sentences: list) -> list[int]:
        """Each sentence's language token, for a multilingual model that reads it first in the decoder
        (``target_tag: decoder``); [] for any other model."""
        if not self.engine.targets or self.engine.target_tag != "decoder":
            return []
        tags = [language_tag(s.target or self.targets[0], self.engine.tag_template) for s in sentences]
        return [ids[0] for ids in self.engine.tokenizer.encode_tgt(tags)]

    @property
    def languages(self) -> tuple[str, str]:
        """(source, target) language codes of the model, from its config ("" where unknown)."""
        return self.engine.languages

    def check_format(self, format: str, options: Optional[Options] = None) -> None:
        """Raise ``MtkitError`` unless lines in ``format`` (``text`` or ``html``) can be translated under
        ``options`` (default: the loaded ones)."""
        paragraphs.check_format(format)
        options = options or self.options
        if format != "html":
            return
        if options.engine != "torch":
            raise MtkitError(
                "format html needs the torch engine (--engine torch): tags are placed by its cross-attention"
            )
        if options.nbest > 1:
            raise MtkitError(f"format html gives one translation per line; nbest must be 1, not {options.nbest}")

    def options_for(
        self, *, nbest: Optional[int] = None, scores: bool = False, alignments: bool = False, **decoding
    ) -> Options:
        """The options of one call: the loaded ones with these (``decoding``: see ``translate_batch``).

        Raises:
            MtkitError: options that do not go together (``nbest`` over the beam size, alignments on CTranslate2),
                or a load-time option.
        """
        return self.options.for_call(nbest=nbest, scores=scores, alignments=alignments, **decoding)

    def check(self, line: Line, options: Optional[Options] = None) -> None:
        """Raise ``MtkitError`` (saying what, not where) if ``line`` is not one this model can translate under
        ``options`` (default: the loaded ones): a bad shape, or instructions that cannot be followed."""
        [segment] = with_parallel([line], None, None, None)
        self.engine.guidance(segment, options)
        if segment.target is not None:
            self.check_target(segment.target)

    def _translation(
        self,
        segment: Segment,
        src_ids: list[int],
        hyps: list,
        scores: bool,
        alignments: bool,
        texts: Optional[list[str]],
        samples: Optional[list[str]] = None,
    ) -> Translation:
        """``texts``: the hypotheses detokenised, or None for a sentence with a prefix (detokenised here);
        ``samples``: the texts of the sentence's samples for its confidence's agreement, or None."""
        tok = self.engine.tokenizer
        if texts is None:  # the prefix as given, then the continuation: what follows its subwords
            prefix = _prefix_of(segment)
            forced = len(tok.encode_tgt([" ".join(prefix.split())])[0])
            rest = tok.decode_tgt([h.tokens[forced:] for h in hyps]) if hyps else []
            texts = [
                prefix + _join(prefix, tok.tgt_pieces(h.tokens[forced : forced + 1]), r) for h, r in zip(hyps, rest)
            ]
        source_tokens = tuple(tok.src_pieces(src_ids))
        agreements = agreement(texts, samples) if samples is not None else [None] * len(hyps)
        out = []
        for h, text, agrees in zip(hyps, texts, agreements):
            pieces = tuple(tok.tgt_pieces(h.tokens))
            out.append(
                Hypothesis(
                    text=text,
                    tokens=pieces,
                    score=float(h.score) if scores else None,
                    log_prob=float(h.log_prob) if scores else None,
                    token_log_probs=tuple(h.token_log_probs) if scores else None,
                    alignment=tuple(map(tuple, h.attention.tolist()))
                    if alignments and h.attention is not None
                    else None,
                    confidence=sentence_confidence(h.token_log_probs, self.calibration, len(source_tokens), agrees)
                    if scores
                    else None,
                    word_confidences=confidence_words(pieces, h.token_log_probs) if scores else None,
                )
            )
        return Translation(source=segment.text, source_tokens=source_tokens, hypotheses=tuple(out))


def _named(codes: Sequence[str], wrong: str, verb: str) -> str:
    """ "this model translates into a, b, c", or for many codes the nearest to ``wrong`` (difflib's ratio)."""
    if len(codes) <= LISTED_IN_FULL:
        return f"this model {verb} {', '.join(codes)}"
    return f"the nearest of the {len(codes)} languages this model {verb}: {', '.join(nearest_codes(codes, wrong))}"


def _prefix_of(segment: Segment) -> str:
    """The segment's prefix, "" where it has none (or only whitespace)."""
    return segment.prefix if segment.prefix and segment.prefix.strip() else ""


def _join(prefix: str, first_piece: list[str], rest: str) -> str:
    """The separator between the prefix text and the continuation ``rest`` (detokenised on its own, so without
    the space its first subword may open with)."""
    if not rest or prefix[-1].isspace() or not first_piece or not first_piece[0].startswith("\u2581"):
        return rest
    return " " + rest


def _as_lines(lines: Iterable) -> list:
    """Lines as str (bytes are decoded as UTF-8, invalid bytes replaced, as the command line reads them), or
    ``Segment`` / dict items as they are."""
    if not isinstance(lines, Iterable):
        raise TypeError(f"expected a str or an iterable of str, got {type(lines).__name__}")
    out = []
    for i, line in enumerate(lines):
        if isinstance(line, bytes):
            line = line.decode("utf-8", errors="replace")
        elif not isinstance(line, (str, Segment, dict)):
            raise TypeError(f"line {i + 1} is a {type(line).__name__}, not a str, a dict or a Segment")
        out.append(line)
    return out


def load(
    path: PathLike,
    *,
    checkpoints: Sequence[PathLike] = (),
    engine: str = "torch",
    alignments: bool = False,
    **options,
) -> TranslationModel:
    """A ``TranslationModel`` for a run dir, a checkpoint or a dir written by ``mtkit export``.

    Args:
        path: a run dir, a checkpoint file, or an export dir (which translates through CTranslate2).
        checkpoints: further checkpoints ensembled with ``path`` (``--checkpoint``; torch engine).
        engine: ``torch`` or ``ctranslate2``.
        alignments: hypotheses carry cross-attention (checked now: the engine must give it).
        **options: those of ``mtkit translate`` (None: the run's ``decoding`` section); see ``Options``; and
            ``source``: the source language of a model that reads it as a token (``TranslationModel.sources``);
            ``qe_model``, ``rerank``: a CometKiwi model for each hypothesis's ``qe`` (``inference.quality``).

    Returns:
        The loaded model.

    Raises:
        MtkitError: a path that holds no model, or options that do not go together (the message the command
        line prints).
    """
    check_flags(engine=engine)  # a misspelt engine fails before any file is read
    paths = [Path(path), *(Path(p) for p in checkpoints)]
    if engine != "ctranslate2" and ct2.is_export_dir(paths[0]):
        engine = "ctranslate2"
    source, qe = options.pop("source", None), (options.pop("qe_model", None), options.pop("rerank", None))
    overrides = dict(options, engine=engine, alignments=alignments)
    run_dir = paths[0] if paths[0].is_dir() else paths[0].parent.parent  # RUN/checkpoints/x.safetensors
    calibration = Calibration.load(run_dir)
    if engine == "ctranslate2":
        model = TranslationModel(ct2_engine(paths, overrides), calibration, source)
    else:
        model = TranslationModel(torch_engine(paths, overrides), calibration, source)
    model.calibration = calibration_for(calibration, model.options.engine)
    model.quality = estimator_for(*qe, str(getattr(model.engine, "device", "cpu")))
    if source is not None:
        model.check_source(source)
    return model
