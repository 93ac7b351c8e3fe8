"""Glossaries (mtkit/text/glossary.py): reading entries, finding terms (whole words, any case, longest first,
overlaps resolved), the bounds; and through ``mtkit.load(...).translate(..., glossary=...)`` on the tiny model of
conftest.py: the target terms appear, sentences without a term translate exactly as without the glossary."""

from __future__ import annotations

import pytest

import mtkit
from mtkit.errors import MtkitError
from mtkit.inference.glossaries import as_glossary
from mtkit.text import glossary as glossary_module
from mtkit.text.glossary import Glossary

pytestmark = pytest.mark.usefixtures("one_thread")


def test_tsv_and_csv_read_the_same_entries():
    tsv = Glossary.parse("bike\tVelo\n\n mountain bike \tMountainbike\n", "tsv")
    csv = Glossary.parse('bike,Velo\n"mountain bike",Mountainbike,en,de\n', "csv")
    assert tsv.entries == csv.entries == (("bike", "Velo"), ("mountain bike", "Mountainbike"))
    assert Glossary.parse(tsv.tsv).entries == tsv.entries
    assert Glossary.parse('"a, b",c\n', "csv").entries == (("a, b", "c"),)


@pytest.mark.parametrize(
    "text, fmt, words",
    [
        ("a\tb\tc\n", "tsv", "line 1: expected source<TAB>target, found 3 fields"),
        ("a\n", "tsv", "found 1 field"),
        ("a\tb\nA\tc\n", "tsv", "also entry 1"),
        ("a\t \n", "tsv", "empty term"),
        ("\n\n", "tsv", "no entries"),
        ("a,b,c\n", "csv", "source,target"),
        ("a\tb", "xml", "entries format 'xml'"),
    ],
)
def test_bad_entries_are_one_line(text, fmt, words):
    with pytest.raises(MtkitError, match=words.replace("+", r"\+")) as err:
        Glossary.parse(text, fmt)
    assert "\n" not in str(err.value)


def test_bounds(monkeypatch):
    monkeypatch.setattr(glossary_module, "MAX_ENTRIES", 2)
    with pytest.raises(MtkitError, match="at most 2"):
        Glossary.parse("a\tb\nc\td\ne\tf\n")
    with pytest.raises(MtkitError, match="at most 1024"):
        Glossary((("a" * 1025, "b"),))
    with pytest.raises(MtkitError, match="tab, line break"):
        Glossary((("a\tb", "c"),))


def test_terms_whole_words_any_case_longest_first():
    g = Glossary((("bike", "Velo"), ("mountain bike", "Mountainbike"), ("red", "rot"), ("C++", "C++")))
    assert g.terms("A Mountain BIKE and a red bike.") == ("Mountainbike", "rot", "Velo")
    assert g.terms("bikes, redish, bikered") == ()  # inside other words: no match
    assert g.terms("I write C++ daily") == ("C++",)
    assert g.matches("mountain bike") == [(0, 13, 1)]  # "bike" inside the longer term is not matched again
    overlapping = Glossary((("new york", "New York"), ("york city", "York-Stadt"), ("ab cd", "x"), ("cd ef", "y")))
    assert overlapping.terms("new york city") == ("York-Stadt",)  # the longer of two overlapping terms
    assert overlapping.terms("ab cd ef") == ("x",)  # equal lengths: the first in the sentence wins
    assert Glossary((("a", "b"),)).terms("") == ()
    assert Glossary((("i", "x"),)).terms("\u0130") == ("x",)  # a capital the regex folds otherwise than casefold


def test_as_glossary_takes_dicts_pairs_and_files(tmp_path):
    assert as_glossary({"a": "b"}) == as_glossary([("a", "b")]) == Glossary((("a", "b"),))
    assert as_glossary({}) is None and as_glossary(None) is None
    path = tmp_path / "terms.csv"
    path.write_text("a,b\n", encoding="utf-8")
    assert as_glossary(path).entries == (("a", "b"),) and as_glossary(str(path)).name == "terms"
    (tmp_path / "bad.tsv").write_bytes(b"\xff\xfe")
    with pytest.raises(MtkitError, match="bad.tsv: not UTF-8"):
        as_glossary(tmp_path / "bad.tsv")
    with pytest.raises(MtkitError, match="glossary: entry 1: an empty term"):
        as_glossary({"": "x"})


@pytest.fixture(scope="module")
def model(toy_run_workdir):
    return mtkit.load(toy_run_workdir / "run")


# a term pair the toy corpus never has (tree is always Baum there), and a name kept as it is
TERMS = {"tree": "Garten", "Anna": "Anna"}


def test_the_target_terms_appear_and_other_sentences_are_unchanged(model):
    lines = ["A dog sits under the tree .", "Two cats eat bread .", "Anna and the man walk in the park ."]
    plain = model.translate(lines)
    found = model.translate(lines, glossary=TERMS)
    assert "Garten" in found[0] and "Garten" not in plain[0]
    assert "Anna" in found[2]
    assert found[1] == plain[1]
    html = model.translate("A <b>dog</b> sits under the tree .", format="html", glossary=TERMS)
    assert "Garten" in html and "<b>" in html and "</b>" in html  # terms hold in HTML runs too
    paragraph = "Two cats eat bread . A dog sits under the tree ."
    joined = model.translate(paragraph, glossary=TERMS)
    assert joined.startswith(plain[1]) and "Garten" in joined


def test_terms_under_an_algorithm_without_constraints_are_refused_only_where_found(model):
    with pytest.raises(MtkitError, match="glossary terms in 'the tree': .*algorithm"):
        model.translate("the tree", glossary=TERMS, algorithm="greedy")
    assert model.translate("the dog", glossary=TERMS, algorithm="greedy") == model.translate(
        "the dog", algorithm="greedy"
    )


def test_translate_and_translate_file_take_a_glossary_file(model, toy_run_workdir, tmp_path, run_cli):
    from conftest import assert_one_line_error

    run = toy_run_workdir / "run"
    terms = tmp_path / "terms.tsv"
    terms.write_text("".join(f"{s}\t{t}\n" for s, t in TERMS.items()), encoding="utf-8")
    lines = ["A dog sits under the tree .", "Two cats eat bread ."]
    source = tmp_path / "in.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    done = run_cli("translate", run, "-i", source, "--glossary", terms)
    assert done.code == 0, done.err
    assert done.out.splitlines() == model.translate(lines, glossary=TERMS)
    out = tmp_path / "out.txt"
    done = run_cli("translate-file", run, source, "-o", out, "--glossary", terms)
    assert done.code == 0, done.err
    expected = tmp_path / "expected.txt"
    model.translate_file(source, expected, glossary=TERMS)
    assert out.read_bytes() == expected.read_bytes() and "Garten" in out.read_text(encoding="utf-8")
    bad = tmp_path / "bad.tsv"
    bad.write_text("tree\n", encoding="utf-8")
    for command in (("translate", run, "-i", source), ("translate-file", run, source, "-o", tmp_path / "x.txt")):
        assert_one_line_error(run_cli(*command, "--glossary", bad), "bad.tsv: line 1: expected source<TAB>target")
    assert not (tmp_path / "x.txt").exists()
    refused = run_cli("translate", run, "-i", source, "--glossary", terms, "--algorithm", "greedy")
    assert_one_line_error(refused, "--glossary: constraints need an algorithm that honours them")
    assert refused.out == ""  # refused before any line is translated
