"""Minimum Bayes risk decoding (Kumar & Byrne 2004; Freitag et al. 2022, 2023): of a sentence's candidates, the one
that agrees most with the others, by a sentence metric (chrF, BLEU or COMET-22) as utility.

Candidates are epsilon samples (Freitag et al. 2023, "Epsilon sampling rocks") or a beam's n-best; the utility of a
candidate is its mean score against pseudo-references: the candidates themselves, or samples drawn apart. The
candidates come out ranked by that expected utility, best first, each distinct text once, its ``score`` the
expected utility on a 0-1 scale. chrF matrices come from fastchrf (Rust; the same numbers as sacreBLEU's sentence
chrF, tests/test_mbr.py), BLEU from sacreBLEU's own formula on n-gram counts made once per sentence. COMET-22
(``mtkit.scoring.comet``, which reads the source too) encodes each distinct candidate, pseudo-reference and source
once, N + M + 1 encoder passes a sentence, and runs only its estimator on each of the N x M pairs; its expected
utility is on COMET's own scale.

The ranking reads text only and imports no torch (``rank``); ``run_mbr`` is the torch runner of the registry's
``mbr`` entry (``mtkit.decoding.algorithms``, which declares its options).
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Optional, Sequence

from mtkit.decoding.algorithms import REFERENCE_EPSILON  # pseudo-references drawn for a beam's candidates
from mtkit.decoding.hypothesis import Decoded


def chrf_matrix(hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[str]]) -> list:
    """Sentence chrF (character 6-grams, beta 2, as sacreBLEU's default) of every hypothesis against every
    reference, per sentence: [sentence][hypothesis][reference], 0-100."""
    import fastchrf

    return fastchrf.pairwise_chrf([list(h) for h in hypotheses], [list(r) for r in references])


def _ngrams(tokens: list[str], order: int = 4) -> list[Counter]:
    return [Counter(tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)) for n in range(1, order + 1)]


def bleu_matrix(hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[str]]) -> list:
    """Sentence BLEU (sacreBLEU's ``sentence_bleu``: 13a tokens, exponential smoothing, effective order) of every
    hypothesis against every reference, per sentence: [sentence][hypothesis][reference], 0-100."""
    from sacrebleu.metrics.bleu import BLEU
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    tokenize = Tokenizer13a()
    out = []
    for hyps, refs in zip(hypotheses, references):
        cache: dict[str, tuple[int, list[Counter]]] = {}
        for text in {*hyps, *refs}:
            tokens = tokenize(text.rstrip()).split()
            cache[text] = (len(tokens), _ngrams(tokens))
        rows = []
        for h in hyps:
            h_len, h_grams = cache[h]
            row = []
            for r in refs:
                r_len, r_grams = cache[r]
                correct = [sum((hg & rg).values()) for hg, rg in zip(h_grams, r_grams)]
                total = [max(h_len - n, 0) for n in range(4)]
                stats = BLEU.compute_bleu(correct, total, h_len, r_len, smooth_method="exp", effective_order=True)
                row.append(stats.score)
            rows.append(row)
        out.append(rows)
    return out


_COMET: dict = {}  # (model, device) -> the loaded COMET-22 model, kept for the next batches


def comet_scorer(name: str, device: str = "cpu"):
    """The COMET-22 model ``name``, loaded once per process and device."""
    key = (name, device)
    if key not in _COMET:
        from mtkit.scoring import comet

        _COMET[key] = comet.load(
            name, what="comet", device=device, reference_free=False, otherwise="MBR needs a COMET-22 model"
        )
    return _COMET[key]


def comet_matrix(
    hypotheses: Sequence[Sequence[str]], references: Sequence[Sequence[str]], sources: Sequence[str], scorer
) -> list:
    """COMET-22 of every hypothesis against every reference, on its sentence's source, x 100:
    [sentence][hypothesis][reference]. Each distinct text is encoded once; the estimator runs on each pair."""
    import torch

    texts = [*sources, *(t for hyps in hypotheses for t in hyps), *(t for refs in references for t in refs)]
    embeddings = scorer.embed(texts)
    src_emb, at = embeddings[: len(sources)], len(sources)
    hyp_at, ref_at = [], []
    for hyps in hypotheses:
        hyp_at.append(at)
        at += len(hyps)
    for refs in references:
        ref_at.append(at)
        at += len(refs)
    out = []
    for k, (hyps, refs) in enumerate(zip(hypotheses, references)):
        n, m = len(hyps), len(refs)
        if not n or not m:
            out.append([[0.0] * m for _ in range(n)])
            continue
        mt = embeddings[hyp_at[k] : hyp_at[k] + n].repeat_interleave(m, dim=0)
        ref = embeddings[ref_at[k] : ref_at[k] + m].repeat(n, 1)
        scores = scorer.estimate(mt, src_emb[k : k + 1].expand(n * m, -1), ref) * 100.0
        out.append(torch.as_tensor(scores).view(n, m).tolist())
    return out


MATRICES: dict[str, Callable] = {"chrf": chrf_matrix, "bleu": bleu_matrix, "comet": comet_matrix}


def expected_utilities(
    candidates: Sequence[Sequence[str]],
    references: Sequence[Sequence[str]],
    utility: str = "chrf",
    sources: Optional[Sequence[str]] = None,
    scorer=None,
) -> list[list[float]]:
    """Each candidate's mean utility against its sentence's references, 0-100 (COMET: its score x 100):
    [sentence][candidate]. ``sources`` and ``scorer`` (a COMET-22 model) are for the comet utility."""
    if utility == "comet":
        matrix = comet_matrix(candidates, references, sources, scorer)
    else:
        matrix = MATRICES[utility](candidates, references)
    return [[sum(row) / max(len(row), 1) for row in sentence] for sentence in matrix]


def rank(
    candidates: list[list[Decoded]],
    texts: list[list[str]],
    references: Optional[list[list[str]]],
    utility: str,
    nbest: int,
    sources: Optional[Sequence[str]] = None,
    scorer=None,
) -> list[list[Decoded]]:
    """Each sentence's candidates by expected utility, best first (ties: the earlier candidate), one per distinct
    text, at most ``nbest``; their ``score`` is the expected utility / 100.

    Args:
        candidates: per sentence, the candidate hypotheses.
        texts: their texts, in the same order.
        references: per sentence, the pseudo-references' texts; None: the candidates' own texts.
        utility: "chrf", "bleu" or "comet".
        nbest: how many to keep.
        sources: per sentence, the source text (the comet utility reads it).
        scorer: the COMET-22 model of the comet utility (``comet_scorer``).
    """
    refs = texts if references is None else references
    utilities = expected_utilities(texts, refs, utility, sources, scorer)
    out = []
    for hyps, sentence_texts, values in zip(candidates, texts, utilities):
        order = sorted(range(len(hyps)), key=lambda i: (-values[i], i))
        kept, seen = [], set()
        for i in order:
            if sentence_texts[i] in seen:
                continue
            seen.add(sentence_texts[i])
            hyps[i].score = values[i] / 100.0
            kept.append(hyps[i])
            if len(kept) == nbest:
                break
        out.append(kept)
    return out


def texts_of(found: list[list[Decoded]], detokenize: Callable) -> list[list[str]]:
    """The text of every hypothesis, per sentence (``detokenize``: lists of target ids -> their texts)."""
    return [detokenize([h.tokens for h in hyps]) if hyps else [] for hyps in found]


def comet_inputs(options, src_ids, decode_src, device: str = "cpu") -> dict:
    """``rank``'s ``sources`` and ``scorer`` where the utility is comet (the sources' texts from their ids), else
    nothing."""
    if options.param("mbr_utility") != "comet":
        return {}
    scorer = comet_scorer(options.param("comet_model"), device)
    return {"sources": decode_src(src_ids), "scorer": scorer}


def run_mbr(
    model, src, options, common: dict, generator=None, detokenize=None, decode_src=None, **_
) -> list[list[Decoded]]:
    """The ``mbr`` entry's torch runner: candidates by epsilon sampling (``mbr_epsilon`` > 0) or a beam of
    ``mbr_candidates`` (``mbr_epsilon`` 0), pseudo-references drawn apart where ``mbr_pseudo_references`` asks,
    then ``rank``."""
    from mtkit.decoding.sampling import sample
    from mtkit.decoding.search import beam_search

    n, epsilon = options.param("mbr_candidates"), options.param("mbr_epsilon")
    if epsilon > 0:
        found = sample(
            model, src, epsilon=epsilon, generator=generator, nbest=n, length_penalty=options.length_penalty, **common
        )
    else:
        found = beam_search(
            model,
            src,
            beam_size=n,
            nbest=n,
            length_penalty=options.length_penalty,
            stopping=options.stopping,
            **common,
        )
    texts = texts_of(found, detokenize)
    references = None
    pseudo = options.param("mbr_pseudo_references")
    if pseudo:  # epsilon samples (candidates from a beam: at the default epsilon, not from the whole distribution)
        drawn = sample(
            model,
            src,
            epsilon=epsilon or REFERENCE_EPSILON,
            generator=generator,
            nbest=pseudo,
            length_penalty=options.length_penalty,
            **{**common, "need_attention": False},
        )
        references = texts_of(drawn, detokenize)
    ids = [[t for t in row if t > 3] for row in src.tolist()]  # no special ids (PAD, EOS...)
    extra = comet_inputs(options, ids, decode_src, "cpu" if src.device.type == "cpu" else str(src.device))
    return rank(found, texts, references, options.param("mbr_utility"), options.nbest, **extra)
