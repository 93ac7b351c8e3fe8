"""Per-sentence instructions (prefix, constraints, avoid) end to end on conftest.py's tiny trained Transformer: the
Python API, ``mtkit translate --input-format jsonl`` and the server's ``/v1/translate``, on both engines. The search
itself is tested on scripted decoders in test_constraints.py."""

from __future__ import annotations

import json
import re

import pytest

import mtkit
from conftest import diverged_at_near_ties
from mtkit.models.base import EOS

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def lines(toy_run_workdir) -> list[str]:
    return (toy_run_workdir / "corpus" / "test.en").read_text(encoding="utf-8").splitlines()[:12]


def words(text: str) -> list[str]:
    return re.findall(r"\w+", text)


def missing_word(text: str) -> str:
    """A target word of the toy corpus that ``text`` lacks."""
    return next(w for w in ("Garten", "Wasser", "Baum", "Brot", "Katze") if w not in words(text))


def instructions(plain: list[str]) -> tuple[list, list, list]:
    """Per line: a prefix (none, whole words, a partial word, a trailing space), a constraint the plain output
    misses (two on some lines), and a word of the plain output to avoid."""
    prefixes, constraints, avoid = [], [], []
    for i, text in enumerate(plain):
        first = text.split()
        prefixes.append([None, " ".join(first[:2]), first[0][:-1] or first[0], first[0] + " "][i % 4])
        extra = missing_word(text)
        constraints.append([extra] + (["Ball"] if i % 3 == 0 and "Ball" not in words(text) else []))
        kept = [w for w in words(text) if w not in words(prefixes[-1] or "") and w not in ("ein", "Ein")]
        avoid.append([kept[-1]] if kept and i % 2 else None)
    return prefixes, constraints, avoid


def test_prefix_constraints_and_avoid_through_the_api(model, lines):
    plain = model.translate(lines)
    prefixes, constraints, avoid = instructions(plain)
    found = model.translate_batch(lines, prefix=prefixes, constraints=constraints, avoid=avoid, nbest=2)
    for i, t in enumerate(found):
        assert t.hypotheses, i
        for h in t.hypotheses:
            assert h.text.startswith(prefixes[i] or ""), (prefixes[i], h.text)
            for phrase in constraints[i]:
                assert phrase in words(h.text), (phrase, h.text)
            for phrase in avoid[i] or ():
                assert phrase not in words(h.text[len(prefixes[i] or "") :]), (phrase, h.text)
            assert h.log_prob == pytest.approx(sum(h.token_log_probs), abs=1e-4)
        if prefixes[i]:
            forced = len(model.tokenizer.encode_tgt([" ".join(prefixes[i].split())])[0])
            assert t.best.token_log_probs[:forced] == (0.0,) * forced
    # the same instructions as dicts, as Segments, or per call, give the same translations
    items = [{"text": x, "prefix": p, "constraints": c, "avoid": a} for x, p, c, a in zip(lines, *instructions(plain))]
    assert model.translate(items) == [t.text for t in found]
    segments = [
        mtkit.Segment(x, p, tuple(c), tuple(a or ())) for x, p, c, a in zip(lines, prefixes, constraints, avoid)
    ]
    assert model.translate(segments) == [t.text for t in found]
    assert (
        model.translate(lines[1], prefix=prefixes[1], constraints=constraints[1])
        == model.translate([items[1] | {"avoid": None}])[0]
    )


def test_plain_lines_batched_with_instructed_ones_are_unchanged(run_dir, lines):
    # float32: batches of another make-up are held to each other, with near-ties replayed on this model
    model = mtkit.load(run_dir, dtype="float32")
    plain = model.translate_batch(lines)
    _, constraints, _ = instructions([t.text for t in plain])
    mixed = model.translate_batch(lines, constraints=[c if i % 2 else None for i, c in enumerate(constraints)])
    ids = model.engine.encode(lines)
    even = list(range(0, len(lines), 2))
    o = model.options
    diverged = diverged_at_near_ties(
        model.engine.model,
        [ids[i] + [EOS] for i in even],
        [mixed[i].hypotheses for i in even],
        [plain[i].hypotheses for i in even],
        beam_size=o.beam_size,
        length_penalty=o.length_penalty,
        max_len_a=o.max_len_a,
        max_len_b=o.max_len_b,
        stopping=o.stopping,
    )
    for j, i in enumerate(even):
        if j not in diverged:
            assert mixed[i].text == plain[i].text
            assert mixed[i].best.score == pytest.approx(plain[i].best.score, abs=1e-4)


@pytest.mark.parametrize("options", [{"beam_size": 1}, {"sampling": True, "seed": 3}])
def test_greedy_and_sampling_take_prefixes_and_avoid(run_dir, lines, options):
    model = mtkit.load(run_dir, **options)
    prefixes = ["Ein", "Der Man", "zwei ", None] * 3
    avoid = [["Mann"], None, ["Hund", "Katze"], ["ist"]] * 3
    for t, p, a in zip(model.translate_batch(lines, prefix=prefixes, avoid=avoid), prefixes, avoid):
        assert t.text.startswith(p or "")
        assert not set(a or ()) & set(words(t.text[len(p or "") :]))
    if options.get("sampling"):
        with pytest.raises(mtkit.MtkitError, match="line 2: constraints need an algorithm that honours them"):
            model.translate(lines[:2], constraints=[None, ["Garten"]])
    else:  # greedy: the constrained beam search with one beam
        [text] = model.translate(lines[:1], constraints=[["Garten"]])
        assert "Garten" in words(text)


def test_bad_instructions_raise_one_line_naming_the_line(model, lines):
    cases = [
        (dict(prefix=["a"]), "prefix has 1 entries for 2 lines"),
        (dict(constraints=[None, "Garten"]), "line 2: 'constraints' must be a list of strings, not a string"),
        (dict(constraints=[[""], None]), "line 1: 'constraints' item 1 is empty"),
        (dict(avoid=[None, [3]]), "line 2: 'avoid' item 1 must be a string, not a number"),
        (dict(constraints=[["Garten"], None], avoid=[["Garten"], None]), "contains the avoided phrase"),
        (dict(prefix=[" ".join(["Garten"] * 200), None]), "this model writes at most"),
    ]
    for kwargs, message in cases:
        with pytest.raises(mtkit.MtkitError, match=re.escape(message)):
            model.translate(lines[:2], **kwargs)
    with pytest.raises(mtkit.MtkitError, match="line 1: unknown key 'prefx'"):
        model.translate([{"text": "a", "prefx": "b"}])
    with pytest.raises(mtkit.MtkitError, match="line 1: prefix given twice"):
        model.translate([{"text": "a", "prefix": "b"}], prefix=["c"])


# ------------------------------------------------------------------------------------- command line
def test_cli_jsonl_input_equals_the_api(run_cli, run_dir, model, lines, tmp_path):
    prefixes, constraints, avoid = instructions(model.translate(lines))
    items = [
        {"text": x, "prefix": p, "constraints": c, "avoid": a}
        for x, p, c, a in zip(lines, prefixes, constraints, avoid)
    ]
    items[3] = {"text": lines[3]}  # plain
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(x, ensure_ascii=False) + "\n" for x in items), encoding="utf-8")
    result = run_cli("translate", run_dir, "--input-format", "jsonl", "-i", path)
    assert result.code == 0, result.err
    assert result.out.splitlines() == model.translate(items)
    result = run_cli("translate", run_dir, "--input-format", "jsonl", "--format", "jsonl", stdin=path.read_text())
    records = [json.loads(x) for x in result.out.splitlines()]
    assert [r["hypothesis"] for r in records] == model.translate(items)
    assert all(r["hypothesis"].startswith(p or "") for r, p in zip(records, prefixes))


def test_cli_bad_jsonl_lines_fail_whole_or_are_skipped(run_cli, run_dir, tmp_path):
    good = json.dumps({"text": "A dog runs in the park .", "prefix": "Ein"})
    bad = {
        2: ('{"text": "a", "constraint": ["x"]}', "unknown key 'constraint'"),
        3: ("not json", "not valid JSON"),
        4: ('["a"]', "expected a JSON object"),
        5: ('{"prefix": "a"}', "missing key 'text'"),
        6: ('{"text": "a", "avoid": "x"}', "'avoid' must be a list of strings"),
        7: ("", "empty line"),
    }
    lines = [good] + [bad[n][0] for n in sorted(bad)] + [good]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    result = run_cli("translate", run_dir, "--input-format", "jsonl", "-i", path, "-o", out)
    assert result.code == 2 and not out.exists()
    assert (
        result.err.startswith(f"mtkit: error: {path} line 2: unknown key 'constraint'")
        and "--skip-bad-lines" in result.err
    )
    assert len(result.err.strip().splitlines()) == 1 and "Traceback" not in result.err
    result = run_cli("translate", run_dir, "--input-format", "jsonl", stdin="\n".join(lines) + "\n")
    assert result.code == 2 and result.out == "" and "stdin line 2" in result.err  # a file on stdin: checked first
    result = run_cli("translate", run_dir, "--input-format", "jsonl", "--skip-bad-lines", "-i", path)
    assert result.code == 0, result.err
    out_lines = result.out.split("\n")[:-1]
    assert len(out_lines) == len(lines)
    assert [n for n, text in enumerate(out_lines, 1) if not text] == sorted(bad)
    assert out_lines[0].startswith("Ein") and out_lines[-1] == out_lines[0]
    for n, (_, message) in bad.items():
        assert f"warning: {path} line {n} skipped: {message}" in result.err
    result = run_cli(
        "translate", run_dir, "--input-format", "jsonl", "--skip-bad-lines", "--format", "jsonl", "-i", path
    )
    records = [json.loads(x) for x in result.out.splitlines()]
    assert len(records) == len(lines) and [n for n, r in enumerate(records, 1) if "error" in r] == sorted(bad)
    result = run_cli("translate", run_dir, "--input-format", "yaml", "-i", path)
    assert result.code == 2 and "--input-format 'yaml': use text or jsonl" in result.err


# ------------------------------------------------------------------------------------------- server
def test_server_takes_instructions_per_item_or_in_parallel_lists(run_dir, model, lines):
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from mtkit.serving.app import create_app
    from mtkit.serving.languages import run_languages

    prefixes, constraints, avoid = instructions(model.translate(lines))
    expected = model.translate_batch(lines, prefix=prefixes, constraints=constraints, avoid=avoid)
    items = [
        {"text": x, **({"prefix": p} if p else {}), "constraints": c, "avoid": a or []}
        for x, p, c, a in zip(lines, prefixes, constraints, avoid)
    ]
    with TestClient(create_app(mtkit.load(run_dir), run_languages(run_dir))) as client:
        by_item = client.post("/v1/translate", json={"text": items})
        parallel = client.post(
            "/v1/translate", json={"text": lines, "prefix": prefixes, "constraints": constraints, "avoid": avoid}
        )
        for response in (by_item, parallel):
            assert response.status_code == 200, response.text
            assert [t["text"] for t in response.json()["translations"]] == [t.text for t in expected]
        single = client.post("/v1/translate", json={"text": {"text": lines[0], "constraints": constraints[0]}})
        assert single.json()["translations"][0]["text"] == model.translate(lines[0], constraints=constraints[0])
        for body, status, message in [
            ({"text": [{"text": "a", "prefx": "b"}]}, 422, "text.0.prefx: Extra inputs are not permitted"),
            ({"text": [{"text": "a", "constraints": "b"}]}, 422, "text.0.constraints: Input should be a valid list"),
            ({"text": ["a"], "constraints": [[""]]}, 422, "constraints.0.0: Value error, a phrase must not be empty"),
            ({"text": ["a"], "constraints": [["Garten"]], "avoid": [["Garten"]]}, 422, "contains the avoided phrase"),
        ]:
            response = client.post("/v1/translate", json=body)
            assert response.status_code == status, response.text
            assert list(response.json()) == ["error"] and message in response.json()["error"], response.text
        # what the schema accepts the server takes: entry i of a parallel list goes with text i (a shorter list
        # leaves the texts after it without one), and a text's own instruction wins over its list's entry
        shorter = client.post("/v1/translate", json={"text": lines[:2], "prefix": ["Ein"]})
        assert [t["text"] for t in shorter.json()["translations"]] == [
            model.translate(lines[0], prefix="Ein"),
            model.translate(lines[1]),
        ]
        own = client.post("/v1/translate", json={"text": [{"text": lines[0], "prefix": "Der"}], "prefix": ["Ein"]})
        assert own.json()["translations"][0]["text"] == model.translate(lines[0], prefix="Der")


# --------------------------------------------------------------------------------------- CTranslate2
def test_ctranslate2_takes_prefixes_and_avoid_and_refuses_constraints(run_cli, run_dir, model, lines, tmp_path):
    pytest.importorskip("ctranslate2")
    assert run_cli("export", run_dir, "--output", tmp_path / "ct2").code == 0
    ct2 = mtkit.load(tmp_path / "ct2")
    prefixes = ["Ein", "Der Man", "zwei ", None] * 3
    avoid = [["Mann"], None, ["Hund", "Katze"], ["ist"]] * 3
    found = ct2.translate_batch(lines, prefix=prefixes, avoid=avoid)
    torch_found = mtkit.load(run_dir, dtype="float32").translate_batch(lines, prefix=prefixes, avoid=avoid)
    same = 0
    for t, reference, p, a in zip(found, torch_found, prefixes, avoid):
        assert t.text.startswith(p or "")
        assert not set(a or ()) & set(words(t.text[len(p or "") :]))
        forced = len(model.tokenizer.encode_tgt([p])[0]) if p else 0
        assert t.best.token_log_probs[:forced] == (0.0,) * forced
        if t.text == reference.text:  # the continuation's score, as the torch engine gives it
            same += 1
            assert t.best.score == pytest.approx(reference.best.score, abs=1e-3)
    assert same >= len(lines) / 2
    with pytest.raises(mtkit.MtkitError, match="constraints need --engine torch"):
        ct2.translate(lines[:1], constraints=[["Garten"]])
    path = tmp_path / "in.jsonl"
    path.write_text(json.dumps({"text": lines[0], "constraints": ["Garten"]}) + "\n", encoding="utf-8")
    result = run_cli("translate", tmp_path / "ct2", "--input-format", "jsonl", "-i", path)
    assert result.code == 2 and result.err.strip() == (
        f"mtkit: error: {path} line 1: constraints need --engine torch (the CTranslate2 engine has no constrained "
        "decoding) (fix the line, or pass --skip-bad-lines to give it an empty output line)"
    )
