"""The torch engine: ``TorchEngine`` decodes a model (one, an ``Ensemble`` of several, or a shortlisted one) with
the decoding algorithm its options name (``mtkit.decoding.algorithms``: beam search, greedy, sampling...)."""

from __future__ import annotations

import dataclasses
import math
from typing import Optional

import torch

from mtkit.decoding.constraints import Guidance, Guide
from mtkit.inference.engine import Engine, decode_groups
from mtkit.inference.options import Options
from mtkit.models import EOS, PAD, Seq2Seq, State
from mtkit.tokenizer import NUM_SPECIAL


@dataclasses.dataclass
class EnsembleState(State):
    states: list


class Ensemble(Seq2Seq):
    """Several models with one target vocabulary: log of the averaged probabilities at each step."""

    def __init__(self, models: list[Seq2Seq]):
        super().__init__()
        self.models = torch.nn.ModuleList(models)
        self.src_vocab_size, self.tgt_vocab_size = models[0].src_vocab_size, models[0].tgt_vocab_size
        self.max_positions = min(m.max_positions for m in models)

    def encode(self, src, src_mask):
        return [m.encode(src, src_mask) for m in self.models]

    def encode_parts(self, src, src_mask, sizes):
        return [m.encode_parts(src, src_mask, sizes) for m in self.models]

    def init_state(self, memory, src_mask):
        return EnsembleState([m.init_state(mem, src_mask) for m, mem in zip(self.models, memory)])

    def step(self, prev_tokens, state, need_attention=False):
        outs = [m.step(prev_tokens, s, need_attention) for m, s in zip(self.models, state.states)]
        log_probs = torch.logsumexp(torch.stack([o[0] for o in outs]), dim=0) - math.log(len(outs))
        attn = [o[2] for o in outs if o[2] is not None]
        attention = torch.stack(attn).mean(0) if attn else None
        return log_probs, EnsembleState([o[1] for o in outs]), attention

    def forward(self, src, tgt_in):
        logps = torch.stack([m(src, tgt_in).float().log_softmax(-1) for m in self.models])
        return torch.logsumexp(logps, dim=0) - math.log(len(self.models))


class TorchEngine(Engine):
    """The torch engine: a model (or an ensemble, or a shortlisted model) decoded by ``mtkit.decoding.search``.

    Lines with instructions share batches with plain ones. A batch with a constraint runs beam search: with
    ``beam_size`` 1 that is the constrained beam search with one beam, which meets the constraints but places them
    as early as it can (sampling refuses constraints). A batch with prefixes or avoided phrases only runs the
    configured search (greedy, beam or sampling) with them.
    """

    def __init__(self, model: Seq2Seq, tokenizer, options: Options, device: torch.device):
        super().__init__(tokenizer, options, model.max_positions)
        self.model, self.device = model, device
        self._generators: dict[tuple[str, int], torch.Generator] = {}  # one stream of draws per seed option
        self.generator = self.generator_for(options)
        self._glue: Optional[torch.Tensor] = None

    def generator_for(self, options: Options) -> Optional[torch.Generator]:
        """The generator of the draws of ``options``' algorithm (None for one that does not draw): one per seed,
        made on first use, so that successive calls with one seed continue one stream, the loaded options' or a
        call's own."""
        seed = options.chosen.seed  # the option seeding an algorithm that draws
        if not seed:
            return None
        key = (seed, options.param(seed))
        if key not in self._generators:
            self._generators[key] = torch.Generator(device="cpu").manual_seed(key[1])
        return self._generators[key]

    def restart_draws(self, options: Options) -> None:
        seed = options.chosen.seed
        if seed:
            self._generators.pop((seed, options.param(seed)), None)

    dtype_name = "float32"  # what computes (``dtype: auto`` resolved) and why: set by whoever loads the model
    dtype_reason = ""

    def describe(self) -> str:
        why = f"; {self.dtype_reason}" if self.dtype_reason else ""
        return f"torch on {self.device}, {torch.get_num_threads()} threads, {self.dtype_name}{why}"

    def glue(self) -> torch.Tensor:
        """(vocab,) bool: the target subwords that continue a word: no leading U+2581, a letter or digit first
        (punctuation may follow a word)."""
        if self._glue is None:
            pieces = self.tokenizer.tgt_pieces(range(self.tokenizer.tgt_vocab_size))
            self._glue = torch.tensor([i >= NUM_SPECIAL and p[:1].isalnum() for i, p in enumerate(pieces)])
        return self._glue

    @torch.inference_mode()
    def translate_ids(
        self,
        ids: list[list[int]],
        guidance: Optional[list[Optional[Guidance]]] = None,
        options: Optional[Options] = None,
    ) -> list[list]:
        results: list[list] = [[] for _ in ids]  # empty inputs give empty outputs without a model call
        o = options or self.options
        generator = self.generator_for(o)
        for idx, sizes in decode_groups(ids, o):
            items = [guidance[i] for i in idx] if guidance is not None else []
            guide = Guide(items, self.device, self.glue()) if any(items) else None
            width = max(len(ids[i]) for i in idx) + 1
            src = torch.full((len(idx), width), PAD, dtype=torch.long)
            for row, i in enumerate(idx):
                src[row, : len(ids[i])] = torch.tensor(ids[i], dtype=torch.long)
                src[row, len(ids[i])] = EOS
            src = src.to(self.device)
            common = dict(
                max_len_a=o.max_len_a, max_len_b=o.max_len_b, need_attention=o.alignments, guide=guide, parts=sizes
            )  # the algorithm of o.algorithm runs the batch (mtkit.decoding.algorithms)
            out = o.chosen.runner()(
                self.model,
                src,
                o,
                common,
                generator,
                detokenize=self.tokenizer.decode_tgt,
                decode_src=self.tokenizer.decode_src,
            )
            for i, hyps in zip(idx, out):
                results[i] = hyps
        return results
