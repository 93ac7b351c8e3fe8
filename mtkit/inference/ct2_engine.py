"""``Ct2Engine``: the translation engine over a CTranslate2 model directory written by `mtkit export`."""

from __future__ import annotations

import dataclasses
import json
import math
import threading
from collections import OrderedDict
from itertools import repeat
from pathlib import Path
from typing import Optional

from mtkit.decoding.guidance import Guidance
from mtkit.decoding.hypothesis import Decoded, length_penalty_of
from mtkit.errors import MtkitError
from mtkit.inference.engine import Engine, batches
from mtkit.inference.options import Options
from mtkit.interop.ct2_export import ct2_vocabularies, import_ctranslate2
from mtkit.tokenizer import BOS, PAD, UNK


@dataclasses.dataclass(frozen=True)
class Ct2Search:
    """What one ``Ct2Engine.search`` asks of CTranslate2: a beam of ``beam_size`` (1: greedy) returning
    ``hypotheses`` a sentence, or, with ``draws`` (CTranslate2's ``sampling_topk``, ``sampling_topp``,
    ``sampling_temperature``), ``hypotheses`` samples a sentence from the stream of ``seed``; ``keep``: the
    n-best kept per sentence, best first."""

    beam_size: int
    hypotheses: int
    keep: int
    draws: Optional[dict] = None
    seed: int = 0


# CTranslate2 draws from one generator per worker thread, seeded from the process's seed when the thread first
# draws (ctranslate2.set_random_seed has no effect on a thread that drew before): a seed's stream is a translator of
# its own, made while that seed is set and made to draw at once. One lock for the process-wide seed.
_SEEDING = threading.Lock()
_DRAWING_TRANSLATORS = 2  # per engine: each holds a copy of the model


class Ct2Engine(Engine):
    """The engine over a CTranslate2 model directory written by ``mtkit export``, with the torch engine's contract.

    PAD and BOS are never emitted; EOS may come first (an empty output). Outputs have at most
    ``ceil(max_len_a * src_len + max_len_b)`` tokens (``src_len`` with EOS, capped at max_positions - 1).
    Scores are log-probabilities over the GNMT penalty, ranked as the torch engine ranks them. Beam search
    stops a sentence once ``beam_size`` hypotheses finished (``stopping: beam_full``, the only rule here).
    ``search: ctranslate2`` runs CTranslate2's own beam search instead (``_native``): its ranking, its scores.
    Hypotheses carry no attention, and constraints are refused (CTranslate2 has no constrained decoding).
    A prefix is CTranslate2's ``target_prefix``; avoided phrases are its ``suppress_sequences``.
    ``translate_ids`` runs the CTranslate2 runner of the options' algorithm (``mtkit.decoding.algorithms``), which
    asks ``search`` for CTranslate2's hypotheses. Draws come from a stream per seed: successive calls with one seed
    continue it, and ``restart_draws`` starts it again (a call that gives its own seed).
    Where the model's ``config.json`` has CTranslate2 put a token first in every source itself (``add_source_bos``:
    an Argos Translate package's model, which adds the source language's token), a source that starts with that
    token is passed without it.
    With ``options.scores`` or an n-best list, the kept hypotheses are rescored by a teacher-forced pass: their
    numbers are then the model's own and ``token_log_probs`` is filled. Without, a lone greedy or sampled
    hypothesis has a NaN score and log-prob.
    """

    # CTranslate2 takes one output limit per call: a batch runs under its longest limit, and a sentence whose
    # output went past its own limit is cut there (greedy, sampling: the same as stopping there) or searched
    # again under it (beam).
    # CTranslate2 renormalises its log-probs over the tokens it may emit (all but PAD and BOS), so its scores sit
    # slightly above the model's own and a near-tie may go another way than in the torch engine.
    # A candidate cut at the limit is rescored only where its log-prob without the final EOS, an upper bound,
    # could still place it in the n-best.
    # CTranslate2's beam search stops at beam_size finished hypotheses (our beam_full rule) only under a length
    # penalty (with none it exits once the top beam ends), keeps the beam_size best by score / length ** penalty
    # and ranks by that. A penalty this small keeps that stopping rule while ranking by log-probability, which
    # keeps the hypotheses our GNMT penalty would pick (ranked afterwards, on the raw log-probs) far more often
    # than CTranslate2's length ** alpha, which favours hypotheses cut at the length limit.
    _NEUTRAL_PENALTY = 1e-6

    def __init__(self, model_dir: Path, tokenizer, options: Options, *, max_positions: int, in_memory: bool = False):
        """``in_memory``: keep the model's files in memory, for the translators of draws made after ``model_dir``
        is gone (a run converted on the fly into a temporary directory)."""
        super().__init__(tokenizer, options, max_positions)
        ct2 = import_ctranslate2()
        device, compute_type = options.device, options.dtype or "default"
        self._ct2, self._model_dir = ct2, str(model_dir)
        self._load = dict(device=device, compute_type=compute_type, inter_threads=1, intra_threads=options.threads or 0)
        self._files = {f.name: f.read_bytes() for f in Path(model_dir).iterdir() if f.is_file()} if in_memory else None
        self.where = f"{device} as {compute_type}"
        self.translator = self._translator()
        self.max_len_cap = self.max_src
        self.src_vocab, self.tgt_vocab = ct2_vocabularies(tokenizer)
        self.tgt_ids = {piece: i for i, piece in enumerate(self.tgt_vocab)}
        self.banned = [[self.tgt_vocab[PAD]], [self.tgt_vocab[BOS]]]
        self.source_bos = _source_bos(Path(model_dir))
        self._drawing: OrderedDict[int, object] = OrderedDict()  # seed -> the translator of its stream

    def _translator(self):
        try:
            return self._ct2.Translator(self._model_dir, **self._load, files=self._files)
        except (ValueError, RuntimeError) as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else err.__class__.__name__
            raise MtkitError(f"CTranslate2 cannot run this model on {self.where} ({first})") from None

    def drawing(self, seed: int):
        """The translator whose draws are the stream of ``seed`` (made on first use; the least recently used of more
        than ``_DRAWING_TRANSLATORS`` is let go)."""
        found = self._drawing.get(seed)
        if found is None:
            with _SEEDING:
                self._ct2.set_random_seed(seed)
                found = self._translator()
                # the worker thread's generator is made, from the seed now set, at its first draw: draw once now
                self._run(
                    found.translate_batch,
                    [[self.src_vocab[UNK]]],
                    None,
                    beam_size=1,
                    sampling_topk=0,
                    max_decoding_length=1,
                )
            self._drawing[seed] = found
            while len(self._drawing) > _DRAWING_TRANSLATORS:
                self._drawing.popitem(last=False)
        self._drawing.move_to_end(seed)
        return found

    def restart_draws(self, options: Options) -> None:
        seed = options.chosen.seed
        if seed:
            self._drawing.pop(options.param(seed), None)

    def describe(self) -> str:
        return f"CTranslate2 on {self.where}, {self.options.threads or 'default'} threads"

    def max_length(self, src_len: int, options: Optional[Options] = None) -> int:
        """``search.max_lengths`` for one sentence of ``src_len`` tokens (EOS included)."""
        o = options or self.options
        return max(math.ceil(min(o.max_len_a * src_len + o.max_len_b - 1e-6, self.max_len_cap)), 0)

    def translate_ids(
        self,
        ids: list[list[int]],
        guidance: Optional[list[Optional[Guidance]]] = None,
        options: Optional[Options] = None,
    ) -> list[list]:
        o = options or self.options
        return o.chosen.runner("ctranslate2")(self, ids, guidance, o)

    def search(
        self, ids: list[list[int]], guidance: Optional[list[Optional[Guidance]]], o: Options, plan: Ct2Search
    ) -> list[list]:
        """CTranslate2's hypotheses of each source as ``plan`` asks, under ``o``'s limits and batches, each
        sentence's prefix and avoided phrases honoured; ranked as the class docstring says."""
        results: list[list] = [[] for _ in ids]  # empty in, empty out
        for idx in batches(ids, o):  # batches of similar length, so of similar limits
            groups: dict[tuple, list[int]] = {}  # sentences with the same avoided phrases share a call
            for i in idx:
                g = guidance[i] if guidance is not None else None
                groups.setdefault(g.avoid if g else (), []).append(i)
            for avoid, group in groups.items():
                prefixes = [guidance[i].prefix if guidance is not None and guidance[i] else () for i in group]
                sources = [self._pieces(ids[i]) for i in group]  # CTranslate2 appends </s>
                limits = [max(self.max_length(len(ids[i]) + 1, o), len(p)) for i, p in zip(group, prefixes)]
                suppress = self.banned + [[self.tgt_vocab[t] for t in phrase] for phrase in avoid]
                target_prefix = [[self.tgt_vocab[t] for t in p] for p in prefixes] if any(prefixes) else None
                for i, hyps in zip(group, self._search(o, plan, sources, limits, target_prefix, suppress)):
                    results[i] = hyps
        return results

    def _pieces(self, ids: list[int]) -> list[str]:
        """A source's pieces as CTranslate2 takes them: without the token it puts first itself (``source_bos``)."""
        pieces = [self.src_vocab[t] for t in ids]
        return pieces[1:] if self.source_bos is not None and pieces[:1] == [self.source_bos] else pieces

    def _search(
        self,
        o: Options,
        plan: Ct2Search,
        sources: list[list[str]],
        limits: list[int],
        prefixes: Optional[list[list[str]]] = None,
        suppress: Optional[list[list[str]]] = None,
    ) -> list[list]:
        """The n-best hypotheses of each source, each under its own output limit (and after its prefix, without
        the suppressed sequences)."""
        suppress = self.banned if suppress is None else suppress
        if o.search == "ctranslate2" and plan.draws is None:
            return self._native(o, plan, sources, limits, prefixes, suppress)
        found = self._candidates(o, plan, sources, max(limits), prefixes, suppress)
        again: dict[int, list[int]] = {}  # limit -> sources whose beam search must run again under it
        for s, limit in enumerate(limits):
            if any(len(pieces) > limit for pieces, _, _ in found[s]):
                if plan.beam_size == 1:
                    # a greedy or sampled output cut at the limit is what stopping there would have given
                    found[s] = [
                        (pieces, lp, bound) if len(pieces) < limit else (pieces[:limit], None, None)
                        for pieces, lp, bound in found[s]
                    ]
                else:
                    again.setdefault(limit, []).append(s)
        for limit, group in again.items():
            subset = [prefixes[s] for s in group] if prefixes is not None else None
            for s, cands in zip(group, self._candidates(o, plan, [sources[s] for s in group], limit, subset, suppress)):
                found[s] = cands
        # After a target prefix CTranslate2's scores are the continuation's (the prefix's tokens are not counted), as
        # the log-probs _ranked compares: no rescoring pass is needed to rank them (rescoring every candidate made a
        # prefixed beam 2.5x slower; scripts/bench_ct2_prefix.py)
        forced = [len(p) for p in prefixes] if prefixes is not None else [0] * len(sources)
        return self._ranked(o, plan, sources, found, forced)

    def _candidates(
        self,
        o: Options,
        plan: Ct2Search,
        sources: list[list[str]],
        limit: int,
        prefixes: Optional[list[list[str]]] = None,
        suppress: Optional[list[list[str]]] = None,
    ) -> list[list[tuple[list[str], Optional[float], Optional[float]]]]:
        """Per source: CTranslate2's hypotheses under one output limit, as (pieces, log-prob, bound), where the
        log-prob is None when CTranslate2 gives no usable one (``_ranked`` rescores those it needs) and ``bound``
        is then an upper bound of it where one is known (a hypothesis cut at the limit: its log-prob without the
        EOS that ends it here)."""
        exact = _exact_scores(o, plan)
        found: list[list[tuple[list[str], Optional[float], Optional[float]]]] = []
        if limit == 0:  # only EOS may follow BOS
            found = [[([], None, None)] for _ in sources]
        else:
            ct2_penalty = 0.0 if plan.beam_size == 1 else self._NEUTRAL_PENALTY
            kwargs = dict(beam_size=plan.beam_size, num_hypotheses=plan.hypotheses, **(plan.draws or {}))
            # scores rank several candidates, or are shown (options.scores); a lone greedy or sampled output needs
            # none, and asking CTranslate2 for them cost 3% of greedy decoding
            ranked = kwargs["num_hypotheses"] > 1 or exact
            suppress = self.banned if suppress is None else suppress
            call = dict(
                max_batch_size=o.batch_size,
                length_penalty=ct2_penalty,
                max_decoding_length=limit,
                min_decoding_length=0,
                max_input_length=0,
                return_scores=ranked,
                **kwargs,
            )
            # Greedy, unscored, with nothing but PAD and BOS banned: the banning costs CTranslate2 3% of the
            # decoding, and changes an output only where the model's first choice at some step is PAD or BOS. So
            # decode without it, and again with it the sentences whose output holds either (exactly the outputs
            # the ban gives: every other step's first choice is the same with or without it).
            greedy = plan.draws is None and plan.beam_size == 1 and not ranked and suppress == self.banned
            translator = self.translator if plan.draws is None else self.drawing(plan.seed)
            out = self._run(
                translator.translate_batch,
                sources,
                prefixes,
                suppress_sequences=None if greedy else suppress,
                **call,
            )
            if greedy:
                banned = {seq[0] for seq in self.banned}
                again = [i for i, result in enumerate(out) if banned.intersection(result.hypotheses[0])]
                if again:
                    redone = self._run(
                        translator.translate_batch,
                        [sources[i] for i in again],
                        [prefixes[i] for i in again] if prefixes is not None else None,
                        suppress_sequences=suppress,
                        **call,
                    )
                    out = list(out)
                    for i, result in zip(again, redone):
                        out[i] = result
            for result in out:
                # Undo CTranslate2's score / length ** penalty. Two kinds get no usable score (None): an empty
                # hypothesis under a penalty (-inf), and one cut at the limit, which CTranslate2 ends without
                # EOS where we force it (so its score lacks log p(EOS)).
                found.append(
                    [
                        self._entry(pieces, score, ct2_penalty, limit)
                        for pieces, score in zip(result.hypotheses, result.scores if ranked else repeat(math.nan))
                    ]
                )
        return found

    def _native(
        self,
        o: Options,
        plan: Ct2Search,
        sources: list[list[str]],
        limits: list[int],
        prefixes: Optional[list[list[str]]],
        suppress: list[list[str]],
    ) -> list[list]:
        """CTranslate2's own beam search (``search: ctranslate2``): one call under the batch's longest limit, its
        length penalty (score / length ** length_penalty) ranking and stopping the hypotheses, each output then cut
        at its own limit. ``score`` is CTranslate2's; with ``options.scores`` or an n-best list, ``log_prob`` and
        ``token_log_probs`` are the model's own (a teacher-forced pass), else NaN and empty."""
        out = self._run(
            self.translator.translate_batch,
            sources,
            prefixes,
            max_batch_size=o.batch_size,
            beam_size=plan.beam_size,
            num_hypotheses=plan.keep,
            length_penalty=o.length_penalty,
            max_decoding_length=max(limits),
            min_decoding_length=0,
            max_input_length=0,
            return_scores=True,
            suppress_sequences=suppress,
        )
        results = [
            [
                Decoded([self.tgt_ids.get(p, UNK) for p in pieces[:limit]], score, math.nan, [])
                for pieces, score in zip(result.hypotheses, result.scores)
            ]
            for result, limit in zip(out, limits)
        ]
        if _exact_scores(o, plan):
            self._rescore(
                o, sources, results, [len(p) for p in prefixes] if prefixes is not None else [0] * len(sources)
            )
        return results

    @staticmethod
    def _entry(pieces: list[str], score: float, ct2_penalty: float, limit: int):
        """(pieces, log-prob or None, bound or None) from a CTranslate2 hypothesis and its score."""
        if not pieces and ct2_penalty:  # -inf under a penalty: no number to go on
            return pieces, None, None
        log_prob = score * len(pieces) ** ct2_penalty
        if len(pieces) < limit:
            return pieces, log_prob, None
        return pieces, None, log_prob  # cut at the limit: log p(EOS) <= 0 is still to come

    def _ranked(
        self,
        o: Options,
        plan: Ct2Search,
        sources: list[list[str]],
        found: list[list[tuple[list[str], Optional[float], Optional[float]]]],
        forced: list[int],
    ) -> list[list]:
        """Hypotheses from ``_candidates``' output: missing log-probs filled in, GNMT-penalised, best first.
        ``forced``: the prefix length of each source (its tokens cost nothing and are not counted)."""
        exact = _exact_scores(o, plan)
        keep = plan.keep

        def score_of(s: int, pieces: list, log_prob: float) -> float:
            return log_prob / length_penalty_of(len(pieces) + 1 - forced[s], o.length_penalty)

        # A hypothesis without a log-prob is rescored unless its bound shows it cannot reach the n-best (most are
        # cut at the limit and far below: rescoring them took a tenth of the time at beam 5), or unless no ranking
        # needs it: a sentence with no more candidates than the n-best (greedy) keeps them all, and its numbers
        # are shown only with options.scores (which rescores what it keeps), so an unknown log-prob stays NaN.
        missing = []
        for s, cands in enumerate(found):
            if len(cands) <= keep and not exact:
                found[s] = [(p, lp if lp is not None else math.nan, None) for p, lp, _ in cands]
                continue
            known = sorted((score_of(s, p, lp) for p, lp, _ in cands if lp is not None), reverse=True)
            floor = known[keep - 1] if len(known) >= keep else -math.inf
            for c, (pieces, lp, bound) in enumerate(cands):
                if lp is None and (bound is None or score_of(s, pieces, bound) >= floor):
                    missing.append((s, c))
        if missing:
            scored = self._score(
                o,
                [sources[s] for s, _ in missing],
                [found[s][c][0] for s, c in missing],
                [forced[s] for s, _ in missing],
            )
            for (s, c), (log_prob, _) in zip(missing, scored):
                found[s][c] = (found[s][c][0], log_prob, None)
        results = []
        piece_id = self.tgt_ids.get
        for s, cands in enumerate(found):
            hyps = [
                Decoded([piece_id(p, UNK) for p in pieces], score_of(s, pieces, log_prob), log_prob, [])
                for pieces, log_prob, _ in cands
                if log_prob is not None  # those left out are below the n-best
            ]
            if len(hyps) > 1:
                hyps.sort(key=lambda h: h.score, reverse=True)
            results.append(hyps[:keep])
        if exact:
            self._rescore(o, sources, results, forced)
            for s, hyps in enumerate(results):
                for h in hyps:
                    h.score = score_of(s, h.tokens, h.log_prob)
                hyps.sort(key=lambda h: h.score, reverse=True)
        return results

    def _rescore(self, o: Options, sources: list[list[str]], results: list[list], forced: list[int]) -> None:
        """Give every hypothesis in ``results`` the model's own log-prob and token log-probs (a teacher-forced pass),
        in place; ``forced``: each source's prefix length, whose tokens cost nothing."""
        kept = [(s, h) for s, hyps in enumerate(results) for h in hyps]
        targets = [[self.tgt_vocab[t] for t in h.tokens] for _, h in kept]
        scored = self._score(o, [sources[s] for s, _ in kept], targets, [forced[s] for s, _ in kept])
        for (_, h), (log_prob, token_log_probs) in zip(kept, scored):
            h.log_prob, h.token_log_probs = log_prob, token_log_probs

    def _run(self, method, *args, **kwargs):
        """A CTranslate2 call; its runtime failures (a missing CUDA library, out of memory) become one line."""
        try:
            return method(*args, **kwargs)
        except RuntimeError as err:
            first = str(err).strip().splitlines()[0] if str(err).strip() else err.__class__.__name__
            raise MtkitError(
                f"CTranslate2 failed running the model on {self.where} ({first}); on a GPU check "
                "that the CUDA libraries CTranslate2 was built for are installed, or use --device cpu "
                "or --engine torch"
            ) from None

    def _score(
        self, o: Options, sources: list[list[str]], targets: list[list[str]], forced: Optional[list[int]] = None
    ) -> list[tuple[float, list[float]]]:
        """(log-prob, token log-probs with EOS's last) of each target given its source: the model's own numbers,
        but 0.0 for the first ``forced`` tokens of each (a prefix's)."""
        scored = self._run(
            self.translator.score_batch, sources, targets, max_batch_size=o.batch_size, max_input_length=0
        )
        out = []
        for r, skip in zip(scored, forced or [0] * len(targets)):
            token_log_probs = [0.0] * skip + list(r.log_probs)[skip:]
            out.append((math.fsum(token_log_probs), token_log_probs))
        return out


def _source_bos(model_dir: Path) -> Optional[str]:
    """The token CTranslate2 puts first in every source itself (the model config's ``bos_token`` where
    ``add_source_bos`` is true), or None."""
    try:
        config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return config.get("bos_token") if isinstance(config, dict) and config.get("add_source_bos") else None


def _exact_scores(o: Options, plan: Ct2Search) -> bool:
    """Whether the kept hypotheses get the model's own numbers (a teacher-forced pass): they are shown, or they
    rank an n-best list."""
    return o.scores or plan.keep > 1
