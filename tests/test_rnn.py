"""Bahdanau and Luong: causality, padding invariance, step == forward (through reorder), and learning."""

import pytest
import torch
import torch.nn.functional as F

from mtkit.config import BahdanauConfig, LuongConfig
from mtkit.models import build_model
from mtkit.models.base import BOS, EOS, PAD
from mtkit.models.rnn import Bahdanau, Luong

VOCAB = 12


pytestmark = pytest.mark.usefixtures("one_thread")


def _small(arch, **fields):
    base = dict(embed_dim=8, hidden_size=16, dropout=0.0)
    if arch == "bahdanau":
        return BahdanauConfig(arch="bahdanau", **{**base, **fields})
    return LuongConfig(arch="luong", **{**base, "layers": 2, **fields})


# every variant the equivalence tests cover: score kinds, local-p, with and without input feeding,
# untied and tied output with hidden != embed_dim, two encoder layers
VARIANTS = {
    "bahdanau": _small("bahdanau"),
    "bahdanau-2layer-untied": _small("bahdanau", encoder_layers=2, tie_embeddings=False),
    "luong-dot": _small("luong", score="dot"),
    "luong-general": _small("luong", score="general"),
    "luong-concat": _small("luong", score="concat"),
    "luong-location": _small("luong", score="location", max_positions=16),
    "luong-local_p": _small("luong", attention="local_p", window=2),
    "luong-general-no-feed": _small("luong", score="general", input_feeding=False),
    "luong-local_p-no-feed": _small("luong", attention="local_p", window=2, input_feeding=False, tie_embeddings=False),
    "luong-bidirectional": _small("luong", encoder="bidirectional"),
    "luong-bidirectional-no-feed": _small("luong", encoder="bidirectional", input_feeding=False),
}


def _model(name, seed=0):
    torch.manual_seed(seed)
    return build_model(VARIANTS[name], VOCAB, VOCAB, joint_vocab=True).eval()


def _sentence(length, generator):
    """Real tokens 4..VOCAB-1, then EOS."""
    return torch.randint(4, VOCAB, (length,), generator=generator).tolist() + [EOS]


def _pad(rows):
    out = torch.full((len(rows), max(map(len, rows))), PAD, dtype=torch.long)  # (batch, max_len)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row)
    return out


def _batch(src_lengths, tgt_lengths, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = _pad([_sentence(n, g) for n in src_lengths])
    tgt_in = _pad([[BOS] + _sentence(n, g)[:-1] for n in tgt_lengths])
    return src, tgt_in


def _decode_steps(model, src, tgt_in, reorder=None):
    """Step through tgt_in; returns log-probs (batch, tgt_len, vocab) and attention (batch, tgt_len, src_len)."""
    src_mask = src.ne(PAD)
    state = model.init_state(model.encode(src, src_mask), src_mask)
    log_probs, attention = [], []
    for t in range(tgt_in.size(1)):
        tokens = tgt_in[:, t]
        if reorder is not None:  # run this step on shuffled rows, then put them back
            state = state.reorder(reorder)
            tokens = tokens[reorder]
        lp, state, weights = model.step(tokens, state, need_attention=True)
        if reorder is not None:
            inverse = torch.argsort(reorder)
            lp, weights, state = lp[inverse], weights[inverse], state.reorder(inverse)
        log_probs.append(lp)
        attention.append(weights)
    return torch.stack(log_probs, 1), torch.stack(attention, 1)


# ------------------------------------------------------------------------------------------ building
def test_build_model_from_configs_and_attributes():
    bahdanau = build_model(_small("bahdanau", max_positions=64), 20, 20, joint_vocab=True)
    luong = build_model(_small("luong"), 20, 24, joint_vocab=False)
    assert isinstance(bahdanau, Bahdanau) and isinstance(luong, Luong)
    assert (bahdanau.src_vocab_size, bahdanau.tgt_vocab_size, bahdanau.max_positions) == (20, 20, 64)
    assert (luong.src_vocab_size, luong.tgt_vocab_size) == (20, 24)


def test_tied_embeddings_share_one_matrix():
    tied = build_model(_small("luong", embed_dim=8, hidden_size=16), VOCAB, VOCAB, joint_vocab=True)
    assert tied.out_proj.weight is tied.tgt_embed.weight and tied.src_embed is tied.tgt_embed
    assert isinstance(tied.pre_output, torch.nn.Linear)  # hidden 16 -> embed 8 before the tied matrix
    own_source = build_model(_small("bahdanau"), VOCAB + 3, VOCAB, joint_vocab=False)
    assert own_source.out_proj.weight is own_source.tgt_embed.weight
    assert own_source.src_embed is not own_source.tgt_embed
    untied = build_model(_small("luong", tie_embeddings=False), VOCAB, VOCAB, joint_vocab=True)
    assert untied.out_proj.weight is not untied.tgt_embed.weight and untied.src_embed is not untied.tgt_embed
    names = {name for name, _ in tied.named_parameters()}
    assert "out_proj.weight" not in names  # counted once


@pytest.mark.parametrize("arch", ["bahdanau", "luong"])
def test_param_init_range_or_pytorch_defaults(arch):
    torch.manual_seed(0)
    uniform = build_model(_small(arch, embed_dim=64, param_init=0.05), VOCAB, VOCAB, joint_vocab=True)
    assert all(p.abs().max() <= 0.05 for p in uniform.parameters())
    assert max(p.abs().max() for p in uniform.parameters()) > 0.045  # the whole range is used
    own = build_model(_small(arch, embed_dim=64, param_init=0.0), VOCAB, VOCAB, joint_vocab=True)
    embeddings = own.tgt_embed.weight[1:]  # row PAD stays zero either way
    assert 0.7 < embeddings.std() < 1.3 and torch.all(own.tgt_embed.weight[PAD] == 0)  # nn.Embedding: N(0, 1)


def test_dropout_is_active_in_training_only():
    torch.manual_seed(0)
    model = build_model(_small("luong", dropout=0.5), VOCAB, VOCAB, joint_vocab=True)
    src, tgt_in = _batch([5, 3], [4, 6])
    model.train()
    assert not torch.allclose(model(src, tgt_in), model(src, tgt_in))
    model.eval()
    torch.testing.assert_close(model(src, tgt_in), model(src, tgt_in), rtol=0, atol=0)


# ----------------------------------------------------------------------------------- (a) causality
@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.compares
def test_causality(name):
    model = _model(name)
    src, tgt_in = _batch([6, 4], [7, 7])
    logits = model(src, tgt_in)  # (batch, tgt_len, vocab)
    changed = tgt_in.clone()
    t = 3
    changed[:, t + 1 :] = torch.randint(4, VOCAB, changed[:, t + 1 :].shape, generator=torch.Generator().manual_seed(1))
    assert not torch.equal(changed, tgt_in)
    logits_changed = model(src, changed)
    torch.testing.assert_close(logits_changed[:, : t + 1], logits[:, : t + 1], rtol=0, atol=1e-6)
    assert not torch.allclose(logits_changed[:, t + 1 :], logits[:, t + 1 :])  # later positions do see tokens


# --------------------------------------------------------------------------- (b) padding invariance
@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.compares
def test_padding_invariance(name):
    model = _model(name)
    src, tgt_in = _batch([9, 4], [8, 5])  # row 1 is short on both sides
    short_src, short_tgt = src[1:, :5], tgt_in[1:, :5]  # row 1 with no padding at all
    assert torch.all(short_src != PAD) and torch.all(src[1, 5:] == PAD)
    with torch.no_grad():
        torch.testing.assert_close(model(src, tgt_in)[1:, :5], model(short_src, short_tgt), rtol=0, atol=1e-5)
        _, attention = _decode_steps(model, src, tgt_in)  # (batch, tgt_len, src_len)
        _, attention_alone = _decode_steps(model, short_src, short_tgt)
    torch.testing.assert_close(attention[1:, :5, :5], attention_alone, rtol=0, atol=1e-5)
    assert torch.all(attention[1, :, 5:] == 0)  # exactly zero on padding
    assert torch.all(attention >= 0)
    sums = attention.sum(-1)  # (batch, tgt_len)
    if getattr(model, "local", False):
        assert torch.all(sums <= 1 + 1e-6) and torch.all(sums > 0)  # Gaussian-weighted (paper, eq. 10)
    else:
        torch.testing.assert_close(sums, torch.ones_like(sums))


# ----------------------------------------------------------------- (c) incremental == full, reorder
@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.compares
def test_step_with_reorder_equals_forward(name):
    model = _model(name)
    src, tgt_in = _batch([7, 3, 5, 9], [6, 8, 2, 5])
    with torch.no_grad():
        full = F.log_softmax(model(src, tgt_in).float(), dim=-1)  # (batch, tgt_len, vocab)
        identity, _ = _decode_steps(model, src, tgt_in, reorder=torch.arange(4))
        shuffled, _ = _decode_steps(model, src, tgt_in, reorder=torch.tensor([2, 0, 3, 1]))
    assert identity.dtype == torch.float32
    torch.testing.assert_close(identity, full, rtol=0, atol=1e-5)
    torch.testing.assert_close(shuffled, full, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["bahdanau", "luong-local_p", "luong-general-no-feed"])
@pytest.mark.compares
def test_reorder_can_repeat_rows_like_beam_search(name):
    model = _model(name)
    src, tgt_in = _batch([5, 3], [4, 4])
    src_mask = src.ne(PAD)
    with torch.no_grad():
        state = model.init_state(model.encode(src, src_mask), src_mask)
        lp, state, _ = model.step(tgt_in[:, 0], state)
        beams = torch.tensor([0, 0, 0, 1, 1, 1])  # beam size 3
        expanded = state.reorder(beams)
        lp_beams, _, attention = model.step(tgt_in[beams, 1], expanded, need_attention=True)
        lp_ref, _, attention_ref = model.step(tgt_in[:, 1], state, need_attention=True)
    torch.testing.assert_close(lp_beams, lp_ref[beams])
    torch.testing.assert_close(attention, attention_ref[beams])


def _attention_after(model, src, tokens):
    """Attention weights of each step fed ``tokens`` (list of (batch,) tensors)."""
    src_mask = src.ne(PAD)
    state = model.init_state(model.encode(src, src_mask), src_mask)
    weights = []
    for prev in tokens:
        _, state, attention = model.step(prev, state, need_attention=True)
        weights.append(attention)
    return weights, state


def test_bahdanau_attends_with_previous_state_luong_with_current():
    src, _ = _batch([6, 4], [1, 1])
    a, b = torch.tensor([5, 6]), torch.tensor([9, 10])
    bos = torch.full((2,), BOS)
    with torch.no_grad():
        bahdanau, luong = _model("bahdanau"), _model("luong-general")
        for param in [*bahdanau.parameters(), *luong.parameters()]:
            param.mul_(10.0)  # far from the near-uniform attention of a fresh model
        # Bahdanau: step 1 scores s_0, which no target token has touched yet
        (first_a,), _ = _attention_after(bahdanau, src, [a])
        (first_b,), _ = _attention_after(bahdanau, src, [b])
        torch.testing.assert_close(first_a, first_b, rtol=0, atol=0)
        (_, second_a), _ = _attention_after(bahdanau, src, [a, bos])
        (_, second_b), _ = _attention_after(bahdanau, src, [b, bos])
        assert not torch.allclose(second_a, second_b)  # ... step 2 scores s_1, which has read it
        # Luong: the current state h_t already includes the token being read
        (first_a,), _ = _attention_after(luong, src, [a])
        (first_b,), _ = _attention_after(luong, src, [b])
        assert not torch.allclose(first_a, first_b)


@pytest.mark.parametrize("encoder", ["unidirectional", "bidirectional"])
def test_luong_encoder_directions(encoder):
    """Memory at position 0 sees later source tokens only when bidirectional; the decoder starts from each
    layer's final states, forward half at the last real token and backward half at the first."""
    torch.manual_seed(0)
    model = build_model(_small("luong", encoder=encoder), VOCAB, VOCAB, joint_vocab=True).eval()
    src, _ = _batch([6, 4], [1, 1])
    changed = src.clone()
    changed[:, 2] = torch.where(src[:, 2] == 4, 5, 4)  # a different real token at position 2 of both rows
    with torch.no_grad():
        memory = model.encode(src, src.ne(PAD))
        memory_changed = model.encode(changed, changed.ne(PAD))
    assert memory.outputs.shape == (2, 7, 16) and memory.hidden.shape == memory.cell.shape == (2, 2, 16)
    bidirectional = encoder == "bidirectional"
    assert torch.equal(memory.outputs[:, :2], memory_changed.outputs[:, :2]) != bidirectional
    assert not torch.allclose(memory.outputs[:, 2:], memory_changed.outputs[:, 2:])
    last = src.ne(PAD).sum(dim=1) - 1  # (batch,) position of EOS
    top_at_last = memory.outputs[torch.arange(2), last]  # (batch, 16)
    if bidirectional:  # top layer: [forward state after the last token; backward state after the first]
        torch.testing.assert_close(memory.hidden[:, -1, :8], top_at_last[:, :8], rtol=0, atol=0)
        torch.testing.assert_close(memory.hidden[:, -1, 8:], memory.outputs[:, 0, 8:], rtol=0, atol=0)
    else:
        torch.testing.assert_close(memory.hidden[:, -1], top_at_last, rtol=0, atol=0)


@pytest.mark.parametrize("input_feeding", [True, False])
def test_input_feeding_carries_the_attentional_state(input_feeding):
    """With input feeding, W_c (which only shapes h~_t) changes the next recurrent state; without, it cannot."""
    torch.manual_seed(0)
    model = build_model(_small("luong", input_feeding=input_feeding), VOCAB, VOCAB, joint_vocab=True).eval()
    src, tgt_in = _batch([6, 4], [3, 3])
    tokens = [tgt_in[:, 0], tgt_in[:, 1]]
    with torch.no_grad():
        _, before = _attention_after(model, src, tokens)
        model.combine.weight.mul_(-2.0)
        _, after = _attention_after(model, src, tokens)
    assert torch.allclose(before.hidden, after.hidden) != input_feeding


def test_local_p_attends_within_a_window():
    torch.manual_seed(0)
    model = build_model(_small("luong", attention="local_p", window=2), VOCAB, VOCAB, joint_vocab=True).eval()
    src, tgt_in = _batch([15, 9], [10, 10])
    with torch.no_grad():
        _, attention = _decode_steps(model, src, tgt_in)  # (batch, tgt_len, src_len)
    for row in attention.flatten(0, 1):
        nonzero = row.nonzero().flatten()
        # at most 2D + 1 = 5 consecutive positions
        assert 1 <= len(nonzero) <= 5 and nonzero[-1] - nonzero[0] == len(nonzero) - 1


# ---------------------------------------------------------------------------------------- (d) learning
LEARNERS = {
    "bahdanau": BahdanauConfig(arch="bahdanau", embed_dim=24, hidden_size=48, dropout=0.0),
    **{
        f"luong-{score}": LuongConfig(arch="luong", embed_dim=24, hidden_size=48, layers=1, score=score, dropout=0.0)
        for score in ("dot", "general", "concat", "location")
    },
    "luong-local_p": LuongConfig(
        arch="luong", embed_dim=24, hidden_size=48, layers=1, attention="local_p", window=2, dropout=0.0
    ),
}


def _copy_task(count=16, seed=0):
    """Sentences of 3-6 tokens; the target is the source (both end with EOS)."""
    g = torch.Generator().manual_seed(seed)
    sentences = [_sentence(int(torch.randint(3, 7, (1,), generator=g)), g) for _ in range(count)]
    src = _pad(sentences)  # (count, 7)
    tgt_in = _pad([[BOS] + s[:-1] for s in sentences])
    return src, tgt_in, src.clone()  # tgt_out == src for copying


def _greedy(model, src, max_len):
    src_mask = src.ne(PAD)
    state = model.init_state(model.encode(src, src_mask), src_mask)
    tokens = torch.full((src.size(0),), BOS, dtype=torch.long)
    output = []
    for _ in range(max_len):
        log_probs, state, _ = model.step(tokens, state)
        tokens = log_probs.argmax(-1)  # (batch,)
        output.append(tokens)
    return torch.stack(output, dim=1)  # (batch, max_len)


@pytest.mark.parametrize("name", LEARNERS)
def test_learns_to_copy(name):
    torch.manual_seed(0)
    model = build_model(LEARNERS[name], VOCAB, VOCAB, joint_vocab=True)
    src, tgt_in, tgt_out = _copy_task()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-2)
    for _ in range(150):
        loss = F.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt_out.flatten(), ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    assert loss.item() < 0.05
    model.eval()
    with torch.no_grad():
        hypotheses = _greedy(model, src, max_len=tgt_out.size(1))
    # every token and the EOS in the right place; what follows EOS does not matter
    real = tgt_out != PAD
    assert torch.equal(hypotheses[real], tgt_out[real])
