"""The Transformer: causality, padding invariance, cache == full forward, positions, size, and that it learns."""

import dataclasses

import pytest
import torch

from conftest import diverged_at_near_ties
from mtkit.config import TransformerConfig
from mtkit.models import BOS, EOS, PAD, build_model
from mtkit.models.positions import Rotary
from mtkit.models.transformer import MultiHeadAttention

POSITIONS = ["sinusoidal", "learned", "relative", "rope", "alibi"]


def relative(positions: str, k: int) -> dict:
    """max_relative_distance=k where the scheme reads it (alibi refuses the key)."""
    return {"max_relative_distance": k} if positions == "relative" else {}


def tiny(positions="sinusoidal", norm="pre", heads=4, d_model=32, **kw):
    cfg = TransformerConfig(
        **{
            "d_model": d_model,
            "heads": heads,
            "encoder_layers": 2,
            "decoder_layers": 2,
            "ffn_dim": 64,
            "positions": positions,
            "norm": norm,
            **relative(positions, 3),
            "dropout": 0.0,
            "max_positions": 64,
            **kw,
        }
    )
    torch.manual_seed(0)
    return build_model(cfg, 24, 24, joint_vocab=True).eval()


def batch():
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, 24, (3, 8), generator=g)
    src[:, -1] = EOS
    src[1, 5:] = PAD
    src[1, 4] = EOS
    tgt = torch.randint(4, 24, (3, 7), generator=g)
    tgt[:, 0] = BOS
    return src, tgt


def stepped_and_full(model, src, tgt, on_attention=None) -> tuple[torch.Tensor, torch.Tensor]:
    """The log-probs of ``tgt`` decoded one cached step at a time, and from one full forward pass; with
    ``on_attention``, each step's attention over the source is handed to it."""
    with torch.no_grad():
        full = model(src, tgt).log_softmax(-1)
        mask = src.ne(PAD)
        state = model.init_state(model.encode(src, mask), mask)
        steps = []
        for t in range(tgt.size(1)):
            log_probs, state, attn = model.step(tgt[:, t], state, need_attention=on_attention is not None)
            steps.append(log_probs)
            if on_attention is not None:
                on_attention(attn)
    return torch.stack(steps, 1), full


@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.parametrize("norm", ["pre", "post"])
@pytest.mark.compares
def test_cached_steps_equal_full_forward(positions, norm):
    def check(attn):
        assert torch.allclose(attn.sum(-1), torch.ones(3), atol=1e-5)
        assert attn[1, 5:].abs().max() == 0  # no attention on padding

    stepped, full = stepped_and_full(tiny(positions, norm), *batch(), on_attention=check)
    torch.testing.assert_close(stepped, full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.compares
def test_causality(positions):
    model = tiny(positions)
    src, tgt = batch()
    changed = tgt.clone()
    changed[:, 4:] = torch.randint(4, 24, changed[:, 4:].shape)
    with torch.no_grad():
        a, b = model(src, tgt), model(src, changed)
    torch.testing.assert_close(a[:, :4], b[:, :4])
    assert not torch.allclose(a[:, 4:], b[:, 4:])


@pytest.mark.parametrize("positions", POSITIONS)
@pytest.mark.compares
def test_padding_invariance(positions):
    model = tiny(positions)
    src, tgt = batch()
    alone_src = src[1:2, :5]  # sentence 1 is 5 tokens + padding in the batch
    with torch.no_grad():
        in_batch = model(src, tgt)[1]
        alone = model(alone_src, tgt[1:2])[0]
    torch.testing.assert_close(in_batch, alone, atol=1e-5, rtol=1e-5)


def after_first_step(model):
    """The toy batch and the decoder state after its first target token."""
    src, tgt = batch()
    mask = src.ne(PAD)
    with torch.no_grad():
        state = model.init_state(model.encode(src, mask), mask)
        return src, tgt, model.step(tgt[:, 0], state)[1]


@pytest.mark.compares
def test_reorder_selects_rows():
    model = tiny()
    _, tgt, state = after_first_step(model)
    with torch.no_grad():
        index = torch.tensor([2, 2, 0])
        lp_reordered, _, _ = model.step(tgt[index, 1], state.reorder(index))
        lp_all, _, _ = model.step(tgt[:, 1], state)
    torch.testing.assert_close(lp_reordered, lp_all[index])


@pytest.mark.parametrize("positions", ["sinusoidal", "relative"])
@pytest.mark.compares
def test_cache_grows_past_its_capacity(monkeypatch, positions):
    from mtkit.models import decoder_state

    monkeypatch.setattr(decoder_state, "INITIAL_CAPACITY", 2)  # 7 positions: the caches double twice, 2 -> 4 -> 8
    stepped, full = stepped_and_full(tiny(positions), *batch())
    torch.testing.assert_close(stepped, full, atol=1e-5, rtol=1e-5)


@pytest.mark.compares
def test_a_state_stepped_twice_keeps_both_results():
    """A step writes its position into the caches in place; stepping the same state again must not overwrite the
    position the first result holds (and each result must go on as if decoded alone)."""
    model = tiny()
    src, tgt, state = after_first_step(model)
    with torch.no_grad():
        _, first, _ = model.step(tgt[:, 1], state)
        _, second, _ = model.step(tgt[:, 2], state)  # another token at the same position
        lp_first, _, _ = model.step(tgt[:, 3], first)
        lp_second, _, _ = model.step(tgt[:, 3], second)
    for prefix, lp in ((tgt[:, [0, 1, 3]], lp_first), (tgt[:, [0, 2, 3]], lp_second)):
        stepped, _ = stepped_and_full(model, src, prefix)
        torch.testing.assert_close(lp, stepped[:, -1])


def test_relative_distances_are_clipped():
    attn = MultiHeadAttention(16, 2, 0.0, self_attention=True, max_relative=2)
    index = attn.relative_index(0, 6, 6, "cpu")
    assert index[0, 5] == index[0, 3] == 4  # distances +5 and +3 share the +k bucket
    assert index[5, 0] == index[4, 0] == 0  # -5 and -4 share the -k bucket
    assert index[3, 2] == 1 and index[3, 3] == 2 and index[3, 4] == 3


def test_rope_scores_depend_only_on_offset():
    rotary = Rotary(8, 64)
    torch.manual_seed(0)
    q, k = torch.randn(1, 1, 1, 8), torch.randn(1, 1, 1, 8)

    def score(pq, pk):
        return (rotary(q, pq) * rotary(k, pk)).sum().item()

    assert score(3, 1) == pytest.approx(score(13, 11), abs=1e-5)
    assert score(7, 7) == pytest.approx(score(0, 0), abs=1e-5)
    assert score(3, 1) != pytest.approx(score(3, 2), abs=1e-3)


def test_transformer_base_parameter_count():
    cfg = TransformerConfig()  # 6+6 layers, d 512, 8 heads, ffn 2048: the paper's base model
    model = build_model(cfg, 37000, 37000, joint_vocab=True)
    d, f, v = 512, 2048, 37000
    attention = 4 * (d * d + d)
    ffn = d * f + f + f * d + d
    encoder_layer = attention + ffn + 2 * 2 * d
    decoder_layer = 2 * attention + ffn + 3 * 2 * d
    expected = v * d + 6 * encoder_layer + 6 * decoder_layer  # one shared embedding/output matrix
    assert model.num_parameters() == expected
    assert 60e6 < expected < 66e6  # "65M" in Vaswani et al. (2017), Table 3


def test_untied_separate_vocabularies():
    cfg = TransformerConfig(d_model=32, heads=4, encoder_layers=1, decoder_layers=1, ffn_dim=64, tie_embeddings=False)
    model = build_model(cfg, 30, 20, joint_vocab=False)
    assert model.src_embed is not model.tgt_embed and model.output.weight.shape == (20, 32)
    src, tgt = batch()
    assert model(src.clamp(max=29), tgt.clamp(max=19)).shape == (3, 7, 20)


def greedy_decode(model, src, max_len):
    mask = src.ne(PAD)
    state = model.init_state(model.encode(src, mask), mask)
    tokens = torch.full((src.size(0),), BOS)
    out = []
    for _ in range(max_len):
        log_probs, state, _ = model.step(tokens, state)
        tokens = log_probs.argmax(-1)
        out.append(tokens)
    return torch.stack(out, 1)


@pytest.mark.slow
@pytest.mark.parametrize("positions", ["sinusoidal", "relative", "rope", "alibi"])
def test_learns_to_reverse(positions):
    """A proof that it learns: reversal of 96 fixed sequences, then greedy decoding reproduces every one."""
    torch.manual_seed(0)
    cfg = TransformerConfig(
        d_model=64,
        heads=4,
        encoder_layers=1,
        decoder_layers=1,
        ffn_dim=128,
        positions=positions,
        norm="pre",
        dropout=0.0,
        **relative(positions, 8),
        max_positions=32,
    )
    model = build_model(cfg, 14, 14, joint_vocab=True)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(0)
    n, length = 96, 6
    body = torch.randint(4, 14, (n, length), generator=g)
    src = torch.cat([body, torch.full((n, 1), EOS)], 1)
    rev = body.flip(1)
    tgt_in = torch.cat([torch.full((n, 1), BOS), rev], 1)
    tgt_out = torch.cat([rev, torch.full((n, 1), EOS)], 1)
    for _ in range(800):  # stops as soon as the task is learned
        loss = torch.nn.functional.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt_out.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        if loss.item() < 0.005:
            break
    assert loss.item() < 0.005
    model.eval()
    with torch.no_grad():
        decoded = greedy_decode(model, src, length + 1)
    assert torch.equal(decoded, tgt_out)


def test_beam_grouped_cross_attention_equals_per_row(monkeypatch):
    """The encoder side is kept once per sentence during beam search; gathering it per hypothesis instead
    (the plain way) must give the same hypotheses, scores and attention."""
    from mtkit.decoding import search
    from mtkit.models.transformer import TransformerState

    model = tiny("relative")
    src, _ = batch()
    kwargs = dict(
        beam_size=4, length_penalty=1.0, max_len_a=1.5, max_len_b=5, nbest=2, need_attention=True, stopping="beam_full"
    )
    with torch.no_grad():
        grouped = search.beam_search(model, src, **kwargs)
        original = TransformerState.encoder_side

        def per_row(self):
            state, _ = original(self)
            gather = lambda xs: [x.index_select(0, state.row_source) for x in xs]  # noqa: E731
            return dataclasses.replace(
                state,
                mem_k=gather(state.mem_k),
                mem_v=gather(state.mem_v),
                src_mask=state.src_mask.index_select(0, state.row_source),
                row_source=torch.arange(len(state.row_source)),
            ), 1

        monkeypatch.setattr(TransformerState, "encoder_side", per_row)
        plain = search.beam_search(model, src, **kwargs)
    # the same numbers gathered another way round to the same log-probs but for rounding: near-ties aside, the same
    search = {name: value for name, value in kwargs.items() if name != "need_attention"}
    diverged = diverged_at_near_ties(model, src, plain, grouped, **search)
    for i, (a, b) in enumerate(zip(grouped, plain)):
        if i not in diverged:
            for h1, h2 in zip(a, b):
                assert h1.score == pytest.approx(h2.score, abs=1e-5)
                torch.testing.assert_close(h1.attention, h2.attention, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------------------ student architectures
# The decoders of a distilled student (docs/distillation.md): a deep encoder and a one-layer decoder with a narrower
# feed-forward network, and a decoder whose self-attention is an SSRU.
STUDENTS = {
    "deep-shallow": dict(encoder_layers=3, decoder_layers=1, decoder_ffn_dim=16),
    "ssru": dict(decoder_self="ssru"),
    "ssru-deep-shallow": dict(encoder_layers=3, decoder_layers=1, decoder_ffn_dim=16, decoder_self="ssru"),
}


@pytest.mark.parametrize(
    "student, positions, norm",
    [(s, "sinusoidal", norm) for s in ("deep-shallow", "ssru") for norm in ("pre", "post")]
    + [("ssru-deep-shallow", "sinusoidal", "post"), ("ssru-deep-shallow", "rope", "pre")],
)
@pytest.mark.compares
def test_student_decoders_cache_equals_full_forward(student, positions, norm):
    model = tiny(positions, norm, **STUDENTS[student])
    stepped, full = stepped_and_full(model, *batch())
    torch.testing.assert_close(stepped, full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("student", list(STUDENTS))
@pytest.mark.compares
def test_student_decoders_are_causal_and_padding_invariant(student):
    model = tiny(**STUDENTS[student])
    src, tgt = batch()
    changed = tgt.clone()
    changed[:, 4:] = torch.randint(4, 24, changed[:, 4:].shape)
    with torch.no_grad():
        a, b = model(src, tgt), model(src, changed)
        in_batch, alone = model(src, tgt)[1], model(src[1:2, :5], tgt[1:2])[0]
    torch.testing.assert_close(a[:, :4], b[:, :4])
    assert not torch.allclose(a[:, 4:], b[:, 4:])
    torch.testing.assert_close(in_batch, alone, atol=1e-5, rtol=1e-5)


@pytest.mark.compares
def test_ssru_state_follows_reordered_rows():
    model = tiny(decoder_self="ssru")
    src, tgt = batch()
    mask = src.ne(PAD)
    with torch.no_grad():
        state = model.init_state(model.encode(src, mask), mask)
        for t in range(3):
            _, state, _ = model.step(tgt[:, t], state)
        index = torch.tensor([2, 2, 0])
        lp_reordered, _, _ = model.step(tgt[index, 3], state.reorder(index))
        lp_all, _, _ = model.step(tgt[:, 3], state)
    assert state.self_k[0].shape == (3, 1, 32)  # the recurrence's state, not a growing key cache
    torch.testing.assert_close(lp_reordered, lp_all[index])


def test_ssru_computes_the_recurrence_of_kim_et_al():
    """f_t = sigmoid(W_f x_t + b_f), c_t = f_t c_{t-1} + (1 - f_t) W x_t, o_t = relu(c_t), written out by hand."""
    from mtkit.models.ssru import SSRU

    torch.manual_seed(0)
    unit = SSRU(4)
    x = torch.randn(2, 5, 4)
    c = torch.zeros(2, 4)
    expected = []
    for t in range(5):
        f = torch.sigmoid(x[:, t] @ unit.forget.weight.t() + unit.forget.bias)
        c = f * c + (1 - f) * (x[:, t] @ unit.input.weight.t())
        expected.append(torch.relu(c))
    with torch.no_grad():
        out, last = unit(x)
        first, middle = unit(x[:, :2])  # the same sequence in two calls, the state carried between them
        rest, _ = unit(x[:, 2:], middle)
    torch.testing.assert_close(out, torch.stack(expected, 1))
    torch.testing.assert_close(last, c)
    torch.testing.assert_close(torch.cat([first, rest], 1), out)
    assert unit.input.bias is None


def test_student_parameter_counts():
    d, f, f_dec, v = 32, 64, 16, 24
    attention = 4 * (d * d + d)
    ssru = d * d + d + d * d  # W_f, b_f, W
    encoder_layer = attention + (d * f + f + f * d + d) + 2 * 2 * d
    deep_shallow = build_model(TransformerConfig(**tiny_cfg(STUDENTS["deep-shallow"])), v, v, joint_vocab=True)
    decoder_layer = 2 * attention + (d * f_dec + f_dec + f_dec * d + d) + 3 * 2 * d
    assert deep_shallow.num_parameters() == v * d + 3 * encoder_layer + decoder_layer + 2 * 2 * d  # + final norms
    with_ssru = build_model(TransformerConfig(**tiny_cfg(STUDENTS["ssru"])), v, v, joint_vocab=True)
    decoder_layer = attention + ssru + (d * f + f + f * d + d) + 3 * 2 * d
    assert with_ssru.num_parameters() == v * d + 2 * encoder_layer + 2 * decoder_layer + 2 * 2 * d


def tiny_cfg(student: dict) -> dict:
    """The keys of ``tiny``'s pre-norm model with a student's decoder."""
    return {
        "d_model": 32,
        "heads": 4,
        "encoder_layers": 2,
        "decoder_layers": 2,
        "ffn_dim": 64,
        "norm": "pre",
        **student,
    }


def test_student_beam_search_is_batch_invariant():
    """Beam search reorders the SSRU's state with the beams: a sentence decodes alike alone and in a batch."""
    from mtkit.decoding import search

    model = tiny(decoder_self="ssru")
    src, _ = batch()
    kwargs = dict(beam_size=3, length_penalty=1.0, max_len_a=1.0, max_len_b=4, nbest=2, stopping="beam_full")
    with torch.no_grad():
        together = search.beam_search(model, src, **kwargs)
        alone = [search.beam_search(model, src[i : i + 1, : int(src[i].ne(PAD).sum())], **kwargs)[0] for i in range(3)]
    diverged = diverged_at_near_ties(model, src, alone, together, **kwargs)
    for i, (a, b) in enumerate(zip(together, alone)):
        if i not in diverged:
            assert [h.tokens for h in a] == [h.tokens for h in b]
            for h1, h2 in zip(a, b):
                assert h1.score == pytest.approx(h2.score, abs=1e-5)


@pytest.mark.parametrize("int8", [False, True])
def test_encode_parts_encodes_each_part_alone_and_decodes_as_each_batch_alone(int8):
    """Decoding joins length-sorted batches (``decoding.step_rows``) and encodes each of them on its own: each
    part's memory is its own encoding, cut to its longest source, with zeros beyond; greedy decoding of the joined
    batch gives what each batch gives alone."""
    from mtkit.decoding import search
    from mtkit.models.int8 import quantize_int8

    model = tiny().eval()
    if int8:
        quantize_int8(model)
    g = torch.Generator().manual_seed(3)
    lengths, sizes = [2, 3, 3, 5, 6, 6, 9], [3, 3, 1]  # shortest first, as the engine sorts them
    src = torch.full((len(lengths), max(lengths) + 1), PAD)
    for row, n in enumerate(lengths):
        src[row, :n] = torch.randint(4, 24, (n,), generator=g)
        src[row, n] = EOS
    mask = src.ne(PAD)
    kwargs = dict(max_len_a=1.0, max_len_b=4, length_penalty=1.0)
    with torch.inference_mode():
        memory = model.encode_parts(src, mask, sizes)
        joined = search.greedy(model, src, parts=sizes, **kwargs)
        alone, start = [], 0
        for n in sizes:
            rows, width = slice(start, start + n), lengths[start + n - 1] + 1
            assert torch.equal(memory[rows, :width], model.encode(src[rows, :width], mask[rows, :width]))
            assert not memory[rows, width:].any()
            alone += search.greedy(model, src[rows, :width], **kwargs)
            start += n
    ids = [src[i, : lengths[i] + 1].tolist() for i in range(len(lengths))]
    diverged = diverged_at_near_ties(model, ids, joined, alone, beam_size=1, nbest=1, stopping="beam_full", **kwargs)
    for i, (a, b) in enumerate(zip(joined, alone)):
        if i not in diverged:
            assert a[0].tokens == b[0].tokens and a[0].score == pytest.approx(b[0].score, abs=1e-5)
    with pytest.raises(ValueError, match="do not make a batch"):
        model.encode_parts(src, mask, [3, 3])
