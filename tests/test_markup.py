"""HTML fragments: parsed as a browser forgives them, cut into runs of inline text, and written back around a
translation with every tag where the alignments put its words. The "model" here is a word-for-word table whose
word order can be reversed, so each tag's right place is known."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from conftest import translate_fragment
from mtkit.text import markup
from mtkit.text.sentences import split

WORDS = {"a": "ein", "man": "Mann", "is": "ist", "riding": "fährt", "red": "rotes", "bike": "Fahrrad"}
WORDS.update({"two": "zwei", "dogs": "Hunde", "play": "spielen", "in": "im", "snow": "Schnee", "the": "dem"})


def fake_translate(sentence: str, reverse: bool = False) -> markup.AlignedSentence:
    """Each word (and each full stop) is a unit; the target is the table's word for each, optionally in reverse
    order, each target unit aligned to its source unit alone."""
    units = [(m.start(), m.end()) for m in re.finditer(r"\w+|[^\w\s]", sentence)]
    order = list(range(len(units)))
    if reverse:
        words = [i for i in order if sentence[units[i][0]].isalnum()]
        order = words[::-1] + [i for i in order if i not in words]
    target_words, target_units, at = [], [], 0
    for i in order:
        word = sentence[units[i][0] : units[i][1]]
        out = WORDS.get(word.lower(), word.upper())
        if target_words and out[0].isalnum():
            at += 1  # a space before a word
        target_units.append((at, at + len(out)))
        target_words.append(out if not target_words or not out[0].isalnum() else " " + out)
        at += len(out)
    weights = tuple(tuple(1.0 if s == i else 0.0 for s in range(len(units))) for i in order)
    return markup.AlignedSentence(tuple(units), "".join(target_words), tuple(target_units), weights)


def translate_html(fragment: str, reverse: bool = False) -> str:
    return translate_fragment(fragment, lambda sentence: fake_translate(sentence, reverse))


def strip_tags(text: str) -> str:
    return re.sub(r"<[^>]*>", "", text)


class Checker(HTMLParser):
    """Well-formedness: every end tag closes the element opened last (void elements have none)."""

    def __init__(self):
        super().__init__()
        self.stack, self.elements = [], []

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, tuple(attrs)))
        if tag not in markup.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes {self.stack[-1:] or 'nothing'}"
        self.stack.pop()


def elements(fragment: str) -> list:
    checker = Checker()
    checker.feed(fragment)
    checker.close()
    assert checker.stack == [], f"left open: {checker.stack}"
    return checker.elements


def test_tags_go_around_the_translation_of_the_words_they_enclosed():
    out = translate_html("A <b>man</b> is riding a <i>red</i> bike.")
    assert out == "ein <b>Mann</b> ist fährt ein <i>rotes</i> Fahrrad."
    out = translate_html("A <b>man</b> is riding a <i>red</i> bike.", reverse=True)
    assert out == "Fahrrad <i>rotes</i> ein fährt ist <b>Mann</b> ein."


def test_nested_elements_and_attributes_stay_as_written():
    source = 'Two <a href="/x?a=1&amp;b=2" class="k"><b>dogs</b> play</a> in the snow.'
    out = translate_html(source)
    assert out == 'zwei <a href="/x?a=1&amp;b=2" class="k"><b>Hunde</b> spielen</a> im dem Schnee.'
    assert elements(out) == elements(source)


def test_a_sentence_that_spans_tags_is_one_sentence_and_blocks_end_runs():
    tree = markup.parse("<p>A man <b>is riding. Two</b> dogs play.</p><p>A bike.</p>")
    found = [part for part in markup.runs(tree) if isinstance(part, markup.Run)]
    assert [r.text for r in found] == ["A man is riding. Two dogs play.", "A bike."]
    assert split(found[0].text, "en").sentences == ("A man is riding.", "Two dogs play.")
    out = translate_html("<p>A man <b>is riding. Two</b> dogs play.</p><p>A bike.</p>")
    assert out == "<p>ein Mann <b>ist fährt. zwei</b> Hunde spielen.</p><p>ein Fahrrad.</p>"


def test_void_elements_comments_and_kept_elements_are_carried_verbatim():
    source = 'A man <img src="m.png" alt="x"> is <code>riding</code> a bike.<br>Two dogs<!-- c --> play.'
    out = translate_html(source)
    assert '<img src="m.png" alt="x">' in out and "<code>riding</code>" in out and "<!-- c -->" in out
    assert out.index("<img") < out.index("ist") and out.index("<code>") > out.index("ist")
    assert "<br>" in out and out.split("<br>")[1].startswith("zwei Hunde")
    kept = '<p translate="no">A man is riding.</p><pre>  a   bike </pre><script>if (a < b) x();</script>'
    assert translate_html(kept) == kept


def test_entities_decoded_for_the_model_and_escaped_again():
    tree = markup.parse("A man &amp; a dog &lt;3 &eacute;t&#233;.")
    [run] = [p for p in markup.runs(tree) if isinstance(p, markup.Run)]
    assert run.text == "A man & a dog <3 été."
    out = translate_html("A man &amp; a dog &lt;3.")
    assert "&amp;" in out and "&lt;" in out and not re.search("<[^a-z/!]", out)


@pytest.mark.parametrize(
    "broken, fixed",
    [
        ("A <b>man is riding", "ein <b>Mann ist fährt</b>"),
        ("A man</i> is riding", "ein Mann ist fährt"),
        ("<p>A man<p>Two dogs", "<p>ein Mann</p><p>zwei Hunde</p>"),
        ("<ul><li>A man<li>a bike</ul>", "<ul><li>ein Mann</li><li>ein Fahrrad</li></ul>"),
    ],
)
def test_malformed_html_a_browser_shows_is_translated_and_comes_out_well_formed(broken, fixed):
    out = translate_html(broken)
    assert out == fixed
    elements(out)


def test_tags_without_words_and_crowded_tags_stay_in_the_output():
    out = translate_html("A man<span></span> is <b>riding</b><i></i> a bike.")
    assert elements(out) == elements("A man<span></span> is <b>riding</b><i></i> a bike.")
    assert strip_tags(out) == "ein Mann ist fährt ein Fahrrad."


def test_a_sentence_without_alignments_keeps_its_markup_around_the_whole_translation():
    [run] = [p for p in markup.runs(markup.parse("A <b>man</b> runs.")) if isinstance(p, markup.Run)]
    cut = split(run.text, "en")
    unaligned = markup.AlignedSentence(((0, 1), (2, 5), (6, 10)), "Ein Mann läuft.", ((0, 3), (4, 8)), None)
    out = run.render(cut, [unaligned])
    assert strip_tags(out) == "Ein Mann läuft." and out.count("<b>") == 1 and out.count("</b>") == 1


@pytest.mark.parametrize(
    "source, expected",
    [
        ("<p>call the <code>x</code></p>", "<p>CALL THE <code>x</code></p>"),
        ("<p><code>x</code> runs now</p>", "<p><code>x</code> RUNS NOW</p>"),
        ("A man <code>x</code> is riding.", "A MAN  <code>x</code> IS RIDING."),  # the stand-in keeps both spaces
        ('A man<img src="m.png"> is riding.', 'A MAN<img src="m.png"> IS RIDING.'),
        ("A man <br/>is riding.", None),
        ("  A <img> man rides.  ", "  A  <img> MAN RIDES.  "),  # the stand-in keeps the sentence's two spaces
    ],
)
def test_kept_elements_keep_the_spacing_they_had(source, expected):
    from conftest import upper_translate

    [out] = upper_translate([source], "html")
    if expected is not None:
        assert out == expected
    else:  # a line break ends the sentence before it
        assert out == "A MAN <br/>IS RIDING."
