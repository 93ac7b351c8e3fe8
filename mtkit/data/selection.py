"""Which of a teacher's n-best hypotheses becomes a distilled training target (``mtkit distill --select``).

- ``chrf`` (the default) and ``bleu``: the hypothesis closest to the sentence's reference by sacreBLEU's
  sentence-level chrF or BLEU (BLEU with the effective n-gram order and exponential smoothing, as
  ``sacrebleu.sentence_bleu``), as Bergamot's bestbleu keeps the best of an n-best list; of equal scores the
  teacher's better-ranked hypothesis wins.
- ``top``: the teacher's best hypothesis; the reference is not read (the n-best list holds only it).
- ``mbr``: minimum Bayes risk over the n-best list (``mtkit.decoding.mbr``'s rule with the list as candidates and
  pseudo-references): the hypothesis of highest mean chrF against the list; the reference is not read.
"""

from __future__ import annotations

from typing import Sequence

from mtkit.errors import MtkitError

SELECTIONS = ("chrf", "bleu", "top", "mbr")


def check_selection(rule: str) -> str:
    """The selection rule ``rule``, checked.

    Args:
        rule: the ``--select`` value.

    Returns:
        ``rule``, one of ``SELECTIONS``.

    Raises:
        MtkitError: another value, naming the accepted ones.
    """
    if rule not in SELECTIONS:
        raise MtkitError(
            f"--select {rule!r}: use chrf or bleu (the n-best hypothesis closest to the reference), top "
            "(the teacher's best) or mbr (the one closest to the others by chrF)"
        )
    return rule


class Selector:
    """Picks a hypothesis from each n-best list by one rule.

    Args:
        rule: one of ``SELECTIONS``.

    Raises:
        MtkitError: an unknown rule.
    """

    def __init__(self, rule: str):
        self.rule = check_selection(rule)
        self.metric = None
        if rule in ("chrf", "bleu"):
            from sacrebleu.metrics import BLEU, CHRF

            self.metric = CHRF() if rule == "chrf" else BLEU(effective_order=True)

    def score(self, hypothesis: str, reference: str) -> float:
        """The sentence-level score of a hypothesis.

        Args:
            hypothesis: one translation.
            reference: the sentence's reference translation.

        Returns:
            sacreBLEU's sentence chrF or BLEU (0 to 100); 0 under the rule ``top``.
        """
        if self.metric is None:
            return 0.0
        return float(self.metric.sentence_score(hypothesis, [reference]).score)

    def pick(self, hypotheses: Sequence[str], reference: str) -> int:
        """The index of the kept hypothesis.

        Args:
            hypotheses: the teacher's n-best list, best first.
            reference: the sentence's reference translation.

        Returns:
            The index in ``hypotheses`` of the hypothesis kept; -1 for an empty list.
        """
        if not hypotheses:
            return -1
        if len(hypotheses) == 1 or self.rule == "top":
            return 0
        if self.rule == "mbr":  # chrF of each hypothesis against every one of the list, itself included
            import fastchrf

            [matrix] = fastchrf.pairwise_chrf([list(hypotheses)], [list(hypotheses)])
            means = [sum(row) / len(row) for row in matrix]
            return max(range(len(means)), key=lambda i: (means[i], -i))
        scores = [self.score(h, reference) for h in hypotheses]
        return max(range(len(scores)), key=lambda i: (scores[i], -i))  # the first of the best
