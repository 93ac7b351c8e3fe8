"""Sentences inside a segment: found in each language of the shipped data, and joined back with the source's own
whitespace."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mtkit.text.sentences import Split, split, whole


def test_a_paragraph_is_cut_into_its_sentences_with_the_whitespace_between_them():
    text = "  A man is riding a bike. Two dogs play in the snow.\tA woman sings.  "
    cut = split(text, "en")
    assert cut.sentences == ("A man is riding a bike.", "Two dogs play in the snow.", "A woman sings.")
    assert cut.gaps == ("  ", " ", "\t", "  ")
    assert cut.join(cut.sentences) == text
    assert cut.join(["a", "b", "c"]) == "  a b\tc  "


def test_line_breaks_end_sentences_and_blank_lines_are_kept():
    text = "A dog runs\n\nTwo cats sleep. A bird sings.\r\n"
    cut = split(text, "en")
    assert cut.sentences == ("A dog runs", "Two cats sleep.", "A bird sings.")
    assert cut.gaps == ("", "\n\n", " ", "\r\n")
    # in HTML source a line break is a space: the sentence goes on
    flowing = split("A dog\n  runs fast. A cat sleeps.", "en", line_breaks=False)
    assert flowing.sentences == ("A dog\n  runs fast.", "A cat sleeps.")


@pytest.mark.parametrize(
    "lang, text, expected",
    [
        ("en", "Mr. Smith and Dr. Jones walk e.g. to the U.S. border. They arrive.", 2),
        ("de", "Ein Mann, z.B. ein Arzt, geht zum 3. Mal nach Hause. Er ist müde.", 2),
        ("de", "Er geht zum 3. Mal nach Hause. Es regnet.", 2),
        ("fr", "Le Dr. Martin et M. Durand arrivent à la gare. Ils sont là.", 2),
        ("cs", "Dr. Novák a prof. Svoboda přicházejí. Jsou tady.", 2),
        ("en", "Is it raining? Yes! It is...", 3),
        ("ja", "犬が走る。猫が寝る。", 2),  # no Moses prefix list: sentencex's rules
        ("xx", "A man rides. A dog runs.", 2),  # a code no splitter knows: English rules
    ],
)
def test_abbreviations_do_not_end_sentences(lang, text, expected):
    cut = split(text, lang)
    assert len(cut.sentences) == expected, cut.sentences
    assert cut.join(cut.sentences) == text


def test_whitespace_only_and_empty_text_have_no_sentence():
    for text in ("", "   ", "\n\t "):
        cut = split(text, "en")
        assert cut == Split((), (text,))
        assert cut.join([]) == text
    assert whole("  One. Two.  ") == Split(("One. Two.",), ("  ", "  "))


def test_join_refuses_the_wrong_number_of_translations():
    with pytest.raises(ValueError, match="1 translations for 2 sentences"):
        split("One. Two.", "en").join(["x"])


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab .?!\n\t\u00a0Z")), max_size=60))
def test_any_text_comes_back_whole(text):
    for line_breaks in (True, False):
        cut = split(text, "en", line_breaks=line_breaks)
        assert cut.join(cut.sentences) == text
        assert len(cut.gaps) == len(cut.sentences) + 1
        assert all(s and s == s.strip() for s in cut.sentences)
        assert all(not g.strip() for g in cut.gaps)


def test_lines_the_moses_rules_would_not_cut_skip_them_and_the_others_do_not():
    from sentence_splitter import SentenceSplitter

    from mtkit.text.sentences import _segment

    moses = SentenceSplitter(language="de").split
    for text in [
        "Ein Mann fährt Fahrrad.",
        "Ein Mann fährt Fahrrad",
        'Er sagte: "Halt!" Dann ging er.',
        "Er sagte: «Halt.» Dann ging er.",
        "Zwei Hunde (im Schnee.) Sie spielen.",
        "Nr. 5 ist hier",
        "Was?Nichts.",
    ]:
        assert [s.strip() for s in _segment("de", text)] == moses(text), text


_WORDS = ["E.S.E.", "U.S.", "A.-B.", "x?E.S.E.", "Nr.", "z.B.", "e.g.", "Dr.", "dog.", "été.", "Été", "...", "Halt.»"]
_WORDS += ["a", "Der", "the", "1.", "5", "«", "»", "(", ")", '"', "?", "!", "一"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_WORDS), min_size=2, max_size=6), st.sampled_from([" ", "  ", "\t", "\u00a0"]))
def test_a_line_said_to_stay_whole_is_one_sentence_to_the_moses_rules(words, space):
    """Lines with a candidate end before a lower-case word or after an acronym skip the splitter: it would not cut
    them either."""
    from sentence_splitter import SentenceSplitter

    from mtkit.text.sentences import _moses_may_cut

    text = space.join(words)
    if not _moses_may_cut(text):
        assert len(SentenceSplitter(language="de").split(" ".join(text.split()))) <= 1, text


def test_acronyms_and_lower_case_words_after_a_full_stop_do_not_load_the_splitter():
    from mtkit.text.sentences import _moses_may_cut

    assert not _moses_may_cut("A sign that says E.S.E. Electronics.")
    assert not _moses_may_cut("Tools, e.g. a hammer.")
    assert _moses_may_cut("A sign. Electronics.")
    assert _moses_may_cut("U.S.. The end")
    assert _moses_may_cut('E.S.E. "Quoted"')
