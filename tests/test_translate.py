"""`mtkit translate` on a tiny Transformer trained once for this module (a few seconds on the toy corpus).

- N lines in = N lines out, in order, for any input (a property test over unicode, empty, whitespace-only,
  control-character, invalid UTF-8 and huge lines), in both output formats.
- Search equivalences on a real model: beam 1 == greedy; beam finds a sequence at least as probable as
  greedy; the KV-cache decoder == a decoder without cache (decode_full on the growing prefix); reported
  log-probs == teacher-forced rescoring; an ensemble of a model with itself == the model. Each pair computes the
  same log-probs in another order of float operations, so they agree to rounding; a sentence may part ways only
  where its search meets a near-tie (conftest.py: first_divergence, search_margin), and is compared up to there.
- The CLI: jsonl / n-best / alignment output, attention plots, the truncation warning, 100,000-character
  lines, output files, and as separate processes: a reader that closes early, Ctrl-C, several at once.
"""

from __future__ import annotations

import io
import json
import math
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import (
    EN_WORDS,
    LOG_PROB_TOL,
    NEAR_TIE,
    SUBPROCESS_ENV,
    TOY_RUN_CHUNK_SIZE,
    TOY_RUN_MAX_POSITIONS,
    diverged_at_near_ties,
    first_divergence,
    search_margin,
    write_lines,
)
from mtkit.checkpoint import load_checkpoint
from mtkit.decoding.search import beam_search, greedy, max_lengths
from mtkit.inference.engine import JOIN_PADDING, max_chars_for
from mtkit.inference.lines import chunks, pipe_chunks, read_lines
from mtkit.inference.options import Options
from mtkit.inference.torch_engine import Ensemble, TorchEngine
from mtkit.inference.translate import one_line, translate_stream
from mtkit.models.base import BOS, EOS, PAD
from mtkit.models.int8 import Int8Linear

MAX_POSITIONS = TOY_RUN_MAX_POSITIONS
CHUNK_SIZE = TOY_RUN_CHUNK_SIZE  # the run's decoding.chunk_size: output appears after every 50 input lines


# ------------------------------------------------------------------------------------------- fixtures
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def workdir(toy_run_workdir) -> Path:
    return toy_run_workdir


@pytest.fixture(scope="module")
def run_dir(workdir) -> Path:
    return workdir / "run"


@pytest.fixture(scope="module")
def test_lines(workdir) -> list[str]:
    return (workdir / "corpus" / "test.en").read_text(encoding="utf-8").splitlines()


@pytest.fixture(scope="module")
def loaded(run_dir):
    return load_checkpoint(run_dir)


def make_translator(loaded, model=None, **options) -> TorchEngine:
    return TorchEngine(model or loaded.model, loaded.tokenizer, Options(**options), torch.device("cpu"))


def src_batch(loaded, lines: list[str]) -> torch.Tensor:
    """(batch, src_len) right-padded source ids with EOS, as the translator builds them."""
    ids = loaded.tokenizer.encode_src(lines)
    width = max(len(x) for x in ids) + 1
    return torch.tensor([x + [EOS] + [PAD] * (width - len(x) - 1) for x in ids])


def search_of(opt: Options) -> dict:
    """``search_margin``'s options for a translator's ``opt``: n-best lists need a beam that wide, and beam 1
    without them is greedy (search_margin's beam 1 under ``beam_full``)."""
    beam = max(opt.beam_size, opt.nbest)
    return dict(
        beam_size=beam,
        nbest=opt.nbest,
        length_penalty=opt.length_penalty,
        max_len_a=opt.max_len_a,
        max_len_b=opt.max_len_b,
        stopping=opt.stopping if beam > 1 else "beam_full",
    )


def run_options(loaded, **overrides) -> Options:
    """The run's decoding config with command-line overrides, as `mtkit translate` resolves them."""
    dec = loaded.config.decoding
    return Options(
        **{
            **dict(
                beam_size=dec.beam_size,
                nbest=dec.nbest,
                length_penalty=dec.length_penalty,
                max_len_a=dec.max_len_a,
                max_len_b=dec.max_len_b,
                stopping=dec.stopping,
            ),
            **overrides,
        }
    )


def assert_same_translations(loaded, lines: list[str], got: str, expected: str, **overrides) -> None:
    """Two outputs of the run's model for ``lines`` (text, one line each): the same line for line, but where the
    search (the run's options with ``overrides``) meets a near-tie."""
    got_lines, expected_lines = got.split("\n"), expected.split("\n")
    assert len(got_lines) == len(expected_lines) == len(lines) + 1 and got_lines[-1] == expected_lines[-1] == ""
    search = search_of(run_options(loaded, **overrides))
    differ = [
        (line, ids, a, b)
        for line, ids, a, b in zip(lines, make_translator(loaded).encode(lines), got_lines, expected_lines)
        if a != b
    ]
    assert len(differ) < len(lines) / 2, differ
    for line, ids, a, b in differ:
        margin = search_margin(loaded.model, ids + [EOS], **search)
        assert margin <= NEAR_TIE, (line, a, b, margin)


def run_main(args, stdin: bytes, capsys, monkeypatch):
    """``mtkit.cli.main(args)`` in this process with ``stdin`` as raw bytes -> (exit code, stdout, stderr)."""
    from mtkit.cli import main

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8"))
    capsys.readouterr()
    code = main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def spawn(args, **kwargs) -> subprocess.Popen:
    """``python -m mtkit ...`` as a child with Ctrl-C at its default (a harness may have ignored SIGINT)."""
    return subprocess.Popen(
        [sys.executable, "-m", "mtkit", *map(str, args)],
        env=SUBPROCESS_ENV,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        **kwargs,
    )


# ------------------------------------------------------------------------ N lines in = N lines out
def _encoded(text: str) -> bytes:
    return text.encode("utf-8")


_words = st.lists(st.sampled_from(EN_WORDS), min_size=1, max_size=12).map(" ".join).map(_encoded)
_any_text = st.text(st.characters(exclude_characters="\n", exclude_categories=("Cs",)), max_size=40).map(_encoded)
_blank = st.text(st.sampled_from(" \t\r\x0b\x0c\x1c\x85\xa0\u2028\u2029\u3000"), max_size=6).map(_encoded)
_control = st.text(
    st.characters(max_codepoint=0x9F, exclude_characters="\n", exclude_categories=("L", "M", "N", "P", "S", "Zs")),
    min_size=1,
    max_size=8,
).map(_encoded)
_huge = st.builds(lambda word, n: _encoded(f"{word} " * n), st.sampled_from(EN_WORDS), st.integers(300, 3000))
_bytes = st.binary(max_size=30).map(lambda b: b.replace(b"\n", b""))  # mostly invalid UTF-8
_line = st.one_of(_words, _any_text, _blank, _control, _huge, _bytes, st.just(b""))


def _expected_lines(data: bytes) -> list[str]:
    """What a reader of ``data`` calls its lines: split at LF, a final unterminated line counts, CR at the end
    of a line belongs to its line break, invalid UTF-8 reads as U+FFFD."""
    parts = data.split(b"\n")
    if parts[-1] == b"":
        parts.pop()
    return [p.decode("utf-8", errors="replace").rstrip("\r") for p in parts]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(lines=st.lists(_line, max_size=9), final_newline=st.booleans())
def test_n_lines_in_n_lines_out_in_order(loaded, lines, final_newline):
    data = b"\n".join(lines) + (b"\n" if final_newline and lines else b"")
    expected = _expected_lines(data)
    # small chunks and batches, so chunk boundaries, length sorting and batching all take part
    translator = make_translator(loaded, beam_size=2, chunk_size=3, batch_size=2, max_len_a=0.2, max_len_b=3)

    jsonl = io.StringIO()
    written = translate_stream(translator, read_lines(io.BytesIO(data)), jsonl, fmt="jsonl")
    records = [json.loads(line) for line in jsonl.getvalue().split("\n")[:-1]]
    assert written == len(records) == len(expected)
    assert jsonl.getvalue().count("\n") == len(expected)
    assert [r["source"] for r in records] == expected  # in input order
    for source, record in zip(expected, records):
        if not source.split():  # empty or whitespace-only: an empty line
            assert record["hypothesis"] == "" and record["nbest"] == [] and record["score"] is None

    text = io.StringIO()
    translate_stream(translator, read_lines(io.BytesIO(data)), text)
    out_lines = text.getvalue().split("\n")
    assert out_lines.pop() == ""  # every line ends with LF
    assert out_lines == [one_line(r["hypothesis"]) for r in records]  # a line break kept from the source: a space


def test_blank_long_and_invalid_lines_through_the_cli(loaded, run_dir, capsys, monkeypatch):
    rng = random.Random(0)
    long_words = " ".join(rng.choice(EN_WORDS) for _ in range(30_000))[:100_000]
    assert len(long_words) == 100_000
    lines = [
        b"A man sees a dog .",
        b"",
        b"   \t ",
        long_words.encode(),
        b"\xff\xfe bad \xc3( utf-8",
        b"\x00\x01\x1b[31m",
        ("x" * 100_000).encode(),
        " ".join(EN_WORDS * 3).encode(),
        b"the cat .",
    ]
    too_long = sum(
        len(ids) > MAX_POSITIONS - 1 for ids in loaded.tokenizer.encode_src([x.decode(errors="replace") for x in lines])
    )
    assert too_long == 2  # the 100,000 characters of words and the 120 words
    # ... and the 100,000 x's (one unknown subword to SentencePiece), cut at max_chars before tokenizing
    code, out, err = run_main(["translate", run_dir, "--beam-size", 3], b"\n".join(lines), capsys, monkeypatch)
    assert code == 0, err
    out_lines = out.split("\n")
    assert out_lines.pop() == ""
    assert len(out_lines) == len(lines)
    assert out_lines[1] == out_lines[2] == ""
    assert out_lines[0] and out_lines[3] and out_lines[7]
    warning = err.strip().splitlines()  # one warning, naming how many lines were cut
    assert len(warning) == 1 and "warning" in warning[0] and "3 input line(s)" in warning[0], err
    assert str(MAX_POSITIONS - 1) in warning[0]


def test_jsonl_nbest_and_alignments(loaded, run_dir, test_lines, capsys, monkeypatch):
    stdin = "\n".join(test_lines[:4] + ["", test_lines[4]]) + "\n"
    code, out, err = run_main(
        ["translate", run_dir, "--format", "jsonl", "--nbest", 3, "--alignments"], stdin.encode(), capsys, monkeypatch
    )
    assert code == 0 and err == "", err
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["source"] for r in records] == test_lines[:4] + ["", test_lines[4]]
    for record in records[:4] + records[5:]:
        n_tokens = len(record["tokens"])
        assert len(record["token_log_probs"]) == n_tokens + 1  # EOS included
        assert all(lp <= 0 for lp in record["token_log_probs"])
        nbest = record["nbest"]
        assert len(nbest) == 3
        assert [h["score"] for h in nbest] == sorted((h["score"] for h in nbest), reverse=True)
        assert nbest[0]["hypothesis"] == record["hypothesis"] and nbest[0]["score"] == record["score"]
        assert math.isclose(sum(record["token_log_probs"]), nbest[0]["log_prob"], abs_tol=1e-3)
        src_len = len(loaded.tokenizer.encode_src([record["source"]])[0]) + 1  # + EOS
        alignment = record["alignment"]
        assert len(alignment) == n_tokens + 1 and all(len(row) == src_len for row in alignment)
        assert all(math.isclose(sum(row), 1.0, abs_tol=1e-4) for row in alignment)
    empty = records[4]
    assert (empty["hypothesis"], empty["score"], empty["nbest"], empty["alignment"]) == ("", None, [], [])


def test_text_nbest_gives_exactly_nbest_lines_per_input(run_dir, test_lines, capsys, monkeypatch):
    stdin = "\n".join([test_lines[0], "", test_lines[1]]) + "\n"
    code, out, err = run_main(["translate", run_dir, "--nbest", 2], stdin.encode(), capsys, monkeypatch)
    assert code == 0, err
    lines = out.split("\n")[:-1]
    assert len(lines) == 6 and lines[2:4] == ["", ""]
    for line in lines[:2] + lines[4:]:
        hypothesis, score = line.split("\t")
        assert float(score) <= 0
    # with no room for a token every sentence has one hypothesis (the empty one): the rest are empty lines
    code, out, err = run_main(
        ["translate", run_dir, "--nbest", 2, "--max-len-a", 0, "--max-len-b", 0], stdin.encode(), capsys, monkeypatch
    )
    assert code == 0, err
    lines = out.split("\n")[:-1]
    assert len(lines) == 6 and lines[0].startswith("\t-") and lines[1:4] == ["", "", ""] and lines[5] == ""


def test_plot_attention_writes_one_png_per_sentence(run_dir, test_lines, tmp_path, capsys, monkeypatch):
    plots = tmp_path / "plots"
    stdin = "\n".join([test_lines[0], "", test_lines[1]]) + "\n"
    code, out, err = run_main(
        ["translate", run_dir, "--plot-attention", plots, "-b", 2], stdin.encode(), capsys, monkeypatch
    )
    assert code == 0, err
    assert len(out.split("\n")) == 4
    pngs = sorted(p.name for p in plots.iterdir())
    assert pngs == ["attention_000001.png", "attention_000003.png"]  # numbered by input line; none for a blank
    assert all((plots / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for name in pngs)


def test_output_file_and_unwritable_output(run_dir, test_lines, tmp_path, capsys, monkeypatch):
    out_file = tmp_path / "hyp.txt"
    stdin = ("\n".join(test_lines[:5]) + "\n").encode()
    code, out, err = run_main(["translate", run_dir, "-o", out_file], stdin, capsys, monkeypatch)
    assert code == 0 and out == "", err
    assert len(out_file.read_text(encoding="utf-8").split("\n")) == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hyp.txt"]  # no temp file left

    code, out, err = run_main(
        ["translate", run_dir, "-o", tmp_path / "missing" / "hyp.txt"], stdin, capsys, monkeypatch
    )
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert "missing" in err


def test_stopping_flag_reaches_the_search_and_bad_values_are_one_line(run_dir, test_lines, capsys, monkeypatch):
    from mtkit.decoding import search

    seen = []
    real = search.beam_search
    monkeypatch.setattr(search, "beam_search", lambda *a, **kw: seen.append(kw["stopping"]) or real(*a, **kw))
    stdin = ("\n".join(test_lines[:5]) + "\n").encode()
    for rule in ("first", "exact"):
        code, out, err = run_main(["translate", run_dir, "--stopping", rule], stdin, capsys, monkeypatch)
        assert code == 0 and len(out.split("\n")) == 6, err
        assert set(seen) == {rule}
        seen.clear()
    code, out, err = run_main(["translate", run_dir, "--stopping", "never"], stdin, capsys, monkeypatch)
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and "stopping" in err, err


# ------------------------------------------------------------------------------ search equivalences
@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 40), max_size=60),
    batch_size=st.integers(1, 20),
    batch_tokens=st.one_of(st.none(), st.integers(1, 200)),
)
def test_batches_hold_every_sentence_once_within_both_bounds(lengths, batch_size, batch_tokens):
    from mtkit.inference.engine import batches

    ids = [[5] * n for n in lengths]
    got = list(batches(ids, Options(batch_size=batch_size, batch_tokens=batch_tokens)))
    flat = [i for batch in got for i in batch]
    assert sorted(flat) == [i for i, n in enumerate(lengths) if n]  # each non-empty sentence once, no empty one
    assert [len(ids[i]) for i in flat] == sorted(len(ids[i]) for i in flat)  # shortest first
    for batch in got:
        assert 1 <= len(batch) <= batch_size
        padded = len(batch) * (max(len(ids[i]) for i in batch) + 1)
        assert batch_tokens is None or padded <= batch_tokens or len(batch) == 1  # a longer sentence goes alone
    for before, after in zip(got, got[1:]):  # greedy: a batch closes only when the next sentence breaks a bound
        widest = len(ids[after[0]]) + 1
        assert len(before) == batch_size or (batch_tokens is not None and (len(before) + 1) * widest > batch_tokens)


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 40), max_size=60),
    batch_size=st.integers(1, 8),
    step_rows=st.integers(1, 40),
    beam_size=st.integers(1, 4),
    sampling=st.booleans(),
)
def test_decode_groups_join_whole_batches_within_step_rows(lengths, batch_size, step_rows, beam_size, sampling):
    from mtkit.inference.engine import batches, decode_groups

    nbest = 2 if sampling else 1
    opt = Options(batch_size=batch_size, step_rows=step_rows, beam_size=beam_size, sampling=sampling, nbest=nbest)
    ids = [[5] * n for n in lengths]
    want = list(batches(ids, opt))
    groups = list(decode_groups(ids, opt))
    assert [i for group, _ in groups for i in group] == [i for batch in want for i in batch]  # the same order
    it = iter(want)
    per_sentence = nbest if sampling else beam_size
    padded = []  # per group: its sources padded to its longest, and each of its batches padded on its own
    for group, sizes in groups:
        members = [next(it) for _ in sizes]
        assert [len(b) for b in members] == sizes and sum(sizes) == len(group)  # whole batches
        own = sum(len(b) * (len(ids[b[-1]]) + 1) for b in members)
        padded.append((len(group) * (max(len(ids[i]) for i in group) + 1), own))
        if len(sizes) > 1:  # a batch over step_rows goes alone; joined ones pad at most JOIN_PADDING times more
            assert len(group) * per_sentence <= step_rows and padded[-1][0] <= JOIN_PADDING * own
    for i, ((before, _), (_, after)) in enumerate(zip(groups, groups[1:])):  # a group closes only when the next
        nxt = want[sum(len(s) for _, s in groups[: i + 1])]  # batch, the next group's first, breaks a bound
        width = max(len(ids[j]) for j in before + nxt) + 1
        assert (len(before) + after[0]) * per_sentence > step_rows or (
            (len(before) + len(nxt)) * width > JOIN_PADDING * (padded[i][1] + len(nxt) * (len(ids[nxt[-1]]) + 1))
        )


def test_batch_tokens_and_step_rows_change_batches_not_translations(loaded, run_dir, test_lines, capsys, monkeypatch):
    from mtkit.decoding import search
    from mtkit.models.transformer import Transformer

    encoded, decoded = [], []  # the encoder's batches, and the search's: (rows, width), and the parts it was given
    real_search, real_encode = search.beam_search, Transformer.encode

    def spy_search(model, src, *a, **kw):
        decoded.append((src.shape, kw.get("parts")))
        return real_search(model, src, *a, **kw)

    monkeypatch.setattr(search, "beam_search", spy_search)
    monkeypatch.setattr(
        Transformer, "encode", lambda m, src, mask: encoded.append(src.shape) or real_encode(m, src, mask)
    )

    def translate(*flags):
        encoded.clear(), decoded.clear()
        # float32, the model assert_same_translations replays near-ties on (int8: tests/test_int8.py)
        code, out, err = run_main(["translate", run_dir, "--dtype", "float32", *flags], stdin, capsys, monkeypatch)
        assert code == 0, err
        return out

    # 30 lines of one length: batches that joining pads no further
    lengths = [len(x) for x in make_translator(loaded).encode(test_lines)]
    common = max(set(lengths), key=lengths.count)
    lines = ([line for line, n in zip(test_lines, lengths) if n == common] * 30)[:30]
    stdin = ("\n".join(lines) + "\n").encode()
    plain = translate()
    # the run's decoding.batch_size (16) cuts the encoder's batches; both are decoded together, as 30 sentences x
    # beam 4 are within the default step_rows
    assert encoded == [(16, common + 1), (14, common + 1)] and decoded == [((30, common + 1), [16, 14])]
    capped = translate("--batch-tokens", "40")
    assert_same_translations(loaded, lines, capped, plain)
    assert len(encoded) > 2 and all(rows * width <= 40 or rows == 1 for rows, width in encoded)
    assert sum(parts == [rows] for (rows, _), parts in decoded) < len(decoded)  # joined, some of them
    alone = translate("--step-rows", "4")  # one sentence x beam 4: every batch on its own, as before step_rows
    assert [shape for shape, _ in decoded] == encoded == [(16, common + 1), (14, common + 1)]
    assert_same_translations(loaded, lines, alone, plain)
    # lines of many lengths: batches join only while the longest source pads them at most JOIN_PADDING times more
    stdin = ("\n".join(test_lines) + "\n").encode()
    translate()
    for (rows, width), parts in decoded:
        own = [w * n for (n, w) in encoded[: len(parts)]]
        assert [n for n, _ in encoded[: len(parts)]] == parts and rows * width <= JOIN_PADDING * sum(own)
        del encoded[: len(parts)]
    for flag in ("--batch-tokens", "--step-rows"):
        code, out, err = run_main(["translate", run_dir, flag, "0"], stdin, capsys, monkeypatch)
        assert code == 2 and out == "" and len(err.strip().splitlines()) == 1 and flag[2:].replace("-", "_") in err, err


def greedy_without_cache(model, src: torch.Tensor, max_len: int):
    """One sentence (1, src_len): re-run decode_full on the whole prefix at every step, no KV cache.

    The same rules as search.greedy: PAD and BOS never chosen, EOS forced after ``max_len`` tokens.
    Returns (tokens, token log-probs with EOS's last, cross-attention rows).
    """
    src_mask = src.ne(PAD)
    memory = model.encode(src, src_mask)
    prefix, log_probs_out, attention = [BOS], [], []
    for t in range(max_len + 1):
        logits, weights = model.decode_full(memory, src_mask, torch.tensor([prefix]), need_attention=True)
        log_probs = logits[0, -1].float().log_softmax(-1)  # (vocab,)
        scores = log_probs.clone()
        scores[[PAD, BOS]] = -math.inf
        if t >= max_len:
            token = EOS
        else:
            token = int(scores.argmax())
        log_probs_out.append(float(log_probs[token]))
        attention.append(weights[0, -1])
        if token == EOS:
            break
        prefix.append(token)
    return prefix[1:], log_probs_out, torch.stack(attention)


@torch.inference_mode()
def test_kv_cache_decoding_equals_decoding_without_cache(loaded, test_lines):
    model = loaded.model
    lines = test_lines[:10]
    src = src_batch(loaded, lines)  # a padded batch: the cached path also sees padding
    cached = greedy(model, src, max_len_a=1.5, max_len_b=10, need_attention=True)
    limits = max_lengths(src.ne(PAD), 1.5, 10, MAX_POSITIONS - 1).tolist()
    for row, (hyp,) in enumerate(cached):
        alone = src[row : row + 1, : int(src[row].ne(PAD).sum())]
        tokens, log_probs, attention = greedy_without_cache(model, alone, limits[row])
        divergence = first_divergence(model, alone, hyp.tokens, tokens)
        same = len(tokens) + 1  # steps compared: all, or those before the two part at a near-tie
        if divergence is not None:
            same, shortfall = divergence
            assert shortfall <= NEAR_TIE, (lines[row], hyp.tokens, tokens, shortfall)
        assert hyp.token_log_probs[:same] == pytest.approx(log_probs[:same], abs=LOG_PROB_TOL)
        assert torch.allclose(hyp.attention[:same], attention[:same], atol=1e-4)


@torch.inference_mode()
def teacher_forced_log_probs(model, src_row: torch.Tensor, tokens: list[int]) -> list[float]:
    """Per-token log-probs of ``tokens`` + EOS for one source, from one full forward pass (no cache)."""
    src = src_row[src_row.ne(PAD)].unsqueeze(0)
    tgt_in = torch.tensor([[BOS] + tokens])
    log_probs = model(src, tgt_in).float().log_softmax(-1)[0]  # (len + 1, vocab)
    return log_probs.gather(1, torch.tensor(tokens + [EOS]).unsqueeze(1)).squeeze(1).tolist()


@torch.inference_mode()
def test_beam_one_equals_greedy(loaded, test_lines):
    src = src_batch(loaded, test_lines)
    by_greedy = greedy(loaded.model, src, max_len_a=1.5, max_len_b=10)
    for length_penalty, stopping in ((0.0, "exact"), (1.0, "beam_full")):
        by_beam = beam_search(
            loaded.model,
            src,
            beam_size=1,
            length_penalty=length_penalty,
            max_len_a=1.5,
            max_len_b=10,
            stopping=stopping,
        )
        for row, ((g,), (b,)) in enumerate(zip(by_greedy, by_beam)):
            divergence = first_divergence(loaded.model, src[row], b.tokens, g.tokens)
            if divergence is None:
                assert b.log_prob == pytest.approx(g.log_prob, abs=LOG_PROB_TOL)
            else:  # the batch shrinks differently, so a near-tie may go either way (then compared up to it)
                at, shortfall = divergence
                assert shortfall <= NEAR_TIE, (test_lines[row], b.tokens, g.tokens, shortfall)
                assert b.token_log_probs[:at] == pytest.approx(g.token_log_probs[:at], abs=LOG_PROB_TOL)
    # and through the translator: --beam-size 1 prints greedy's text (its batches are other ones: near-ties aside)
    translator = make_translator(loaded, beam_size=1)
    for row, hyps in enumerate(translator.translate_ids(translator.encode(test_lines))):
        divergence = first_divergence(loaded.model, src[row], hyps[0].tokens, by_greedy[row][0].tokens)
        assert divergence is None or divergence[1] <= NEAR_TIE, (test_lines[row], divergence)


@pytest.mark.compares
@torch.inference_mode()
def test_beam_search_is_at_least_as_probable_as_greedy(loaded, test_lines):
    """Beam search (length_penalty 0) beats greedy's model score on the whole test set and nearly every sentence.

    Not on every sentence by construction: beam search can prune greedy's prefix (k other prefixes score
    higher at some step) and then end lower; a plain reference beam search does the same on this model.
    """
    model = loaded.model
    src = src_batch(loaded, test_lines)
    by_greedy = greedy(model, src, max_len_a=1.5, max_len_b=10)
    by_beam = beam_search(
        model, src, beam_size=4, length_penalty=0.0, max_len_a=1.5, max_len_b=10, nbest=4, stopping="exact"
    )
    beam_total = greedy_total = 0.0
    worse = 0
    for row, ((g,), hyps) in enumerate(zip(by_greedy, by_beam)):
        # the model's own score of each sequence, from a teacher-forced pass without the cache
        beam_score = math.fsum(teacher_forced_log_probs(model, src[row], hyps[0].tokens))
        greedy_score = math.fsum(teacher_forced_log_probs(model, src[row], g.tokens))
        beam_total, greedy_total = beam_total + beam_score, greedy_total + greedy_score
        worse += beam_score < greedy_score - 1e-4
        for h in hyps:  # search's bookkeeping (cache, reorder, pruning) matches the model
            assert h.token_log_probs == pytest.approx(teacher_forced_log_probs(model, src[row], h.tokens), abs=1e-4)
            assert h.log_prob == pytest.approx(h.score, abs=1e-3)  # length_penalty 0: the score is the log-prob
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
    assert beam_total > greedy_total
    assert worse <= len(test_lines) // 10, worse


@torch.inference_mode()
def test_ensemble_of_a_model_with_itself_equals_the_model(loaded, run_dir, test_lines):
    twin = load_checkpoint(run_dir)  # a second copy of the weights, as --checkpoint loads it
    single = make_translator(loaded, beam_size=4, nbest=2, alignments=True)
    ensemble = make_translator(
        loaded, model=Ensemble([loaded.model, twin.model]), beam_size=4, nbest=2, alignments=True
    )
    ids = single.encode(test_lines)
    alone, pairs = single.translate_ids(ids), ensemble.translate_ids(ids)
    # the mean of two equal distributions is that distribution, to rounding: the same n-best but at a near-tie
    diverged = diverged_at_near_ties(loaded.model, [x + [EOS] for x in ids], pairs, alone, **search_of(single.options))
    for i, (hyps, refs) in enumerate(zip(alone, pairs)):
        if i not in diverged:
            for a, b in zip(hyps, refs):
                assert b.score == pytest.approx(a.score, abs=LOG_PROB_TOL)
                assert torch.allclose(a.attention, b.attention, atol=1e-5)


def test_ensemble_through_the_cli(loaded, run_dir, test_lines, capsys, monkeypatch):
    stdin = ("\n".join(test_lines[:8]) + "\n").encode()
    code, single, err = run_main(["translate", run_dir, "--dtype", "float32"], stdin, capsys, monkeypatch)
    assert code == 0, err
    ckpt_file = run_dir / "checkpoints" / "best.safetensors"
    code, ensembled, err = run_main(
        ["translate", run_dir, "--checkpoint", ckpt_file, "--dtype", "float32"], stdin, capsys, monkeypatch
    )
    assert code == 0, err
    assert_same_translations(loaded, test_lines[:8], ensembled, single)


# ------------------------------------------------------------------------- as separate processes
@pytest.mark.slow
def test_reader_closing_early_exits_quietly(run_dir, test_lines, tmp_path):
    # 300 lines of jsonl with alignments is megabytes: far more than a pipe holds, so writes must fail
    source = write_lines(tmp_path / "src.en", test_lines * 10)
    with open(source, "rb") as stdin:
        translate = spawn(
            ["translate", run_dir, "--format", "jsonl", "--alignments", "-b", 1],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        head = subprocess.Popen(["head", "-1"], stdin=translate.stdout, stdout=subprocess.PIPE)
        translate.stdout.close()  # head holds the only reading end
        first, _ = head.communicate(timeout=120)
        err = translate.stderr.read()
        code = translate.wait(timeout=120)
    assert json.loads(first)["source"] == test_lines[0]
    assert code == 0 and err == b"", err.decode()


@pytest.mark.slow
def test_ctrl_c_prints_one_line(run_dir, test_lines):
    translate = spawn(["translate", run_dir], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        translate.stdin.write(("\n".join(test_lines * 2) + "\n").encode())  # 60 lines: one chunk and a bit
        translate.stdin.flush()
        # all 60 are answered while stdin stays open: the input paused, so the partial chunk went too
        answered = [translate.stdout.readline() for _ in range(2 * len(test_lines))]
        assert all(line.endswith(b"\n") for line in answered)
        translate.send_signal(signal.SIGINT)  # while it waits for more input
        code = translate.wait(timeout=60)
        rest, err = translate.stdout.read(), translate.stderr.read()
    finally:
        if translate.poll() is None:
            translate.kill()
        translate.stdin.close()
    assert code == 130
    assert err == b"mtkit: interrupted\n"
    assert rest == b""


@pytest.mark.slow
def test_several_processes_share_one_run_dir(run_dir, test_lines, tmp_path):
    source = write_lines(tmp_path / "src.en", test_lines)
    variants = [["-b", 1], ["--format", "jsonl", "--nbest", 2], ["-b", 1]]
    procs = []
    for args in variants:
        with open(source, "rb") as stdin:
            procs.append(
                spawn(["translate", run_dir, *args], stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            )
    results = [p.communicate(timeout=180) for p in procs]
    for p, (out, err) in zip(procs, results):
        assert p.returncode == 0 and err == b"", err.decode()
        assert out.count(b"\n") == len(test_lines)
    assert results[0][0] == results[2][0]  # same options, same output


@pytest.mark.slow
def test_one_line_at_a_time_through_a_pipe_is_answered_before_eof(loaded, run_dir, test_lines):
    """A program that writes a line and waits for its translation gets it (chunk_size is 50 here)."""
    import select

    translate = spawn(
        ["translate", run_dir, "-b", 1, "--dtype", "float32"],  # the model near-ties are replayed on
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        answers = []
        for line in test_lines[:3]:
            translate.stdin.write(line.encode() + b"\n")
            translate.stdin.flush()
            ready, _, _ = select.select([translate.stdout], [], [], 120)
            assert ready, "no answer to a single line while stdin is still open"
            answers.append(translate.stdout.readline())
        translate.stdin.close()
        rest, err = translate.stdout.read(), translate.stderr.read()
        code = translate.wait(timeout=60)
    finally:
        if translate.poll() is None:
            translate.kill()
    assert code == 0 and err == b"", err.decode()
    assert rest == b"" and all(a.endswith(b"\n") and a.strip() for a in answers)
    # the same answers as translating the three lines in one go (one batch: near-ties aside)
    with_file = subprocess.run(
        [sys.executable, "-m", "mtkit", "translate", str(run_dir), "-b", "1", "--dtype", "float32"],
        input=("\n".join(test_lines[:3]) + "\n").encode(),
        capture_output=True,
        env=SUBPROCESS_ENV,
        timeout=120,
    )
    assert with_file.returncode == 0, with_file.stderr.decode()
    assert_same_translations(loaded, test_lines[:3], b"".join(answers).decode(), with_file.stdout.decode(), beam_size=1)


def _through_a_pipe(data: bytes, size: int, max_bytes: int, pause_at: int = -1) -> list[list[str]]:
    """pipe_chunks over a real pipe fed by a thread: in 7-byte writes, or (``pause_at``) in two writes with
    a pause of 1 s between them."""
    import threading
    import time

    read_fd, write_fd = os.pipe()

    def feed():
        if pause_at >= 0:
            os.write(write_fd, data[:pause_at])
            time.sleep(1.0)
            os.write(write_fd, data[pause_at:])
        else:
            for start in range(0, len(data), 7):
                os.write(write_fd, data[start : start + 7])
        os.close(write_fd)

    feeder = threading.Thread(target=feed)
    feeder.start()
    try:
        return list(pipe_chunks(read_fd, size, max_bytes))
    finally:
        feeder.join()
        os.close(read_fd)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(
        st.one_of(_words, _any_text, _bytes, st.just(b""), st.binary(min_size=20, max_size=60)), max_size=12
    ),
    final_newline=st.booleans(),
    crlf=st.booleans(),
)
def test_pipe_chunks_reads_the_lines_read_lines_reads(lines, final_newline, crlf):
    lines = [line.replace(b"\n", b"") for line in lines]
    data = (b"\r\n" if crlf else b"\n").join(lines) + (b"\n" if final_newline and lines else b"")
    max_bytes = 16  # cuts many of these lines, sometimes inside a UTF-8 sequence or between CR and LF
    expected = list(read_lines(io.BytesIO(data), max_bytes))
    got = _through_a_pipe(data, size=5, max_bytes=max_bytes)
    assert [line for chunk in got for line in chunk] == expected
    assert all(0 < len(chunk) <= 5 for chunk in got)
    assert got == list(chunks(expected, 5)) or len(got) > len(list(chunks(expected, 5)))  # pauses cut chunks early


def test_pipe_chunks_cuts_a_chunk_when_the_writer_pauses():
    data = b"one\ntwo\nthree\nfour\n"
    got = _through_a_pipe(data, size=50, max_bytes=100, pause_at=data.index(b"three"))
    assert got == [["one", "two"], ["three", "four"]]
    assert _through_a_pipe(data, size=50, max_bytes=100, pause_at=0) == [["one", "two", "three", "four"]]


def test_a_huge_line_is_cut_while_reading_and_before_sentencepiece(loaded):
    """A line of 1 MB without a break costs max_bytes of memory, and SentencePiece sees at most max_chars."""
    huge = b"x" * 1_000_000
    data = b"first\n" + huge + b"\nlast\n"
    assert list(read_lines(io.BytesIO(data), 1000)) == ["first", "x" * 1000, "last"]
    assert [x for c in _through_a_pipe(data, 10, 1000) for x in c] == ["first", "x" * 1000, "last"]
    translator = make_translator(loaded)
    assert translator.max_chars == max_chars_for(MAX_POSITIONS - 1) < 100_000
    seen = []
    original = loaded.tokenizer.encode_src
    try:
        loaded.tokenizer.encode_src = lambda lines: seen.extend(map(len, lines)) or original(lines)
        ids = translator.encode(["a man .", "y" * 100_000])
    finally:
        del loaded.tokenizer.encode_src
    assert seen == [len("a man ."), translator.max_chars]
    assert len(ids[1]) == MAX_POSITIONS - 1 and translator.truncated == 1


@pytest.mark.compares
def test_int8_engine_quantizes_every_linear_layer_and_keeps_the_translations(run_dir, test_lines, capsys, monkeypatch):
    """--dtype int8 (CPU): int8 weights in every linear layer, the tied output projection included, and
    (nearly) the float32 model's translations; the float32 checkpoint on disk is untouched."""
    int8 = load_checkpoint(run_dir, dtype=torch.qint8).model
    quantized = [name for name, m in int8.named_modules() if isinstance(m, Int8Linear)]
    assert not [m for m in int8.modules() if type(m) is torch.nn.Linear]  # every float32 linear is gone
    assert "output" in quantized and len(quantized) == 1 + 4 + 7  # projection, encoder layer, decoder layer
    assert int8.output is not None and int8.tgt_embed.weight.dtype == torch.float32
    stdin = ("\n".join(test_lines) + "\n").encode()
    code, f32_out, err = run_main(["translate", run_dir, "--dtype", "float32"], stdin, capsys, monkeypatch)
    assert code == 0, err
    code, int8_out, err = run_main(["translate", run_dir, "--dtype", "int8"], stdin, capsys, monkeypatch)
    assert code == 0 and err == "", err
    f32_lines, int8_lines = f32_out.splitlines(), int8_out.splitlines()
    assert len(int8_lines) == len(f32_lines) == len(test_lines)
    # a toy model of width 32 has many near-ties; on the Multi30k model BLEU moves by 0.14 (README, Results)
    assert sum(a == b for a, b in zip(f32_lines, int8_lines)) >= 0.6 * len(test_lines)
    assert load_checkpoint(run_dir).model.output is None  # a float32 load stays tied


@pytest.mark.slow
def test_memory_stays_flat_as_the_input_grows(run_dir, test_lines, tmp_path):
    """Peak RSS of `mtkit translate` on 30x more input (and a 2 MB line without a break) grows by less than
    the input itself would take: input is streamed chunk by chunk (scripts/bench_memory.py: 1 GB)."""

    def peak_rss_mib(data: bytes) -> float:
        source = tmp_path / "in.en"
        source.write_bytes(data)
        with open(source, "rb") as stdin:
            proc = spawn(
                ["translate", run_dir, "-b", 1, "--max-len-b", 3, "--max-len-a", 0],
                stdin=stdin,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            proc.stderr.read()
            _, status, usage = os.wait4(proc.pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        return usage.ru_maxrss / 1024

    small = ("\n".join(test_lines * 5) + "\n").encode()  # 150 lines
    big = ("\n".join(test_lines * 150) + "\n").encode() + b"w " * 1_000_000 + b"\n"  # 4,501 lines, ~2.3 MB
    base, grown = peak_rss_mib(small), peak_rss_mib(big)
    assert grown - base < 2 * len(big) / 2**20, (base, grown)


def test_a_gzipped_input_file_is_read_as_its_text(run_dir, test_lines, tmp_path, run_cli):
    """`mtkit translate -i x.gz` decompresses it, as prepare does its corpora: the output equals the plain file's."""
    import gzip

    plain, packed = tmp_path / "in.en", tmp_path / "in.en.gz"
    plain.write_text("\n".join(test_lines[:12]) + "\n", encoding="utf-8")
    with gzip.open(packed, "wt", encoding="utf-8") as f:
        f.write(plain.read_text(encoding="utf-8"))
    outputs = []
    for source in (plain, packed):
        out = tmp_path / f"{source.name}.de"
        assert run_cli("translate", run_dir, "-i", source, "-o", out, "--dtype", "float32").code == 0
        outputs.append(out.read_text(encoding="utf-8"))
    assert outputs[0] == outputs[1] and len(outputs[0].splitlines()) == 12
