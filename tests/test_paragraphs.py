"""Paragraphs and inline markup through every front door, with a small model trained here on a word-for-word
language whose words include those of the four inputs people bring most (a paragraph, tagged words, spaces
around a sentence): its translation of each word is known, so where each tag belongs is known too."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from conftest import TINY_TRANSFORMER, prepare_and_train, write_lines

pytestmark = pytest.mark.slow  # trains its own model (about 30 s on 2 cores)

WORDS = {
    "a": "ein",
    "man": "Mann",
    "woman": "Frau",
    "is": "ist",
    "riding": "fahrend",
    "bike": "Fahrrad",
    "two": "zwei",
    "dogs": "Hunde",
    "play": "spielen",
    "in": "in",
    "the": "dem",
    "snow": "Schnee",
    "red": "roten",
    "dress": "Kleid",
    "singing": "singend",
    "on": "auf",
    "stage": "Bühne",
    "while": "während",
    "crowd": "Menge",
    "watches": "zuschaut",
    "green": "grünen",
    "cat": "Katze",
    "sits": "sitzt",
    "under": "unter",
    "tree": "Baum",
}
PARAGRAPH = (
    "A man is riding a bike. Two dogs play in the snow. A woman in a red dress is singing on a stage while a crowd "
    "watches."
)


def pairs(n: int, seed: int) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    words = sorted(WORDS)
    out = []
    for _ in range(n):
        chosen = [rng.choice(words) for _ in range(rng.randint(2, 15))]
        src, tgt = " ".join(chosen), " ".join(WORDS[w] for w in chosen)
        out.append((src[0].upper() + src[1:] + ".", tgt[0].upper() + tgt[1:] + "."))
    return out


@pytest.fixture(scope="module")
def word_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("words")
    splits = {}
    for name, n, seed in (("train", 1500, 0), ("valid", 20, 1)):
        data = pairs(n, seed)
        splits[name] = {
            "src": str(write_lines(root / f"{name}.en", [s for s, _ in data])),
            "tgt": str(write_lines(root / f"{name}.de", [t for _, t in data])),
        }
    config = {
        "data": {"dir": str(root / "data"), "vocab_size": 120, "splits": splits},
        "model": {**TINY_TRANSFORMER, "d_model": 64, "ffn_dim": 128, "max_positions": 64},
        "training": {
            "run_dir": str(root / "run"),
            "max_updates": 1200,
            "batch_tokens": 800,
            "lr": 3e-3,
            "warmup_updates": 40,
            "validate_every": 1200,
            "log_every": 100,
            "threads": 1,
            "valid_max_sentences": 10,
        },
        "decoding": {"beam_size": 4, "threads": 1, "device": "cpu"},
    }
    prepare_and_train(root, config)
    return root / "run"


@pytest.fixture(scope="module")
def model(word_run):
    import mtkit

    return mtkit.load(word_run)


def strip_tags(text: str) -> str:
    return re.sub(r"<[^>]*>", "", text)


def test_a_paragraph_gives_every_sentence_in_order(model):
    alone = model.translate(["A man is riding a bike.", "Two dogs play in the snow.", PARAGRAPH.split(". ")[2]])
    assert alone[0] == "Ein Mann ist fahrend ein Fahrrad."  # the model knows its words
    together = model.translate(PARAGRAPH)
    assert together == " ".join(alone)
    found = model.translate_batch(PARAGRAPH)
    assert [s.text for s in found.sentences] == alone
    assert found.source == PARAGRAPH and found.text == together
    # off, the paragraph is one long "sentence", as before
    assert model.translate(PARAGRAPH, split_sentences=False) != together


def test_the_spaces_around_and_between_sentences_are_kept(model):
    assert model.translate("  A man is riding a bike.  ") == "  Ein Mann ist fahrend ein Fahrrad.  "
    assert model.translate_batch("  A man is riding a bike.  ", alignments=True).best.alignment is not None
    text = "A man is riding a bike.\n\n  Two dogs play in the snow.\t"
    assert model.translate(text) == "Ein Mann ist fahrend ein Fahrrad.\n\n  Zwei Hunde spielen in dem Schnee.\t"


def test_tags_go_around_the_words_they_enclosed(model):
    plain = model.translate("A man is riding a red bike.")
    tagged = model.translate("A <b>man</b> is riding a <i>red</i> bike.", format="html")
    assert strip_tags(tagged) == plain
    assert "<b>Mann</b>" in tagged and "<i>roten</i>" in tagged


def test_one_line_of_mtkit_translate_per_line_with_paragraphs_and_html(word_run, tmp_path, run_cli):
    source = tmp_path / "in.txt"
    source.write_text(f"{PARAGRAPH}\n  A man is riding a bike.  \n\nTwo dogs play in the snow.\n", encoding="utf-8")
    run = ["translate", word_run, "--input", source]
    done = run_cli(*run)
    assert done.code == 0, done.err
    lines = done.out.split("\n")
    assert len(lines) == 5 and lines[4] == ""  # four lines in, four out
    assert lines[0].count(".") == 3 and lines[1] == "  Ein Mann ist fahrend ein Fahrrad.  " and lines[2] == ""
    unsplit = run_cli(*run, "--no-split-sentences")
    assert unsplit.code == 0 and unsplit.out.split("\n")[0] != lines[0]
    html = tmp_path / "in.html"
    html.write_text("A <b>man</b> is riding a <i>red</i> bike.\n", encoding="utf-8")
    tagged = run_cli(*run[:-1], html, "--input-format", "html")
    assert tagged.code == 0, tagged.err
    assert "<b>Mann</b>" in tagged.out and "<i>roten</i>" in tagged.out


def test_html_is_refused_where_it_cannot_be_done(model):
    from mtkit.errors import MtkitError

    with pytest.raises(MtkitError, match="nbest must be 1"):
        model.translate_batch("A <b>man</b>.", format="html", nbest=2)
    with pytest.raises(MtkitError, match="line 1: prefix, constraints and avoid apply to plain text"):
        model.translate("A <b>man</b>.", format="html", prefix="Ein")
    with pytest.raises(MtkitError, match="format 'pdf'"):
        model.translate("A man.", format="pdf")
