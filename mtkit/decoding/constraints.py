"""Decoding instructions for ``mtkit.decoding.search``, as target token ids, and the beam search that follows them.

There are three kinds of instruction: a forced target prefix, lexical constraints (phrases the output must
contain) and avoided phrases (phrases it must not contain). ``Guidance`` holds one sentence's instructions.
``Guide`` holds a batch's as tensors, with the state of every hypothesis. Greedy decoding and sampling consult a
``Guide`` at each step (``path_guide``). Beam search hands it to ``ConstrainedStrategy``, its candidate selection
(``beam_strategy``). Without a ``Guide`` every decoder runs unconstrained, as if no instructions were given.

Phrase tracking. Each constraint and each avoided phrase is followed by its own small automaton (Knuth-Morris-Pratt):
a hypothesis's state for a phrase is the length of the longest start of the phrase that the hypothesis ends with.
A constraint is met once its state reaches its length, and stays met; an avoided phrase's last token is banned
while the hypothesis ends with the phrase's other tokens (so it never appears after the prefix). The automata's
transitions for every (state, phrase token) are tabled once per batch, so a step is a few gathers over all rows.

Prefix. The prefix's tokens are forced one per step; a forced token adds nothing to a hypothesis's log-prob (its
``token_log_probs`` entry is 0.0) and the length penalty counts only the tokens after the prefix (EOS included):
score and log-prob are those of the continuation given the prefix. Avoided phrases are not checked inside the
prefix (it is taken as given), constraints are (a constraint the prefix contains is met).

Constrained beam search (dynamic beam allocation, Post & Vilar 2018, vectorised as Hu et al. 2019). Each beam
proposes its ``2k`` best tokens plus the next token of every constraint it has not met; each candidate's number of
met constraint tokens puts it in a bank; the ``2k`` candidates kept are taken from the banks in turn, the most
advanced bank first (the best of each bank, then the second best of each, ...), so hypotheses that honour
constraints are not crowded out by likelier ones that do not. A hypothesis may end (EOS) only once it has met all
its constraints, and a candidate is dropped when the tokens its unmet constraints still need no longer fit in its
length limit (finishing the most advanced constraint, then writing the others out: an upper bound on what it
needs). The output limit of a sentence is raised to at least its prefix plus its constraints, so some hypothesis
can always meet them all: every finished hypothesis meets every constraint.
"""

from __future__ import annotations

from typing import Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch import Tensor

from mtkit.decoding.guidance import Guidance, Phrase
from mtkit.decoding.hypothesis import length_penalty_of
from mtkit.decoding.strategy import NEG_INF, BeamStrategy, Candidates, PlainStrategy, force_eos, row_topk
from mtkit.models.base import EOS


def transitions(phrase: Phrase, absorbing: bool) -> list[list[int]]:
    """The Knuth-Morris-Pratt automaton of a phrase, as a table.

    Args:
        phrase: the phrase's tokens.
        absorbing: the full state (phrase met) is kept whatever follows.

    Returns:
        Entry ``[q][j]`` is the state after token ``phrase[j]`` in state ``q``, for ``0 <= q <= len(phrase)``.
    """
    n = len(phrase)
    table = []
    for q in range(n + 1):
        row = []
        for j in range(n):
            if absorbing and q == n:
                row.append(n)
                continue
            text = phrase[:q] + (phrase[j],)
            length = min(n, len(text))
            while length and phrase[:length] != text[len(text) - length :]:
                length -= 1
            row.append(length)
        table.append(row)
    return table


class _Phrases:
    """One kind of phrase (constraints or avoided) for a batch: (sentences, phrases, tokens) tensors."""

    def __init__(self, per_sentence: Sequence[Sequence[Phrase]], absorbing: bool, device: torch.device):
        self.count = max((len(p) for p in per_sentence), default=0)  # phrases per sentence (padded)
        width = max((len(x) for p in per_sentence for x in p), default=0) or 1
        size = (len(per_sentence), self.count)
        self.tokens = torch.full((*size, width), -1, dtype=torch.long)  # -1 pads: equals no token
        self.lengths = torch.zeros(size, dtype=torch.long)  # 0 for a padding phrase
        self.table = torch.zeros((*size, width + 1, width), dtype=torch.long)
        for s, phrases in enumerate(per_sentence):
            for c, phrase in enumerate(phrases):
                n = len(phrase)
                self.tokens[s, c, :n] = torch.tensor(phrase)
                self.lengths[s, c] = n
                self.table[s, c, : n + 1, :n] = torch.tensor(transitions(tuple(phrase), absorbing)).view(n + 1, n)
        self.tokens, self.lengths, self.table = self.tokens.to(device), self.lengths.to(device), self.table.to(device)
        self.absorbing = absorbing

    def step(self, state: Tensor, sent: Tensor, tokens: Tensor) -> Tensor:
        """States (rows, P) and candidate tokens (rows, W) -> states after each candidate (rows, W, P)."""
        width = self.tokens.size(2)
        table = self.table[sent]  # (rows, P, L + 1, L)
        after = table.gather(2, state[:, :, None, None].expand(-1, -1, 1, width)).squeeze(2)  # (rows, P, L)
        hit = tokens[:, :, None, None].eq(self.tokens[sent][:, None])  # (rows, W, P, L)
        new = (hit * after[:, None]).amax(dim=3)  # (rows, W, P)
        if self.absorbing:
            lengths = self.lengths[sent][:, None]  # (rows, 1, P)
            new = torch.where(state[:, None].eq(lengths), lengths, new)
        return new


class Guide:
    """A batch's instructions and the phrase states of its hypotheses (rows), for one search call.

    Args:
        items: one ``Guidance`` per sentence; None for a sentence without instructions.
        device: where the search runs.
        glue: (vocab,) bool, the tokens that continue a word; None to allow any token anywhere. Where given, the
            token after a prefix that ended in a space (``new_word``) and the token after a constraint's last
            one must not continue the word. A constraint "Rad" is then met by the word "Rad", not by the start
            of "Radfahrer".
    """

    def __init__(self, items: Sequence[Optional[Guidance]], device: torch.device, glue: Optional[Tensor] = None):
        items = [g or Guidance() for g in items]
        width = max((len(g.prefix) for g in items), default=0)
        self.prefix = torch.zeros(len(items), max(width, 1), dtype=torch.long)
        for s, g in enumerate(items):
            self.prefix[s, : len(g.prefix)] = torch.tensor(g.prefix, dtype=torch.long)
        self.prefix = self.prefix.to(device)
        self.prefix_len = torch.tensor([len(g.prefix) for g in items], dtype=torch.long, device=device)
        self.longest_prefix = width
        self.new_word = torch.tensor([g.new_word for g in items], dtype=torch.bool, device=device)
        self.constraints = _Phrases([g.constraints for g in items], True, device)
        wanted = bool(self.new_word.any()) or self.constraints.count > 0
        self.glue = glue.to(device) if glue is not None and wanted else None
        self.avoid = _Phrases([g.avoid for g in items], False, device)
        self.needs = self.prefix_len + self.constraints.lengths.sum(dim=1)  # (batch,) tokens the output must hold
        self.banks = int(self.constraints.lengths.sum(dim=1).max()) if items else 0  # most constraint tokens

    @property
    def has_constraints(self) -> bool:
        return self.constraints.count > 0

    # ----------------------------------------------------------------------------------------- setup, rows
    def start(self, max_len: Tensor, cap: Optional[int], copies: int, beam: bool = True) -> Tensor:
        """Begin a search: every sentence gets ``copies`` rows, each with fresh phrase states.

        Args:
            max_len: (batch,) output limits from the length options.
            cap: the model's limit on output tokens, or None.
            copies: rows per sentence (beams, or samples).
            beam: the search is a beam search; the others cannot honour constraints.

        Returns:
            (batch,) ``max_len`` raised to fit each sentence's prefix and constraints.

        Raises:
            ValueError: there are constraints and ``beam`` is False, or some sentence's prefix and constraints
                take more than ``cap`` tokens.
        """
        if self.has_constraints and not beam:
            raise ValueError("lexical constraints need beam search (greedy and sampling cannot honour them)")
        if cap is not None and bool(self.needs.gt(cap).any()):
            s = int(self.needs.gt(cap).nonzero()[0])
            raise ValueError(
                f"sentence {s + 1}: its prefix and constraints take {int(self.needs[s])} target tokens, "
                f"more than the model's limit of {cap}"
            )
        device = max_len.device
        self.live = torch.arange(max_len.numel(), device=device)  # (live,) sentence of each live group of rows
        self.copies = copies
        self.sent = self.live.repeat_interleave(copies)  # (rows,) sentence of each row
        rows = self.sent.numel()
        self.con_state = torch.zeros(rows, self.constraints.count, dtype=torch.long, device=device)
        self.avoid_state = torch.zeros(rows, self.avoid.count, dtype=torch.long, device=device)
        self.word_end = torch.zeros(rows, dtype=torch.bool, device=device)  # a constraint just ended: a new word
        return torch.maximum(max_len, self.needs)

    def keep(self, index: Tensor) -> None:
        """Single path: keep only the rows ``index`` (paths that have not ended)."""
        self.sent, self.avoid_state, self.word_end = self.sent[index], self.avoid_state[index], self.word_end[index]

    def prefix_lengths(self) -> list[int]:
        """Each sentence's prefix length in tokens."""
        return self.prefix_len.tolist()

    # ------------------------------------------------------------------------------------------ masking
    def ban(self, log_probs: Tensor, t: int) -> None:
        """Ban, in place in ``log_probs`` (rows, vocab), the tokens that must not come next.

        Those are the last token of each avoided phrase whose other tokens were just written, and word
        continuations where a new word must start.
        """
        if self.avoid.count:
            lengths = self.avoid.lengths[self.sent]  # (rows, A)
            hit = self.avoid_state.eq(lengths - 1) & lengths.gt(0)  # (rows, A)
            last = self.avoid.tokens[self.sent].gather(2, (lengths - 1).clamp(min=0).unsqueeze(2)).squeeze(2)
            ban = torch.where(hit, NEG_INF, float("inf"))  # amin with +inf leaves a log-prob as it is
            log_probs.scatter_reduce_(1, last.clamp(min=0), ban.to(log_probs.dtype), reduce="amin")
        if self.glue is not None:
            new_word = self.word_end
            if t <= self.longest_prefix:
                new_word = new_word | (self.prefix_len[self.sent].eq(t) & self.new_word[self.sent])  # (rows,)
            log_probs.masked_fill_(new_word.unsqueeze(1) & self.glue, NEG_INF)

    def forced(self, t: int) -> tuple[Optional[Tensor], Optional[Tensor]]:
        """Which rows write a prefix token at step ``t`` (rows,) bool, and which token (rows,).

        Both are None past every prefix.
        """
        if t >= self.longest_prefix:
            return None, None
        return self.prefix_len[self.sent].gt(t), self.prefix[self.sent, t]

    def mask(self, scores: Tensor, t: int) -> tuple[Tensor, Optional[Tensor]]:
        """Single path: apply the bans and force the prefix tokens of step ``t``.

        Args:
            scores: (rows, vocab) scores to choose from; changed in place.
            t: the step.

        Returns:
            The scores, with a forced prefix token as its row's only finite score, and the (rows,) bool mask of
            the rows that write a prefix token (None past every prefix).
        """
        self.ban(scores, t)
        forced, tokens = self.forced(t)
        if forced is not None:
            only = torch.full_like(scores, NEG_INF).scatter_(1, tokens.unsqueeze(1), 0.0)
            scores = torch.where(forced.unsqueeze(1), only, scores)
        return scores, forced

    def advance(self, tokens: Tensor) -> None:
        """Single path: every row wrote its token of ``tokens`` (rows,)."""
        if self.avoid.count:
            self.avoid_state = self.avoid.step(self.avoid_state, self.sent, tokens.unsqueeze(1)).squeeze(1)


class ConstrainedStrategy:
    """Beam search that follows a ``Guide``: prefixes, lexical constraints and avoided phrases.

    Candidates come from dynamic beam allocation (the module docstring). Without constraints the order is by
    score, as in ``strategy.PlainStrategy``. The length penalty does not count the prefix.

    Args:
        guide: the batch's instructions; this strategy keeps the phrase states of its hypotheses.
        length_penalty: GNMT's alpha.
    """

    def __init__(self, guide: Guide, length_penalty: float):
        self.guide, self.alpha = guide, length_penalty

    def start(self, max_len: Tensor, max_len_cap: Optional[int], beam_size: int) -> Tensor:
        self.k = beam_size
        self.max_len = self.guide.start(max_len, max_len_cap, beam_size)  # (live,)
        return self.max_len

    def penalty(self, length: Union[int, Tensor]) -> Tensor:
        prefix = self.guide.prefix_len[self.guide.live].unsqueeze(1)  # (live, 1) not counted in the length
        return length_penalty_of((length - prefix).double(), self.alpha).float()  # float64, rounded once

    def step(self, t: int, log_probs: Tensor, beam_scores: Tensor) -> Candidates:
        g, k, live = self.guide, self.k, beam_scores.size(0)
        g.ban(log_probs, t)
        row_log_probs, row_tokens = row_topk(log_probs, min(2 * k, log_probs.size(1)))  # (rows, width)
        if g.has_constraints:  # the next token of every unmet constraint, once per row
            lengths = g.constraints.lengths[g.sent]  # (rows, C)
            position = g.con_state.clamp(max=g.constraints.tokens.size(2) - 1).unsqueeze(2)
            nxt = g.constraints.tokens[g.sent].gather(2, position).squeeze(2)  # (rows, C)
            nxt = nxt.masked_fill(g.con_state.ge(lengths), -1)
            earlier = torch.ones(nxt.size(1), nxt.size(1), dtype=torch.bool, device=nxt.device).tril(-1)
            dup = nxt.unsqueeze(2).eq(row_tokens.unsqueeze(1)).any(2)
            dup |= (nxt.unsqueeze(2).eq(nxt.unsqueeze(1)) & earlier).any(2)
            nxt = nxt.masked_fill(dup, -1)
            nxt_log_probs = log_probs.gather(1, nxt.clamp(min=0)).masked_fill(nxt.lt(0), NEG_INF)
            row_tokens = torch.cat([row_tokens, nxt.clamp(min=0)], dim=1)  # (rows, W)
            row_log_probs = torch.cat([row_log_probs, nxt_log_probs], dim=1)
        forced, prefix_tokens = g.forced(t)
        if forced is not None:  # a prefix token is the only candidate, at no cost
            only_prefix = torch.full_like(row_log_probs, NEG_INF)
            only_prefix[:, 0] = 0.0
            row_log_probs = torch.where(forced.unsqueeze(1), only_prefix, row_log_probs)
            row_tokens = torch.where(forced.unsqueeze(1), prefix_tokens.unsqueeze(1), row_tokens)
        limit = self.max_len.repeat_interleave(k)  # (rows,)
        row_log_probs, row_tokens = force_eos(limit.le(t).unsqueeze(1), log_probs, row_log_probs, row_tokens)
        width = row_tokens.size(1)

        con_after = ends_word = None
        if g.has_constraints:
            con_after = g.constraints.step(g.con_state, g.sent, row_tokens)  # (rows, W, C)
            lengths = g.constraints.lengths[g.sent].unsqueeze(1)  # (rows, 1, C)
            unmet = con_after.lt(lengths)
            ends_word = (~unmet & g.con_state.lt(lengths.squeeze(1)).unsqueeze(1)).any(2)  # (rows, W)
            needs = (lengths * unmet).sum(2) - (con_after * unmet).amax(2)  # (rows, W) tokens still needed
            allowed = torch.where(row_tokens.eq(EOS), needs.eq(0), needs.le((limit - t - 1).unsqueeze(1)))
            row_log_probs = row_log_probs.masked_fill(~allowed, NEG_INF)
        avoid_after = g.avoid.step(g.avoid_state, g.sent, row_tokens) if g.avoid.count else None

        cand = (row_log_probs + beam_scores.view(-1, 1)).view(live, k * width)  # (live, k * W) cumulative
        n = min(2 * k, k * width)
        if con_after is None:
            scores, index = cand.topk(n, dim=1)
        else:  # banks in turn: rank within the bank first, then the more advanced bank
            order = cand.argsort(dim=1, descending=True, stable=True)  # (live, kW)
            bank = con_after.sum(2).view(live, k * width).gather(1, order)
            one_hot = F.one_hot(bank, g.banks + 1)  # (live, kW, banks + 1)
            rank = (one_hot.cumsum(1) * one_hot).sum(2) - 1  # place within its bank, by score
            key = rank * (g.banks + 1) + (g.banks - bank)
            spare = torch.arange(k * width, device=key.device) + (k * width) * (g.banks + 1)
            key = torch.where(cand.gather(1, order).gt(NEG_INF), key, spare)  # dead candidates last
            index = order.gather(1, key.topk(n, dim=1, largest=False).indices)  # (live, n)
            scores = cand.gather(1, index)
        self._index = index
        self._con_after = None if con_after is None else con_after.view(live, k * width, -1)
        self._avoid_after = None if avoid_after is None else avoid_after.view(live, k * width, -1)
        self._ends_word = None if ends_word is None else ends_word.view(live, k * width, 1)
        tokens = row_tokens.view(live, k * width).gather(1, index)
        next_scores, chosen = self._continuing(scores, tokens.eq(EOS))
        return Candidates.picked(scores, index, row_log_probs, tokens, next_scores, chosen)

    def _continuing(self, scores: Tensor, is_eos: Tensor) -> tuple[Tensor, Tensor]:
        """The first ``k`` non-EOS candidates in the order taken: (live, k) cumulative scores and indices."""
        if not self.guide.has_constraints:  # the order is by score: the plain rule
            return scores.masked_fill(is_eos, NEG_INF).topk(self.k, dim=1)
        ok = ~is_eos & scores.gt(NEG_INF)  # (live, 2k)
        place = torch.arange(ok.size(1), device=ok.device)
        chosen = torch.where(ok, place, place + ok.size(1)).topk(self.k, dim=1, largest=False).indices  # (live, k)
        return scores.gather(1, chosen).masked_fill(~ok.gather(1, chosen), NEG_INF), chosen

    def follow(self, chosen: Tensor, keep: Optional[Tensor]) -> None:
        g = self.guide
        picked = self._index.gather(1, chosen)  # (live, k) into the k * W candidates
        if keep is not None:
            picked, g.live, self.max_len = picked[keep], g.live[keep], self.max_len[keep]
        g.sent = g.live.repeat_interleave(g.copies)
        rows = g.sent.numel()
        g.con_state = _follow(self._con_after, picked, keep, rows)
        g.avoid_state = _follow(self._avoid_after, picked, keep, rows)
        ends_word = _follow(self._ends_word, picked, keep, rows)
        g.word_end = ends_word.squeeze(1) if ends_word.size(1) else g.word_end.new_zeros(rows)


def _follow(after: Optional[Tensor], picked: Tensor, keep: Optional[Tensor], rows: int) -> Tensor:
    """The (rows, P) states of the picked candidates (live, k), from per-candidate states (live, kW, P).

    Without per-candidate states (None) the result is (rows, 0).
    """
    if after is None:
        return picked.new_zeros(rows, 0)
    if keep is not None:
        after = after[keep]
    return after.gather(1, picked.unsqueeze(2).expand(-1, -1, after.size(2))).reshape(rows, after.size(2))


class Unguided:
    """The single-path decoders' stand-in for a missing ``Guide``: no prefix, nothing banned."""

    def start(self, max_len: Tensor, cap: Optional[int], copies: int, beam: bool = True) -> Tensor:
        self.batch = max_len.numel()
        return max_len

    def keep(self, index: Tensor) -> None:
        pass

    def prefix_lengths(self) -> list[int]:
        return [0] * self.batch

    def mask(self, scores: Tensor, t: int) -> tuple[Tensor, Optional[Tensor]]:
        return scores, None

    def advance(self, tokens: Tensor) -> None:
        pass


def path_guide(guide: Optional[Guide]) -> Union[Guide, Unguided]:
    """What greedy decoding and sampling consult at each step.

    Args:
        guide: the batch's instructions, or None.

    Returns:
        ``guide`` itself, or an ``Unguided`` that changes nothing.
    """
    return Unguided() if guide is None else guide


def beam_strategy(guide: Optional[Guide], length_penalty: float) -> BeamStrategy:
    """The candidate selection for a beam search.

    Args:
        guide: the batch's instructions, or None.
        length_penalty: GNMT's alpha.

    Returns:
        A ``ConstrainedStrategy`` that follows ``guide``, or a ``strategy.PlainStrategy`` without one.
    """
    return PlainStrategy(length_penalty) if guide is None else ConstrainedStrategy(guide, length_penalty)
