"""Markdown, SRT, PO and XLIFF documents (``mtkit.documents``): each built and read back with its own library,
translated by a stand-in model that upper-cases every word (``upper_translate``), and once by the toy model.

Every document must come back with the same structure, its text translated where a translator would expect it
and left alone elsewhere, and the model called once per document."""

from __future__ import annotations

import re
import sys
from datetime import timedelta

import pytest
from markdown_it import MarkdownIt

from conftest import EN_DE, upper_translate
from mtkit.documents import gettext, markdown, subtitles, xliff
from mtkit.errors import MtkitError

# the libraries of mtkit's documents extra
srt = pytest.importorskip("srt")
polib = pytest.importorskip("polib")
etree = pytest.importorskip("lxml.etree")
ttk_xliff = pytest.importorskip("translate.storage.xliff")


class Counting:
    """``upper_translate`` that records each call."""

    def __init__(self):
        self.calls: list[tuple[list, str]] = []

    def __call__(self, texts: list, markup: str) -> list:
        self.calls.append((list(texts), markup))
        return upper_translate(texts, markup)


def translated(module, data: bytes) -> bytes:
    counting = Counting()
    out = module.translate_document(data, counting)
    assert len(counting.calls) == 1, counting.calls
    return out


# ---------------------------------------------------------------------------------------------- Markdown
MD = MarkdownIt("commonmark").enable(["table", "strikethrough"])

DOCUMENT = """\
---
title: a small park
tags: [dog, cat]
---
# The red **dog** runs ##

A man sits in the *green* park with `the_ball()` and [a big dog](https://example.com/a_b?x=1 "the title").
He sees [the cat][cat] and [Two Dogs] near <kbd>the tree</kbd>.

The old man[2 spaces]
eats bread\\
in the garden
with a dog.

An old house
============

- A child plays with **a ball**.
- The woman runs
  1. to the house
  2. to the ~~street~~ park

> A dog sits under the tree.
> > The cat sees ![a cat](cat.png) the dog.

| Animal | Colour of the *animal* |
|--------|:-------:|
| the dog | red \\| blue |
| `cat \\| name` | green |

```python
dog = "a red dog"  # not translated
```

    indented code is not translated

<div class="note">
A raw HTML block is not translated.
</div>

***

[cat]: https://example.com/cat "the cat"
[two dogs]: https://example.com/dogs
""".replace("[2 spaces]", "  ")


def block_shape(text: str) -> list[tuple]:
    return [(t.type, t.nesting, t.level, t.tag, t.markup) for t in MD.parse(text)]


def inline_shapes(text: str) -> list[list[str]]:
    """The children types of each inline token, soft line breaks and the text around them as one text."""
    shapes = []
    for token in MD.parse(text):
        if token.type == "inline":
            types = [c.type for c in token.children if c.type != "softbreak"]
            shapes.append([t for i, t in enumerate(types) if t != "text" or i == 0 or types[i - 1] != "text"])
    return shapes


def test_markdown_text_translated_structure_code_and_urls_kept():
    out = translated(markdown, DOCUMENT.encode()).decode()
    assert block_shape(out) == block_shape(DOCUMENT)
    assert inline_shapes(out) == inline_shapes(DOCUMENT)  # a wrapped line is one line, its softbreaks spaces
    lines = out.split("\n")
    assert lines[:4] == DOCUMENT.split("\n")[:4]  # front matter
    assert lines[4] == "# THE RED **DOG** RUNS ##"
    assert (
        "A MAN SITS IN THE *GREEN* PARK WITH `the_ball()` AND "
        '[A BIG DOG](https://example.com/a_b?x=1 "the title"). HE SEES [THE CAT][cat] AND [TWO DOGS][Two Dogs] '
        "NEAR <kbd>the tree</kbd>." in lines
    )
    assert "THE OLD MAN  " in lines and "EATS BREAD\\" in lines and "IN THE GARDEN WITH A DOG." in lines
    assert "AN OLD HOUSE" in lines and "============" in lines
    assert "- A CHILD PLAYS WITH **A BALL**." in lines
    assert "  2. TO THE ~~STREET~~ PARK" in lines
    assert "> > THE CAT SEES ![a cat](cat.png) THE DOG." in lines
    assert "| ANIMAL | COLOUR OF THE *ANIMAL* |" in lines
    assert "| THE DOG | RED \\| BLUE |" in lines and "| `cat \\| name` | GREEN |" in lines
    for kept in (
        'dog = "a red dog"  # not translated',
        "    indented code is not translated",
        "A raw HTML block is not translated.",
        '[cat]: https://example.com/cat "the cat"',
        "[two dogs]: https://example.com/dogs",
        "***",
    ):
        assert kept in lines
    codes = [c.content for t in MD.parse(DOCUMENT) if t.type == "inline" for c in t.children if c.type == "code_inline"]
    assert codes == ["the_ball()", "cat | name"]
    assert codes == [
        c.content for t in MD.parse(out) if t.type == "inline" for c in t.children if c.type == "code_inline"
    ]
    links = [c.attrs["href"] for t in MD.parse(out) if t.type == "inline" for c in t.children if c.type == "link_open"]
    assert links == ["https://example.com/a_b?x=1", "https://example.com/cat", "https://example.com/dogs"]


def test_markdown_model_is_given_html_with_inline_formatting():
    counting = Counting()
    markdown.translate_document(b"A *red* dog and `code` and [a cat](http://x.org).\n", counting)
    [(texts, markup)] = counting.calls
    assert markup == "html"
    assert re.fullmatch(
        r'A <em data-md="0">red</em> dog and <code data-md="1">code</code> and '
        r'<a href="http://x.org" data-md="2">a cat</a>\.',
        texts[0],
    ), texts


@pytest.mark.parametrize(
    "source",
    ["A dog.\n", "- A dog.\n", "> A dog.\n", "# A dog\n", "| a |\n|---|\n| A dog. |\n", "Text  \nA dog.\n"],
)
def test_markdown_escapes_a_translation_that_would_read_as_markdown(source):
    literal = "- 1. *a* # [b](c) `d` <e> | ~~f~~ _g_ &amp; \\"

    escaped = literal.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")

    def translate(texts, markup):
        return [re.sub(r"A dog\.?", lambda _: escaped if markup == "html" else literal, t) for t in texts]

    out = markdown.translate_document(source.encode(), translate).decode()
    assert block_shape(out) == block_shape(source)
    [last] = [t for t in MD.parse(out) if t.type == "inline"][-1:]
    assert [c.type for c in last.children if c.type not in ("text", "hardbreak")] == []
    assert literal in "".join(c.content for c in last.children)


def test_markdown_exclamation_mark_before_a_link_stays_text():
    def translate(texts, markup):
        return [t.replace("Look ", "Look!") for t in texts]

    out = markdown.translate_document(b"Look [here](http://x.org) now!\n", translate)
    assert out == b"Look\\![here](http://x.org) now!\n"
    assert [c.type for c in MD.parse(out.decode())[1].children][:2] == ["text", "link_open"]


def test_markdown_line_endings_bom_and_documents_without_text():
    source = "\ufeff# A dog\r\n\r\n```\r\ncode\r\n```\r\n".encode()
    assert translated(markdown, source) == "\ufeff# A DOG\r\n\r\n```\r\ncode\r\n```\r\n".encode()
    for empty in (b"", b"\n\n", b"```\ncode\n```\n", b"[a]: http://x\n"):
        assert markdown.translate_document(empty, Counting()) == empty


def test_markdown_bad_input():
    with pytest.raises(MtkitError, match="not UTF-8"):
        markdown.translate_document(b"# A \xff dog\n", Counting())


# ------------------------------------------------------------------------------------------------- SRT
def subtitle(index: int, start: float, content: str) -> srt.Subtitle:
    return srt.Subtitle(index, timedelta(seconds=start), timedelta(seconds=start + 1.5), content)


SUBTITLES = [
    subtitle(3, 1.0, "A man sits in the park.\nThe dog runs near the tree."),
    subtitle(4, 3.25, "- Where is the cat?\n- Under the old house."),
    subtitle(7, 6.5, '{\\an8}The <i>red</i> ball & the <font color="#ff0000">green tree</font>.'),
    subtitle(9, 8.0, "A child eats bread"),
]


def test_srt_text_translated_numbers_and_timings_kept():
    source = srt.compose(SUBTITLES, reindex=False)
    out = translated(subtitles, source.encode()).decode()
    found = list(srt.parse(out))
    assert [(s.index, s.start, s.end) for s in found] == [(s.index, s.start, s.end) for s in SUBTITLES]
    assert found[0].content == "A MAN SITS IN THE PARK.\nTHE DOG RUNS NEAR THE TREE."
    assert found[1].content == "- WHERE IS THE CAT?\n- UNDER THE OLD HOUSE."
    assert found[2].content == '{\\an8}THE <i>RED</i> BALL & THE <font color="#ff0000">GREEN TREE</font>.'
    assert found[3].content == "A CHILD EATS BREAD"


def test_srt_subtitle_lines_are_one_text_to_the_model():
    counting = Counting()
    subtitles.translate_document(srt.compose(SUBTITLES, reindex=False).encode(), counting)
    [(texts, markup)] = counting.calls
    assert markup == "html"
    assert texts[0] == "A man sits in the park. The dog runs near the tree."
    assert texts[1:3] == ["- Where is the cat?", "- Under the old house."]


@pytest.mark.parametrize("module", [subtitles, gettext, markdown, xliff])
def test_documents_without_inline_markup_go_as_plain_text(module):
    """Plain text ("text") is what every engine translates; "html" only where a tag has to be carried."""
    data = {
        subtitles: srt.compose([subtitle(1, 1.0, "A dog & a cat run.")]).encode(),
        gettext: b'msgid "A dog & a cat <3"\nmsgstr ""\n',
        markdown: b"# A dog & a cat <3\n\nA [dog] runs.\n",
        xliff: bytes(xliff_store()),
    }[module]
    counting = Counting()
    out = module.translate_document(data, counting)
    [(texts, markup)] = counting.calls
    assert markup == "text"
    assert any("A dog & a cat" in text for text in texts)
    assert b"A DOG & A CAT" in out or b"A DOG &amp; A CAT" in out or b"A DOG \\& A CAT" in out


def test_srt_crlf_bom_and_empty():
    source = "\ufeff" + srt.compose(SUBTITLES[3:], reindex=False, eol="\r\n")
    out = translated(subtitles, source.encode()).decode()
    assert out == source.replace("A child eats bread", "A CHILD EATS BREAD")
    assert subtitles.translate_document(b"", Counting()) == b""


def test_srt_wrap():
    assert subtitles.wrap("one two three four", 2) == ["one two", "three four"]
    assert subtitles.wrap("a b", 3) == ["a", "b"]
    assert subtitles.wrap('the <font color="red">big</font> dog runs', 2) == [
        'the <font color="red">big</font>',
        "dog runs",
    ]
    assert subtitles.wrap("  single  ", 2) == ["single"]
    assert subtitles.wrap("<i>Hello</i> .", 2) == ["<i>Hello</i> ."]
    assert subtitles.wrap("A man sits in the park . The dog runs near .", 2) == [
        "A man sits in the park .",
        "The dog runs near .",
    ]


@pytest.mark.parametrize(
    "data",
    [b"this is not a subtitle file", b"1\n00:00:01 -> 00:00:02\nA dog\n"],
)
def test_srt_bad_input(data):
    with pytest.raises(MtkitError, match=r"^not a valid SRT file \(.*\)"):
        subtitles.translate_document(data, Counting())
    with pytest.raises(MtkitError, match="not UTF-8"):
        subtitles.translate_document(b"1\n00:00:01,000 --> 00:00:02,000\n\xff\n", Counting())


# -------------------------------------------------------------------------------------------------- PO
def catalog() -> polib.POFile:
    po = polib.POFile()
    po.header = "Test catalog."
    po.metadata = {
        "Project-Id-Version": "1.0",
        "Content-Type": "text/plain; charset=UTF-8",
        "Plural-Forms": "nplurals=2; plural=(n != 1);",
    }
    po.append(polib.POEntry(msgid="The red dog runs.", occurrences=[("app.py", "3")], comment="A note.", tcomment="t"))
    po.append(polib.POEntry(msgid="Open", msgctxt="menu"))
    po.append(polib.POEntry(msgid="Open %(name)s in the garden", flags=["python-format"]))
    po.append(polib.POEntry(msgid="A man sits.\nA dog runs.\n"))
    po.append(polib.POEntry(msgid='Click <a href="/park">the park</a> {0}'))
    po.append(polib.POEntry(msgid="one dog", msgid_plural="%d dogs", msgstr_plural={0: "", 1: ""}))
    po.append(polib.POEntry(msgid="The cat", msgstr="Die Katze"))
    po.append(polib.POEntry(msgid="A tree", msgstr="Ein Baum", flags=["fuzzy"]))
    po.append(polib.POEntry(msgid="Old text", obsolete=True))
    return po


def test_po_untranslated_entries_get_msgstr_the_rest_kept():
    source = catalog()
    out = polib.pofile(translated(gettext, str(source).encode()).decode())
    assert len(out) == len(source)
    for before, after in zip(source, out):
        assert (before.msgid, before.msgid_plural, before.msgctxt, before.flags, before.occurrences) == (
            after.msgid,
            after.msgid_plural,
            after.msgctxt,
            after.flags,
            after.occurrences,
        )
        assert (before.comment, before.tcomment, before.obsolete) == (after.comment, after.tcomment, after.obsolete)
    assert out.metadata == source.metadata and out.header == source.header
    by_id = {e.msgid: e for e in out}
    assert by_id["The red dog runs."].msgstr == "THE RED DOG RUNS."
    assert by_id["Open"].msgstr == "OPEN"
    assert by_id["Open %(name)s in the garden"].msgstr == "OPEN %(name)s IN THE GARDEN"
    assert by_id["A man sits.\nA dog runs.\n"].msgstr == "A MAN SITS.\nA DOG RUNS.\n"
    assert by_id['Click <a href="/park">the park</a> {0}'].msgstr == 'CLICK <a href="/park">THE PARK</a> {0}'
    assert by_id["one dog"].msgstr_plural == {0: "ONE DOG", 1: "%d DOGS"}
    assert by_id["The cat"].msgstr == "Die Katze"
    assert by_id["A tree"].msgstr == "Ein Baum" and by_id["A tree"].flags == ["fuzzy"]
    assert by_id["Old text"].msgstr == ""


def test_po_placeholders_and_newlines_are_kept_verbatim():
    counting = Counting()
    gettext.translate_document(str(catalog()).encode(), counting)
    [(texts, markup)] = counting.calls
    assert markup == "html"
    assert len(texts) == 7  # five entries, a plural entry's two forms
    assert texts[2] == 'Open <code data-keep="0"></code> in the garden'
    assert texts[3] == 'A man sits.<br data-keep="0">A dog runs.<br data-keep="1">'


def test_po_plural_forms_from_the_header_and_other_charsets():
    po = polib.POFile()
    po.metadata = {"Content-Type": "text/plain; charset=ISO-8859-1", "Plural-Forms": "nplurals=3; plural=n%10;"}
    po.append(polib.POEntry(msgid="one café", msgid_plural="%d cafés"))
    out = translated(gettext, str(po).encode("latin-1"))
    found = polib.pofile(out.decode("latin-1"))
    assert found[0].msgstr_plural == {0: "ONE CAFÉ", 1: "%d CAFÉS", 2: "%d CAFÉS"}
    assert "charset=ISO-8859-1" in out.decode("latin-1")


def test_po_without_header_crlf():
    data = b'# A comment.\r\n#: park.py:1\r\nmsgid "A dog"\r\nmsgstr ""\r\n'
    assert translated(gettext, data) == data.replace(b'msgstr ""', b'msgstr "A DOG"')


def test_po_nothing_to_translate_is_returned_as_it_is():
    po = polib.POFile()
    po.append(polib.POEntry(msgid="A dog", msgstr="Ein Hund"))
    data = str(po).encode()
    assert gettext.translate_document(data, Counting()) == data


@pytest.mark.parametrize(
    "data, message",
    [
        (b'msgid "A dog"\nmsgstr "unterminated\n', r"^not a valid PO file \(.*\)"),
        (b"this is not a catalog\n", r"^not a valid PO file \(.*\)"),
        (b'msgid "A \xff dog"\nmsgstr ""\n', "not UTF-8"),
        (
            b'msgid ""\nmsgstr "Content-Type: text/plain; charset=ISO-8859-1\\n"\n\nmsgid "\xe2\x82\xac"\nmsgstr ""\n',
            "cannot hold",
        ),
    ],
)
def test_po_bad_input(data, message):
    def translate(texts, markup):
        return ["\u20ac" + t for t in texts]  # a character Latin-1 cannot hold

    with pytest.raises(MtkitError, match=message):
        gettext.translate_document(data, translate)


# ----------------------------------------------------------------------------------------------- XLIFF
def xliff_store() -> ttk_xliff.xlifffile:
    store = ttk_xliff.xlifffile(sourcelanguage="en", targetlanguage="de")
    for uid, text in (
        ("u1", "A man sits in the park."),
        ("u2", "A dog & a cat."),
        ("u3", "Keep me."),
        ("u4", "Done"),
    ):
        unit = store.addsourceunit(text)
        unit.setid(uid)
    store.units[2].xmlelement.set("translate", "no")
    store.units[3].target = "Fertig"
    return store


def test_xliff_sources_translated_into_targets():
    store = xliff_store()
    out = translated(xliff, bytes(store))
    found = ttk_xliff.xlifffile.parsestring(out)
    assert [u.xmlelement.get("id") for u in found.units] == ["u1", "u2", "u3", "u4"]
    assert [u.source for u in found.units] == [u.source for u in store.units]
    assert [u.target for u in found.units] == ["A MAN SITS IN THE PARK.", "A DOG & A CAT.", None, "Fertig"]
    ns = etree.QName(found.units[0].xmlelement).namespace
    target = found.units[0].xmlelement.find(f"{{{ns}}}target")
    assert (target.get("state"), target.get("state-qualifier")) == ("translated", "mt-suggestion")
    assert found.units[3].xmlelement.find(f"{{{ns}}}target").get("state-qualifier") is None
    assert out.startswith(b'<?xml version="1.0" encoding="UTF-8"?>\n<xliff')


XLIFF_12 = """<?xml version="1.0" encoding="UTF-8"?>
<!-- made by hand -->
<xliff xmlns="urn:oasis:names:tc:xliff:document:1.2" version="1.2">
  <file original="park.html" source-language="en" target-language="de" datatype="html">
    <body>
      <group id="g" translate="no">
        <trans-unit id="skipped"><source>A dog.</source></trans-unit>
      </group>
      <trans-unit id="inline">
        <source>The <g id="1">red dog</g> runs <x id="2"/> to <ph id="3">&lt;b&gt;</ph> the park.</source>
        <note>a note</note>
      </trans-unit>
      <trans-unit id="empty-target"><source>A cat</source><target/></trans-unit>
    </body>
  </file>
</xliff>
"""


def test_xliff_12_inline_codes_carried_across():
    out = translated(xliff, XLIFF_12.encode())
    assert out.startswith(XLIFF_12.split("<xliff")[0].encode())  # declaration and comment as written
    root = etree.fromstring(out)
    ns = {"x": "urn:oasis:names:tc:xliff:document:1.2"}
    assert root.find(".//x:trans-unit[@id='skipped']/x:target", ns) is None
    target = root.find(".//x:trans-unit[@id='inline']/x:target", ns)
    assert etree.tostring(target, encoding="unicode", with_tail=False).split(">", 1)[1] == (
        'THE <g id="1">RED DOG</g> RUNS <x id="2"/> TO <ph id="3">&lt;b&gt;</ph> THE PARK.</target>'
    )
    assert [etree.QName(c).localname for c in root.find(".//x:trans-unit[@id='inline']", ns)] == [
        "source",
        "target",
        "note",
    ]
    assert root.find(".//x:trans-unit[@id='empty-target']/x:target", ns).text == "A CAT"
    assert b'\n        <target state="translated"' in out  # the source's indentation


XLIFF_20 = """<?xml version="1.0" encoding="UTF-8"?>
<xliff xmlns="urn:oasis:names:tc:xliff:document:2.0" version="2.0" srcLang="en" trgLang="de">
  <file id="f1">
    <unit id="u1">
      <segment id="s1">
        <source>The <pc id="1">red dog</pc> runs.<ph id="2"/></source>
      </segment>
      <segment id="s2" state="initial"><source>A cat.</source></segment>
    </unit>
    <unit id="u2" translate="no"><segment><source>A tree.</source></segment></unit>
  </file>
</xliff>
"""


def test_xliff_20_segments():
    root = etree.fromstring(translated(xliff, XLIFF_20.encode()))
    ns = {"x": "urn:oasis:names:tc:xliff:document:2.0"}
    s1, s2, s3 = root.findall(".//x:segment", ns)
    assert etree.tostring(s1.find("x:target", ns), encoding="unicode", with_tail=False) == (
        '<target xmlns="urn:oasis:names:tc:xliff:document:2.0">THE <pc id="1">RED DOG</pc> RUNS.<ph id="2"/></target>'
    )
    assert s2.find("x:target", ns).text == "A CAT."
    assert (s1.get("state"), s2.get("state"), s3.get("state")) == ("translated", "translated", None)
    assert s3.find("x:target", ns) is None


@pytest.mark.parametrize(
    "data, message",
    [
        (b"<xliff><file><body><trans-unit id='1'><source>A dog</source></body></xliff>", "not a valid XLIFF file"),
        (b"not xml at all", "not a valid XLIFF file"),
        (b"", "not a valid XLIFF file"),
        (b"<html><body>A dog</body></html>", r"not a valid XLIFF file \(its root element is <html>"),
    ],
)
def test_xliff_bad_input(data, message):
    with pytest.raises(MtkitError, match=message):
        xliff.translate_document(data, Counting())


@pytest.mark.parametrize(
    "module, library, data",
    [
        (subtitles, "srt", b"1\n00:00:01,000 --> 00:00:02,000\nA dog\n"),
        (gettext, "polib", b'msgid "A dog"\nmsgstr ""\n'),
        (xliff, "lxml.etree", XLIFF_20.encode()),
    ],
)
def test_a_missing_library_is_one_line(module, library, data, monkeypatch):
    monkeypatch.setitem(sys.modules, library, None)  # import fails as for a library not installed
    with pytest.raises(MtkitError, match=r"files need \S+: pip install"):
        module.translate_document(data, Counting())


# ------------------------------------------------------------------------------------------- real model
GERMAN = set(EN_DE.values())


def test_translate_file_with_the_toy_model(toy_run_workdir, tmp_path):
    import mtkit

    model = mtkit.load(toy_run_workdir / "run")
    source = tmp_path / "park.srt"
    source.write_text(
        srt.compose(
            [
                subtitle(1, 1.0, "A man sits in the park ."),
                subtitle(2, 3.0, "The dog runs\nnear the <i>house</i> ."),
            ]
        ),
        encoding="utf-8",
    )
    target = tmp_path / "park.de.srt"
    model.translate_file(source, target)
    found = list(srt.parse(target.read_text(encoding="utf-8")))
    assert [(s.index, s.start, s.end) for s in found] == [
        (1, timedelta(seconds=1), timedelta(seconds=2.5)),
        (2, timedelta(seconds=3), timedelta(seconds=4.5)),
    ]
    assert GERMAN & set(re.sub("<[^>]*>", " ", " ".join(s.content for s in found)).split())
    assert "<i>" in found[1].content and "</i>" in found[1].content

    po = polib.POFile()
    po.metadata = {"Content-Type": "text/plain; charset=UTF-8"}
    po.append(polib.POEntry(msgid="A woman plays with a ball .", msgctxt="game"))
    po.append(polib.POEntry(msgid="two cats", msgid_plural="three dogs", msgstr_plural={0: "", 1: ""}))
    source = tmp_path / "park.po"
    po.save(str(source))
    target = tmp_path / "park.de.po"
    model.translate_file(source, target)
    found = polib.pofile(str(target))
    assert [(e.msgid, e.msgctxt) for e in found] == [(e.msgid, e.msgctxt) for e in po]
    words = " ".join([found[0].msgstr, *found[1].msgstr_plural.values()]).split()
    assert GERMAN & set(words), words
