"""`mtkit translate-file` and `model.translate_file`: a document's text translated, everything else as it was,
and bad documents refused with one line (exit 2) and no output file."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SUBPROCESS_ENV, assert_one_line_error

pytestmark = pytest.mark.usefixtures("one_thread")


PARAGRAPH = "A man sits in the park . Two dogs play with a ball ."


def test_text_and_html_documents_keep_their_layout(model, tmp_path):
    text = tmp_path / "notes.txt"
    text.write_bytes(b"\xef\xbb\xbf" + f"  {PARAGRAPH}\r\n\r\nThe cat eats bread .\n".encode())
    model.translate_file(text, tmp_path / "notes.de.txt")
    out = (tmp_path / "notes.de.txt").read_bytes()
    first, blank, last, end = out[3:].decode().split("\r\n")[0], *out[3:].decode().split("\n")[1:]
    assert out.startswith(b"\xef\xbb\xbf") and out.count(b"\r\n") == 2 and out.endswith(b"\n")
    assert (
        first == "  " + model.translate(PARAGRAPH) and blank == "\r" and last == model.translate("The cat eats bread .")
    )
    assert end == ""

    page = tmp_path / "page.html"
    page.write_text(
        "<!DOCTYPE html><html><head><title>The park</title><style>p {color: red}</style></head>"
        f'<body><h1>A <i>green</i> park</h1><p class="x">{PARAGRAPH}</p><pre>a dog</pre></body></html>',
        encoding="utf-8",
    )
    stats = model.translate_file(page, tmp_path / "page.de.html")
    out = (tmp_path / "page.de.html").read_text(encoding="utf-8")
    assert out.startswith("<!DOCTYPE html><html><head><title>") and "<style>p {color: red}</style>" in out
    assert '<p class="x">' + model.translate(PARAGRAPH) + "</p>" in out and "<pre>a dog</pre>" in out
    assert "<i>" in out and stats.format == "html" and stats.sentences == 4


def test_the_command_writes_the_document_and_says_what_it_took(run_dir, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text(f"{PARAGRAPH}\n", encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "mtkit", "translate-file", str(run_dir), str(source), "-o", str(tmp_path / "o.txt")],
        capture_output=True,
        text=True,
        env=SUBPROCESS_ENV,
    )
    assert done.returncode == 0, done.stderr
    assert "txt, 1 texts, 2 sentences" in done.stderr
    assert (tmp_path / "o.txt").read_text(encoding="utf-8").count(".") == 2


@pytest.mark.parametrize(
    "name, data, flags, words",
    [
        ("a.pdf", b"%PDF-1.4", [], ["a.pdf", "unknown document format", "--format"]),
        ("a.txt", b"x", ["--format", "odt"], ["--format 'odt'", "expected one of"]),
        ("a.txt", b"\xff\xfe\x00bad", [], ["a.txt", "not UTF-8"]),
        ("a.docx", b"PK\x03\x04 truncated", [], ["a.docx", "not a valid DOCX"]),
        ("a.docx", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 600, [], ["a.docx", "older binary Office"]),
        ("a.txt", b"x" * 2000, ["--max-bytes", "1000"], ["a.txt", "at most 1,000 bytes"]),
    ],
)
def test_bad_documents_are_one_line_and_write_nothing(run_cli, run_dir, tmp_path, name, data, flags, words):
    source = tmp_path / name
    source.write_bytes(data)
    target = tmp_path / ("out" + Path(name).suffix)
    result = run_cli("translate-file", str(run_dir), str(source), "--output", str(target), *flags)
    assert_one_line_error(result, *words)
    assert not target.exists() and [p.name for p in tmp_path.iterdir()] == [name]


def test_missing_document_and_missing_output_folder(run_cli, run_dir, tmp_path):
    result = run_cli("translate-file", str(run_dir), str(tmp_path / "none.txt"), "--output", str(tmp_path / "o.txt"))
    assert_one_line_error(result, "none.txt", "not found")
    (tmp_path / "in.txt").write_text("A dog .\n")
    result = run_cli("translate-file", str(run_dir), str(tmp_path / "in.txt"), "-o", str(tmp_path / "no" / "o.txt"))
    assert_one_line_error(result, "folder", "not found")


def test_a_document_is_translated_in_one_pass_over_its_sentences(model):
    from mtkit.documents.files import translate_bytes

    calls = []

    class Counting:
        def check_format(self, markup, options=None):
            model.check_format(markup, options)

        def translate_batch(self, texts, **kw):
            calls.append(len(texts))
            return model.translate_batch(texts, **kw)

    data = io.BytesIO(("\n".join([PARAGRAPH] * 40) + "\n").encode()).getvalue()
    out, stats = translate_bytes(Counting(), data, "txt")
    assert calls == [40] and stats.texts == 40 and stats.sentences == 80
    assert out.decode().splitlines() == [model.translate(PARAGRAPH)] * 40
