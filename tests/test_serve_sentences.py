"""``POST /v1/translate``'s sentences (mtkit/serving/answers.py): with nbest, scores or alignments each text's answer
lists the sentences the server cut it into, each placed in the text given and in the translation (their offsets
slice both, outer whitespace and line breaks included) with its own hypotheses, the first of them the sentence the
translation shows; a plain answer and an HTML one have none; through a pivot a sentence is the pivot text's."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")

from fastapi.testclient import TestClient  # noqa: E402

import mtkit  # noqa: E402
from mtkit.inference.results import Hypothesis, Translation  # noqa: E402
from mtkit.serving.answers import translation_out  # noqa: E402
from mtkit.serving.app import create_app  # noqa: E402
from mtkit.serving.languages import run_languages  # noqa: E402
from mtkit.serving.schemas import RequestOptions  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_thread")
ONE = "A man sits in the park ."
TWO = "Two dogs play with a ball ."
TEXTS = [
    ONE,
    f"{ONE} {TWO}",  # one line, two sentences
    f"  {ONE}\n",  # one sentence in whitespace
    f"\t{ONE}  {TWO}\n\n{ONE}\n  ",  # lines, sentences, whitespace around
    "",
    "   ",
]


@pytest.fixture(scope="module")
def client(run_dir):
    with TestClient(create_app(mtkit.load(run_dir), run_languages(run_dir))) as c:
        yield c


def check_placed(text: str, answer: dict) -> None:
    """The sentences slice the text and the translation in order, and what lies between them is the same
    whitespace on both sides."""
    out, sentences = answer["text"], answer["sentences"]
    source_at = at = 0
    for sentence in sentences:
        assert text[sentence["source_start"] : sentence["source_end"]] == sentence["source"]
        assert out[sentence["start"] : sentence["end"]] == sentence["hypotheses"][0]["text"]
        assert sentence["source"] == sentence["source"].strip() != ""
        gap = text[source_at : sentence["source_start"]]
        assert not gap.strip() and out[at : sentence["start"]] == gap
        source_at, at = sentence["source_end"], sentence["end"]
    assert not text[source_at:].strip() and out[at:] == (text[source_at:] if sentences else "")  # a blank text: ""


def test_sentences_slice_the_text_and_its_translation(client, model):
    options = {"nbest": 2, "scores": True, "alignments": True}
    response = client.post("/v1/translate", json={"text": TEXTS, "options": options})
    assert response.status_code == 200, response.text
    answers = response.json()["translations"]
    expected = model.translate_batch(TEXTS, nbest=2, scores=True, alignments=True)
    assert [a["text"] for a in answers] == [t.text for t in expected]
    for text, answer, translation in zip(TEXTS, answers, expected):
        check_placed(text, answer)
        parts = translation.sentences or ((translation,) if translation.hypotheses else ())
        assert len(answer["sentences"]) == len(parts)
        for sentence, part in zip(answer["sentences"], parts):
            assert sentence["source_tokens"] == list(part.source_tokens)
            assert [h["text"] for h in sentence["hypotheses"]] == [h.text.strip() for h in part.hypotheses]
            assert [h["score"] for h in sentence["hypotheses"]] == [h.score for h in part.hypotheses]
            for hyp in sentence["hypotheses"]:
                rows = hyp["alignment"]
                assert len(rows) == len(hyp["tokens"]) + 1
                assert all(len(row) == len(sentence["source_tokens"]) + 1 for row in rows)
    counts = [len(a["sentences"]) for a in answers]
    assert counts[0] == 1 and counts[1] == 2 and counts[2] == 1 and counts[3] == 3 and counts[4:] == [0, 0]
    assert "\n" not in answers[1]["text"]  # two sentences of a line: one line
    assert answers[2]["sentences"][0]["start"] == 2 and answers[2]["text"].endswith("\n")


def test_plain_and_html_answers_have_no_sentences(client):
    plain = client.post("/v1/translate", json={"text": TEXTS[1]}).json()["translations"][0]
    assert list(plain) == ["text"]
    html = client.post("/v1/translate", json={"text": f"<p>{ONE}</p>", "options": {"scores": True, "format": "html"}})
    assert html.status_code == 200, html.text
    assert "sentences" not in html.json()["translations"][0]
    scores = client.post("/v1/translate", json={"text": TEXTS[1], "options": {"scores": True}})
    (answer,) = scores.json()["translations"]
    check_placed(TEXTS[1], answer)
    assert "source_tokens" not in answer["sentences"][0] and "alignment" not in answer["sentences"][0]["hypotheses"][0]


def test_a_translation_without_the_sources_whitespace_and_a_pivot():
    scored = RequestOptions(scores=True)
    # a text read as one (instructions): its translation without the source's outer whitespace is the sentence
    bare = Translation("  Hello . ", ("▁Hello", "▁."), (Hypothesis("HALLO .", ("▁HALLO", "▁.")),))
    (sentence,) = translation_out(bare, scored).sentences
    assert (sentence.source, sentence.source_start, sentence.source_end) == ("Hello .", 2, 9)
    assert (sentence.start, sentence.end, sentence.hypotheses[0].text) == (0, 7, "HALLO .")
    # through a pivot the source is the pivot text: the sentence is its, placed in the translation only
    parts = tuple(Translation(s, (), (Hypothesis(s.upper(), ()),)) for s in ("Eins .", "Zwei ."))
    joined = Translation("Eins .\nZwei .", (), (Hypothesis("EINS .\nZWEI .", ()),), sentences=parts)
    out = translation_out(joined, scored, pivot=True).sentences
    placed = [(s.source, s.source_start, s.source_end, s.start, s.end) for s in out]
    assert placed == [("Eins .", None, None, 0, 6), ("Zwei .", None, None, 7, 13)]
    # sentences that do not make up the text (markup between them): none
    odd = Translation("<b>Eins .</b> Zwei .", (), (Hypothesis("<b>EINS .</b> ZWEI .", ()),), sentences=parts)
    assert translation_out(odd, scored).sentences is None
