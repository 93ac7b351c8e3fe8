"""Word documents (and PowerPoint presentations) translated paragraph by paragraph: structure, styles, tables,
headers, footers, footnotes and run formatting kept, every word translated, the bold word's translation in the
bold run; pictures, tabs, breaks, fields and hyperlinks in place; files that are not DOCX refused with one line.
The "model" is ``upper_translate`` (every word upper-cased, tags carried as the model carries them); one test
runs a small trained model end to end."""

from __future__ import annotations

import io
import re
import struct
import zipfile
import zlib

import docx
import pytest
from docx.enum.text import WD_BREAK
from docx.opc.constants import RELATIONSHIP_TYPE as RT
from docx.oxml import OxmlElement, parse_xml
from docx.oxml.ns import qn
from docx.shared import Inches

from conftest import EN_DE, upper_translate
from mtkit.documents import office
from mtkit.errors import MtkitError

W_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


def saved(document) -> bytes:
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def png_1x1() -> bytes:
    """A one-pixel PNG, enough for python-docx to place a picture."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0\0\0\0")) + chunk(b"IEND", b"")
    )


def add_hyperlink(paragraph, text: str, url: str) -> None:
    r_id = paragraph.part.relate_to(url, RT.HYPERLINK, is_external=True)
    link = OxmlElement("w:hyperlink")
    link.set(qn("r:id"), r_id)
    run = OxmlElement("w:r")
    properties = OxmlElement("w:rPr")
    style = OxmlElement("w:u")
    style.set(qn("w:val"), "single")
    properties.append(style)
    run.append(properties)
    run_text = OxmlElement("w:t")
    run_text.text = text
    run.append(run_text)
    link.append(run)
    paragraph._p.append(link)


def add_field(paragraph, instruction: str, result: str) -> None:
    """A complex field (``w:fldChar`` begin / ``w:instrText`` / separate / result / end)."""
    for kind, value in (("begin", None), ("instr", instruction), ("separate", None), ("text", result), ("end", None)):
        run = paragraph.add_run()
        if kind == "instr":
            element = OxmlElement("w:instrText")
            element.text = value
        elif kind == "text":
            run.text = value
            continue
        else:
            element = OxmlElement("w:fldChar")
            element.set(qn("w:fldCharType"), kind)
        run._r.append(element)


def sample() -> bytes:
    """Headings, a paragraph of plain, bold and italic runs, a tab and a line break, a picture, a whitespace-only
    paragraph, a table with a nested table, a header and a footer."""
    document = docx.Document()
    document.add_heading("A man in the park", level=1)
    mixed = document.add_paragraph("The ")
    mixed.add_run("red").bold = True
    mixed.add_run(" dog runs in the street. ")
    mixed.add_run("A small cat").italic = True
    mixed.add_run(" sits near the tree.")
    document.add_heading("Two children", level=2)
    breaks = document.add_paragraph("Name:")
    run = breaks.add_run()
    run.add_tab()
    run.add_text("a happy child")
    run.add_break(WD_BREAK.LINE)
    run.add_text("with a ball.")
    picture = document.add_paragraph("The old house ")
    picture.add_run().add_picture(io.BytesIO(png_1x1()), width=Inches(0.5))
    picture.add_run(" and the garden.")
    document.add_paragraph("   ")
    table = document.add_table(rows=2, cols=2)
    table.style = "Table Grid"
    table.cell(0, 0).text = "the green tree"
    table.cell(0, 1).paragraphs[0].add_run("bold cell").bold = True
    table.cell(1, 0).text = "a black bike"
    table.cell(1, 1).add_table(rows=1, cols=2).cell(0, 1).text = "nested water"
    section = document.sections[0]
    section.header.paragraphs[0].text = "a header line"
    section.footer.paragraphs[0].text = "a footer line"
    return saved(document)


def all_paragraphs(document) -> list:
    """Every paragraph of the body, its tables (nested ones too), header and footer, in order."""

    def of(container) -> list:
        out = list(container.paragraphs)
        for table in getattr(container, "tables", []):
            for row in table.rows:
                for cell in row.cells:
                    out += of(cell)
        return out

    section = document.sections[0]
    return of(document) + of(section.header) + of(section.footer)


def counting(calls: list):
    def translate(texts: list, markup: str) -> list:
        calls.append((markup, list(texts)))
        return upper_translate(texts, markup)

    return translate


def test_structure_styles_and_formatting_kept_every_word_translated():
    source = sample()
    calls: list = []
    found = docx.Document(io.BytesIO(office.translate_document(source, counting(calls))))
    original = docx.Document(io.BytesIO(source))
    before, after = all_paragraphs(original), all_paragraphs(found)
    assert len(after) == len(before)
    assert len(found.tables) == len(original.tables) == 1
    table = found.tables[0]
    assert (len(table.rows), len(table.columns), table.style.name) == (2, 2, "Table Grid")
    assert len(table.cell(1, 1).tables) == 1 and table.cell(1, 1).tables[0].cell(0, 1).text == "NESTED WATER"
    for old, new in zip(before, after):
        assert new.style.name == old.style.name
        assert new.text == old.text.upper()  # every word translated, whitespace, tabs and breaks in place
        assert [(r.bold, r.italic) for r in new.runs] == [(r.bold, r.italic) for r in old.runs]
    assert [p.style.name for p in found.paragraphs[:4]] == ["Heading 1", "Normal", "Heading 2", "Normal"]
    mixed = found.paragraphs[1].runs
    assert [r.text for r in mixed] == [
        "THE ",
        "RED",
        " DOG RUNS IN THE STREET. ",
        "A SMALL CAT",
        " SITS NEAR THE TREE.",
    ]
    assert mixed[1].bold and mixed[3].italic and not mixed[2].bold
    assert table.cell(0, 1).paragraphs[0].runs[0].bold
    assert found.sections[0].header.paragraphs[0].text == "A HEADER LINE"
    assert found.sections[0].footer.paragraphs[0].text == "A FOOTER LINE"
    assert found.paragraphs[5].text == "   "  # whitespace only: as it was
    # one call per markup: single-run paragraphs as text, the others as HTML with a span per run
    assert sorted(markup for markup, _ in calls) == ["html", "text"]
    html = dict(calls)["html"]
    assert '<span data-g="1">red</span>' in html[0] and len(html) == 3
    assert "the green tree" in dict(calls)["text"]


def test_tabs_breaks_and_pictures_stay_in_their_runs():
    found = docx.Document(io.BytesIO(office.translate_document(sample(), upper_translate)))
    run = found.paragraphs[3].runs[1]
    kinds = [child.tag.split("}")[1] for child in run._r if child.tag != qn("w:rPr")]
    assert kinds == ["tab", "t", "br", "t"]
    assert run.text == "\tA HAPPY CHILD\nWITH A BALL."
    picture = found.paragraphs[4]
    assert len(picture.runs) == 3 and picture.runs[1]._r.find(qn("w:drawing")) is not None
    assert picture.text == "THE OLD HOUSE  AND THE GARDEN."
    assert len(found.inline_shapes) == 1
    image = found.inline_shapes[0]._inline.graphic.graphicData.pic.blipFill.blip.embed
    assert found.part.related_parts[image].blob == png_1x1()


def test_hyperlinks_fields_and_comments():
    document = docx.Document()
    paragraph = document.add_paragraph("Read ")
    add_hyperlink(paragraph, "the old house", "https://example.org/house")
    paragraph.add_run(" on page ")
    add_field(paragraph, " PAGEREF here \\h ", "three")
    paragraph.add_run(" with a dog.")
    links = document.add_paragraph()
    add_hyperlink(links, "a red ", "https://example.org/red")
    add_hyperlink(links, "ball", "https://example.org/ball")
    document.add_comment(paragraph.runs[0], text="the big tree", author="A")
    found = docx.Document(io.BytesIO(office.translate_document(saved(document), upper_translate)))
    link = found.paragraphs[0].hyperlinks[0]
    assert link.address == "https://example.org/house" and link.text == "THE OLD HOUSE"
    assert link.runs[0].underline
    # the field's instruction and result are left as they are (Word computes the result anew)
    assert found.paragraphs[0].text == "READ THE OLD HOUSE ON PAGE three WITH A DOG."
    xml = found.paragraphs[0]._p.xml
    assert xml.count("w:fldChar ") == 3 and "PAGEREF here" in xml
    # two links side by side, formatted alike, each keep their own text
    assert [(h.address, h.text) for h in found.paragraphs[1].hyperlinks] == [
        ("https://example.org/red", "A RED "),
        ("https://example.org/ball", "BALL"),
    ]
    assert [c.text for c in found.comments] == ["THE BIG TREE"]


def test_a_field_across_paragraphs_text_boxes_and_content_controls():
    document = docx.Document()
    first = document.add_paragraph("A man sits. ")
    for kind in ("begin", "separate"):
        element = OxmlElement("w:fldChar")
        element.set(qn("w:fldCharType"), kind)
        first.add_run()._r.append(element)
    first.add_run("the old table of contents")
    document.add_paragraph("still the old contents")
    last = document.add_paragraph("the end of it")
    end = OxmlElement("w:fldChar")
    end.set(qn("w:fldCharType"), "end")
    last.add_run()._r.append(end)
    last.add_run(" a dog runs & <plays>.")
    boxed = document.add_paragraph("The garden ")
    boxed.add_run()._r.append(
        parse_xml(
            f'<w:pict xmlns:w="{W_NS}" xmlns:v="urn:schemas-microsoft-com:vml"><v:shape><v:textbox><w:txbxContent>'
            "<w:p><w:r><w:t>a box with a cat</w:t></w:r></w:p></w:txbxContent></v:textbox></v:shape></w:pict>"
        )
    )
    boxed.add_run("and the house ")
    boxed._p.append(
        parse_xml(
            f'<w:sdt xmlns:w="{W_NS}"><w:sdtPr><w:alias w:val="name"/></w:sdtPr><w:sdtContent><w:r>'
            "<w:t>and the house</w:t></w:r></w:sdtContent></w:sdt>"
        )
    )
    found = docx.Document(io.BytesIO(office.translate_document(saved(document), upper_translate)))
    texts = [p.text for p in found.paragraphs]
    assert texts[:3] == [
        "A MAN SITS. the old table of contents",
        "still the old contents",
        "the end of it A DOG RUNS & <PLAYS>.",
    ]
    assert [t.text for t in found.paragraphs[3]._p.xpath(".//w:txbxContent//w:t")] == ["A BOX WITH A CAT"]
    assert found.paragraphs[3].runs[0].text == "THE GARDEN "
    assert found.paragraphs[3].runs[2].text == "AND THE HOUSE "  # before the content control, and in it:
    assert [t.text for t in found.paragraphs[3]._p.xpath("./w:sdt/w:sdtContent/w:r/w:t")] == ["AND THE HOUSE"]


def with_footnote(data: bytes) -> bytes:
    """``data`` with a footnote part holding one note (python-docx cannot write footnotes)."""
    footnotes = (
        f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:footnotes xmlns:w="{W_NS}">'
        '<w:footnote w:id="1"><w:p><w:r><w:footnoteRef/></w:r><w:r><w:t xml:space="preserve"> The small dog</w:t>'
        '</w:r><w:r><w:rPr><w:i/></w:rPr><w:t xml:space="preserve"> sees a cat.</w:t></w:r></w:p></w:footnote>'
        "</w:footnotes>"
    )
    content_type = "application/vnd.openxmlformats-officedocument.wordprocessingml.footnotes+xml"
    relationship = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/footnotes"
    source, out = zipfile.ZipFile(io.BytesIO(data)), io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for name in source.namelist():
            body = source.read(name).decode("utf-8") if name.endswith((".xml", ".rels")) else source.read(name)
            if name == "[Content_Types].xml":
                body = body.replace(
                    "</Types>", f'<Override PartName="/word/footnotes.xml" ContentType="{content_type}"/></Types>'
                )
            elif name == "word/_rels/document.xml.rels":
                rel = f'<Relationship Id="rIdNotes" Type="{relationship}" Target="footnotes.xml"/>'
                body = body.replace("</Relationships>", rel + "</Relationships>")
            target.writestr(name, body)
        target.writestr("word/footnotes.xml", footnotes)
    return out.getvalue()


def test_footnotes_translated_and_their_references_kept():
    document = docx.Document()
    paragraph = document.add_paragraph("A man sits in the park")
    reference = OxmlElement("w:footnoteReference")
    reference.set(qn("w:id"), "1")
    paragraph.add_run()._r.append(reference)
    paragraph.add_run(" with a dog.")
    found = office.translate_document(with_footnote(saved(document)), upper_translate)
    notes = zipfile.ZipFile(io.BytesIO(found)).read("word/footnotes.xml").decode("utf-8")
    assert "> THE SMALL DOG</w:t>" in notes and "> SEES A CAT.</w:t>" in notes and "<w:footnoteRef/>" in notes
    assert notes.index("<w:i/>") < notes.index("SEES A CAT")
    body = docx.Document(io.BytesIO(found)).paragraphs[0]
    assert (
        body.text == "A MAN SITS IN THE PARK WITH A DOG."
        and body.runs[1]._r.find(qn("w:footnoteReference")) is not None
    )


def test_text_outside_every_run_goes_to_the_nearest_run_and_a_run_left_out_is_empty():
    document = docx.Document()
    paragraph = document.add_paragraph("a man ")
    paragraph.add_run("and").bold = True
    paragraph.add_run(" a dog")

    def translate(texts: list, markup: str) -> list:
        assert markup == "html" and texts == [
            '<span data-g="0">a man </span><span data-g="1">and</span><span data-g="2"> a dog</span>'
        ]
        return ['ein Hund <span data-g="1">und</span> ein Mann']

    found = docx.Document(io.BytesIO(office.translate_document(saved(document), translate)))
    # text before every group joins the first one after it, text after one joins it; runs 0 and 2 got nothing
    assert [r.text for r in found.paragraphs[0].runs] == ["", "ein Hund und ein Mann", ""]
    assert found.paragraphs[0].runs[1].bold


def test_a_document_without_text_is_not_sent_to_the_model():
    document = docx.Document()
    document.add_paragraph("  ")
    document.add_table(rows=1, cols=1)

    def translate(texts: list, markup: str) -> list:
        raise AssertionError("nothing to translate")

    found = docx.Document(io.BytesIO(office.translate_document(saved(document), translate)))
    assert [p.text for p in found.paragraphs] == ["  "] and len(found.tables) == 1


def zipped(files: dict) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, body in files.items():
            archive.writestr(name, body)
    return out.getvalue()


def without(data: bytes, name: str) -> bytes:
    source = zipfile.ZipFile(io.BytesIO(data))
    return zipped({n: source.read(n) for n in source.namelist() if n != name})


def ole(*streams: str) -> bytes:
    """The start of an OLE compound file naming ``streams`` in its directory (UTF-16)."""
    return b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 504 + b"".join(s.encode("utf-16-le") for s in streams)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (lambda: sample()[:3000], r"^not a valid DOCX file \(it is not a ZIP archive\); it may be truncated"),
        (lambda: b"", r"^not a valid DOCX file \(it is not a ZIP archive\)"),
        (lambda: "A man sits in the park .".encode(), r"not a ZIP archive"),
        (
            lambda: without(sample(), "word/document.xml"),
            r"^not a valid DOCX file \(the ZIP archive has no word/document\.xml\)$",
        ),
        (
            lambda: zipped({"notes.txt": "a"}),
            r"^not a valid DOCX file \(the ZIP archive has no \[Content_Types\]\.xml\)$",
        ),
        (
            lambda: ole("EncryptionInfo", "EncryptedPackage"),
            r"^encrypted \(password-protected\) DOCX; remove the password first$",
        ),
        (lambda: ole("WordDocument"), r"^not a DOCX file but an older binary Office file \(such as \.doc"),
    ],
    ids=["truncated", "empty", "text", "no-document-xml", "no-content-types", "encrypted", "doc"],
)
def test_bad_input_is_one_mtkit_error(data, message):
    with pytest.raises(MtkitError, match=message) as caught:
        office.translate_document(data(), upper_translate)
    assert "\n" not in str(caught.value)


def test_broken_xml_and_another_office_file_are_mtkit_errors():
    source = zipfile.ZipFile(io.BytesIO(sample()))
    broken = zipped({n: b"<w:document>" if n == "word/document.xml" else source.read(n) for n in source.namelist()})
    with pytest.raises(MtkitError, match=r"^not a valid DOCX file \(broken XML: "):
        office.translate_document(broken, upper_translate)
    pptx = pytest.importorskip("pptx")
    with pytest.raises(MtkitError, match=r"^not a DOCX file \(its main part has content type .*presentationml"):
        office.translate_document(saved(pptx.Presentation()), upper_translate)


# -------------------------------------------------------------------------------------------------- PowerPoint
def presentation() -> bytes:
    pptx = pytest.importorskip("pptx")
    from pptx.util import Inches as PptInches

    deck = pptx.Presentation()
    slide = deck.slides.add_slide(deck.slide_layouts[1])
    slide.shapes.title.text = "A man in the park"
    body = slide.placeholders[1].text_frame
    body.text = "The red dog"
    paragraph = body.add_paragraph()
    paragraph.add_run().text = "A "
    bold = paragraph.add_run()
    bold.text = "small"
    bold.font.bold = True
    paragraph.add_run().text = " cat sits."
    link = body.add_paragraph().add_run()
    link.text = "the old house"
    link.hyperlink.address = "https://example.org/house"
    body.add_paragraph().text = "  "
    numbered = body.add_paragraph()
    numbered.add_run().text = "page "
    numbered._p.append(
        parse_xml(
            '<a:fld xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" id="{B6F15528-21DE-4FAA-801E-'
            '634DDDAF4B2B}" type="slidenum"><a:t>seven</a:t></a:fld>'
        )
    )
    numbered.add_run().text = " of the deck"
    table = slide.shapes.add_table(2, 2, PptInches(1), PptInches(4), PptInches(4), PptInches(1)).table
    table.cell(0, 0).text = "the green tree"
    table.cell(1, 1).text = "two black bikes"
    slide.notes_slide.notes_text_frame.text = "say a happy word"
    return saved(deck)


def texts_of(slide) -> list:
    out = []
    for shape in slide.shapes:
        if shape.has_text_frame:
            out += [p for p in shape.text_frame.paragraphs]
        if shape.has_table:
            out += [p for row in shape.table.rows for cell in row.cells for p in cell.text_frame.paragraphs]
    return out


def test_presentation_slides_tables_and_notes_translated_formatting_kept():
    pptx = pytest.importorskip("pptx")
    source = presentation()
    calls: list = []
    deck = pptx.Presentation(io.BytesIO(office.translate_presentation(source, counting(calls))))
    original = pptx.Presentation(io.BytesIO(source))
    [slide], [old_slide] = deck.slides, original.slides
    before, after = texts_of(old_slide), texts_of(slide)
    assert len(after) == len(before) == 10  # title, five body paragraphs, four cells
    for old, new in zip(before, after):
        assert "".join(r.text for r in new.runs) == "".join(r.text for r in old.runs).upper()
        assert [r.font.bold for r in new.runs] == [r.font.bold for r in old.runs]
    runs = slide.placeholders[1].text_frame.paragraphs[1].runs
    assert [(r.text, r.font.bold) for r in runs] == [("A ", None), ("SMALL", True), (" CAT SITS.", None)]
    link = slide.placeholders[1].text_frame.paragraphs[2].runs[0]
    assert link.text == "THE OLD HOUSE" and link.hyperlink.address == "https://example.org/house"
    assert slide.notes_slide.notes_text_frame.text == "SAY A HAPPY WORD"
    field = slide.placeholders[1].text_frame.paragraphs[4]
    assert field.text == "PAGE seven OF THE DECK"  # the slide number field left as it is
    assert sorted(markup for markup, _ in calls) == ["html", "text"]


def test_presentation_bad_input():
    pytest.importorskip("pptx")
    with pytest.raises(MtkitError, match=r"^not a valid PPTX file \(it is not a ZIP archive\)"):
        office.translate_presentation(presentation()[:2000], upper_translate)
    with pytest.raises(MtkitError, match=r"^encrypted \(password-protected\) PPTX; remove the password first$"):
        office.translate_presentation(ole("EncryptedPackage"), upper_translate)
    with pytest.raises(MtkitError, match=r"^not a PPTX file \(its main part has content type .*wordprocessingml"):
        office.translate_presentation(sample(), upper_translate)


# -------------------------------------------------------------------------------------------------- a real model
def test_a_trained_model_translates_a_docx_file(toy_run_workdir, tmp_path, one_thread):
    import mtkit

    document = docx.Document()
    document.add_heading("A man sits in the park .", level=1)
    paragraph = document.add_paragraph("A small dog runs in the street . ")
    paragraph.add_run("The old woman").bold = True
    paragraph.add_run(" eats bread .")
    document.add_table(rows=1, cols=1).cell(0, 0).text = "Two children play with a ball ."
    source, target = tmp_path / "in.docx", tmp_path / "out.docx"
    source.write_bytes(saved(document))
    model = mtkit.load(toy_run_workdir / "run")
    model.translate_file(source, target)
    found, original = docx.Document(str(target)), docx.Document(str(source))
    assert len(found.paragraphs) == len(original.paragraphs) and len(found.tables) == 1
    assert [p.style.name for p in found.paragraphs] == [p.style.name for p in original.paragraphs]
    text = " ".join(p.text for p in all_paragraphs(found))
    assert text != " ".join(p.text for p in all_paragraphs(original))
    german = {w.lower() for w in EN_DE.values()} - {w for w in EN_DE if w == EN_DE[w]}
    assert german & set(re.findall(r"\w+", text.lower())), text
    assert [r.bold for r in found.paragraphs[1].runs] == [None, True, None]
