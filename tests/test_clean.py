"""Filters of noisy parallel text: each filter on hand-made pairs, `mtkit clean` end to end with its report,
`mtkit prepare` with ``data.filters``, and every bad input as one line with exit code 2 and nothing half-written."""

from __future__ import annotations

import dataclasses
import difflib
import gzip
import json
import re
from pathlib import Path

import pytest

from conftest import assert_one_line_error, toy_pairs, write_lines
from mtkit.config.data import FILTER_NAMES
from mtkit.data import filter_text as T
from mtkit.data import filters as F
from mtkit.data.clean import language_of
from mtkit.errors import MtkitError

pytest.importorskip("py3langid")

ROOT = Path(__file__).resolve().parent.parent
MULTI30K = ROOT / "data" / "multi30k"


def multi30k(lang: str, n: int = 60) -> list[str]:
    with gzip.open(MULTI30K / f"val.{lang}.gz", "rt", encoding="utf-8") as f:
        return f.read().splitlines()[:n]


def judge(name: str, src: str, tgt: str, langs=("en", "de"), **options):
    """Why filter ``name`` (with ``options``) removes the pair, or None if it keeps it."""
    (f,) = F.build({name: options}, *langs)
    return f.check(src, tgt)


# ------------------------------------------------------------------------------------------ the registry
def test_registry_names_options_and_docs():
    assert tuple(F.FILTERS) == FILTER_NAMES  # the schema validates names against the registry's
    docs = (ROOT / "docs" / "data.md").read_text(encoding="utf-8")
    for name, cls in F.FILTERS.items():
        assert cls.name == name and cls.__doc__ and f"`{name}`" in docs, name
        for field in F.options_of(cls):
            assert field.metadata["doc"] and f"`{field.name}`" in docs, (name, field.name)
    assert [f.name for f in F.build(["dedup", "length"], "en", "de")] == ["length", "dedup"]  # registry order


def test_fold_and_hashes():
    assert T.fold("  Hello, World 2!  ") == "hello world"
    assert T.fold("Ça — VA?") == "ça va"
    seen = T.HashSet64(capacity=4)
    keys = [T.hash64(f"pair {i}") for i in range(5000)]
    assert all(seen.add(k) for k in keys)
    assert not any(seen.add(k) for k in keys[::7])
    assert seen.size == 5000 and seen.nbytes <= 32 * 5000  # 8 bytes a slot, at most half full after growing


# ------------------------------------------------------------------------------------------ each filter
KEEP = None


@pytest.mark.parametrize(
    "name, options, src, tgt, removed",
    [
        ("length", {}, "A dog runs .", "Ein Hund läuft .", False),
        ("length", {}, "", "Ein Hund .", True),
        ("length", {"max_chars": 20}, "A dog runs across the big park .", "Ein Hund .", True),
        ("length", {"min_chars": 5}, "Yes", "Ja", True),
        ("char_ratio", {}, "A dog runs in the park .", "Ein Hund läuft im Park .", False),
        ("char_ratio", {}, "A dog runs in the park with a red ball today .", "Hund .", True),
        ("char_ratio", {}, "Yes .", "Ja , gut .", False),  # shorter than min_chars: not judged
        ("char_ratio", {"max_ratio": 10.0}, "A dog runs in the park with a red ball today .", "Hund .", False),
        ("url", {}, "See http://www.example.com/a/b/c/index.html", "Siehe hier", True),
        ("url", {}, "Write to info@example.com", "Schreiben Sie uns", True),
        ("url", {}, "Our full price list is on the page www.example.com for all", "Die Preise stehen dort", False),
        ("url", {}, "A dog .", "<p>Ein Hund</p>", True),
        ("url", {}, "Fish &amp; chips", "Fisch und Pommes", True),
        ("url", {"html": False}, "Fish &amp; chips", "Fisch und Pommes", False),
        ("url", {}, "© 2023 Example Inc. All rights reserved.", "© 2023 Example GmbH.", True),
        ("url", {}, "Home | About us | Products | Contact", "Start | Über uns | Produkte | Kontakt", True),
        ("url", {}, "A child eats cookies in the kitchen .", "Ein Kind isst Kekse in der Küche .", False),
        ("url", {"boilerplate": False}, "© 2023 Example Inc.", "© 2023 Beispiel GmbH.", False),
        ("url", {"patterns": ["free shipping"]}, "Free Shipping today !", "Heute versandkostenfrei !", True),
        ("repeat", {}, "A dog runs .", "Ein Hund läuft .", False),
        ("repeat", {}, "buy buy buy buy buy now", "jetzt kaufen", True),
        ("repeat", {}, "spam eggs spam ham spam toast spam tea spam", "Essen", True),
        ("repeat", {}, "a man and a woman and a child", "ein Mann und eine Frau und ein Kind", False),
        ("repeat", {"max_run": 6}, "buy buy buy buy buy now", "jetzt kaufen", False),
        ("copy", {}, "A dog runs in the park .", "Ein Hund läuft im Park .", False),
        ("copy", {}, "A dog runs in the park .", "a DOG runs, in the park!", True),
        ("copy", {}, "A dog runs in the park .", "A dog runs in the parks .", True),  # near-equal
        ("copy", {"max_similarity": 1.0}, "A dog runs in the park .", "A dog runs in the parks .", False),
        ("copy", {}, "2012", "2012", True),
        ("copy", {}, "12 .", "13", False),
        ("script", {}, "A man on a ladder .", "Ein Mann auf einer Leiter, größer .", False),
        ("script", {}, "A man on a ladder .", "Мужчина на лестнице .", True),
        ("script", {}, "A man on a ladder .", "Ein Mann (Мужчина) auf einer Leiter steht dort oben .", False),
        ("script", {"min_share": 0.95}, "A man .", "Ein Mann (Мужчина) auf einer Leiter steht dort oben .", True),
        ("script", {"scripts": {"de": ["Cyrillic"]}}, "A man .", "Мужчина .", False),
        ("script", {}, "1 2 3", "4 5 6", False),  # no letters: not judged
        ("dedup", {}, "A dog .", "Ein Hund .", False),
    ],
)
def test_each_filter_keeps_and_removes(name, options, src, tgt, removed):
    why = judge(name, src, tgt, **options)
    assert (why is not None) == removed, why


def test_script_of_other_languages():
    assert judge("script", "猫が走る。", "A cat runs .", langs=("ja", "en")) is None
    assert judge("script", "A cat runs .", "A cat runs .", langs=("ja", "en")).startswith("src: 0%")
    assert judge("script", "고양이가 달린다", "A cat runs .", langs=("ko", "en")) is None
    assert judge("script", "Кот бежит", "Mačka beží", langs=("ru", "sk")) is None
    with pytest.raises(MtkitError, match=r"tgt_lang: the script filter knows no script of language 'qq'; add it as "
                       r"filters\.script\.scripts: \{qq: \[Latin\]\}"):  # fmt: skip
        F.build(["script"], "en", "qq")


def test_language_on_multi30k_targets():
    """French and Czech captions as the German side of en-de pairs are removed; the real German ones kept."""
    en, de, fr, cs = (multi30k(lang) for lang in ("en", "de", "fr", "cs"))
    (lang,) = F.build(["language"], "en", "de")
    assert [lang.check(s, t) for s, t in zip(en, de)] == [None] * len(en)
    wrong_fr = [lang.check(s, t) for s, t in zip(en, fr)]
    wrong_cs = [lang.check(s, t) for s, t in zip(en, cs)]
    assert all(w and w.startswith("tgt: ") for w in wrong_fr), wrong_fr
    assert sum(w is not None for w in wrong_cs) >= 58, wrong_cs
    assert re.match(r"tgt: fr \(\d\.\d\d\), de 0\.0\d", wrong_fr[0])
    assert lang.check(fr[0], de[0]).startswith("src: fr")  # the source side is checked too
    assert judge("language", fr[0], de[0], sides="tgt") is None
    assert judge("language", "Oui .", "Ja .") is None  # too few letters to judge


def test_language_codes():
    assert F.build(["language"], "en-US", "pt_BR")  # regional codes: their base language
    with pytest.raises(MtkitError, match=r"^tgt_lang: the language filter's identifier does not know language 'deu'; "
                       r"the nearest it knows is 'de'"):  # fmt: skip
        F.build(["language"], "en", "deu")
    with pytest.raises(MtkitError, match="does not know language 'qqq'"):
        F.build(["language"], "qqq", "de")


def test_dedup_exact_near_and_by_side():
    (dedup,) = F.build(["dedup"], "en", "de")
    pairs = [
        ("A dog .", "Ein Hund ."),
        ("a DOG!", "Ein Hund 2"),
        ("A dog .", "Eine Katze ."),
        ("A dog .", "Ein Hund ."),
    ]
    assert [dedup.check(*p) for p in pairs] == [None, "seen before", None, "seen before"]
    (exact,) = F.build({"dedup": {"near": False}}, "en", "de")
    assert [exact.check(*p) for p in pairs] == [None, None, None, "seen before"]
    (by_src,) = F.build({"dedup": {"key": "src"}}, "en", "de")
    assert [by_src.check(*p) for p in pairs] == [None, "seen before", "seen before", "seen before"]


@pytest.mark.parametrize(
    "spec, message",
    [
        (["bogus"], "filters: unknown filter 'bogus'; known filters: length, char_ratio, url"),
        ({"length": {"max_char": 5}}, "filters.length: unknown option 'max_char'; its options: min_chars, max_chars"),
        ({"copy": {"max_similarity": "high"}}, "filters.copy.max_similarity: expected float, got 'high'"),
        ({"copy": {"max_similarity": 1.5}}, "filters.copy.max_similarity: must be in (0, 1.0] (got 1.5)"),
        ({"dedup": {"key": "both"}}, "filters.dedup.key: must be pair, src or tgt (got 'both')"),
        ({"url": {"patterns": ["(unclosed"]}}, "filters.url.patterns[0]: not a regular expression"),
        ({"length": 3}, "filters.length: give its options as a mapping (got 3)"),
    ],
)
def test_bad_specs(spec, message):
    with pytest.raises(MtkitError) as err:
        F.build(spec, "en", "de")
    assert str(err.value).startswith(message), str(err.value)


# ------------------------------------------------------------------------------------------ mtkit clean
def noisy_corpus() -> tuple[list[str], list[str], dict[str, int]]:
    """Multi30k en-de captions with noise put in; and how many pairs each filter should remove."""
    en, de, fr = multi30k("en", 120), multi30k("de", 120), multi30k("fr", 120)
    src, tgt = list(en), list(de)
    src[3] = ""  # length
    tgt[10] = "Hund ."  # char_ratio
    src[20] = "http://www.example.com/products/item?id=12345"  # url
    tgt[21] = "<b>" + tgt[21] + "</b>"  # url
    tgt[30] = "Hund Hund Hund Hund Hund Hund Hund ."  # repeat
    tgt[40] = src[40]  # copy
    tgt[50] = "Мужчина в синей рубашке стоит на лестнице ."  # script
    tgt[60], tgt[61] = fr[60], fr[61]  # language
    src[70], tgt[70] = src[5].upper(), tgt[5] + " !"  # dedup (near)
    src[71], tgt[71] = src[6], tgt[6]  # dedup (exact)
    expected = {"length": 1, "char_ratio": 1, "url": 2, "repeat": 1, "copy": 1, "script": 1, "language": 2, "dedup": 2}
    return src, tgt, expected


def test_clean_end_to_end_with_report(tmp_path, run_cli):
    src, tgt, expected = noisy_corpus()
    in_src = write_lines(tmp_path / "in" / "crawl.en", src)
    in_tgt = write_lines(tmp_path / "in" / "crawl.de", tgt)
    out = tmp_path / "out"
    result = run_cli("clean", in_src, in_tgt, "--output", out)
    assert result.code == 0, result.err
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["removed"] == expected
    assert (report["pairs_read"], report["pairs_kept"]) == (120, 120 - sum(expected.values()))
    assert (report["src_lang"], report["tgt_lang"]) == ("en", "de")
    assert report["filters"]["language"] == {"min_probability": 0.1, "min_letters": 10, "sides": "both"}
    assert report["examples"]["language"][0]["line"] == 61 and report["examples"]["language"][0]["tgt"] == tgt[60]
    assert [e["line"] for e in report["examples"]["dedup"]] == [71, 72]

    kept_src = (out / "crawl.en").read_text(encoding="utf-8").splitlines()
    kept_tgt = (out / "crawl.de").read_text(encoding="utf-8").splitlines()
    assert len(kept_src) == len(kept_tgt) == report["pairs_kept"]
    assert kept_src[:3] == src[:3] and kept_tgt[:3] == tgt[:3] and kept_src[3] == src[4]
    assert tgt[60] not in kept_tgt and src[40] not in kept_src
    assert sorted(p.name for p in out.iterdir()) == ["crawl.de", "crawl.en", "report.json"]
    for name, count in expected.items():
        assert re.search(rf"^  {name} +{count} ", result.out, re.M), result.out
    assert "120 pairs read, 109 kept" in result.out


def test_clean_gzip_chosen_filters_options_and_languages(tmp_path, run_cli):
    src, tgt, _ = noisy_corpus()
    in_src = write_lines(tmp_path / "in" / "web.en.gz", src, gz=True)
    in_tgt = write_lines(tmp_path / "in" / "web.de.gz", tgt, gz=True)
    out = tmp_path / "out"
    result = run_cli(
        "clean", in_src, in_tgt, "--output", out, "--filters", "copy,language", "--option", "language.sides=src"
    )
    assert result.code == 0, result.err
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["removed"] == {"copy": 1, "language": 0}  # French targets stay: only sources are checked
    with gzip.open(out / "web.de.gz", "rt", encoding="utf-8") as f:
        kept = f.read().splitlines()
    assert len(kept) == 119 and tgt[60] in kept

    # files without a language suffix: the flags say
    plain_src = write_lines(tmp_path / "in" / "a.txt", src[:20])
    plain_tgt = write_lines(tmp_path / "in" / "b.txt", tgt[:20])
    result = run_cli("clean", plain_src, plain_tgt, "--output", out, "--source", "en", "--target", "de")
    assert result.code == 0, result.err
    assert (out / "a.txt").exists() and (out / "b.txt").exists()
    assert language_of(Path("x.pt_BR.gz")) == "pt_BR" and language_of(Path("corpus.txt.gz")) == "txt"
    assert language_of(Path("corpus")) is None and language_of(Path("corpus.train")) is None


@pytest.fixture
def corpus_and_old_output(tmp_path, run_cli):
    """A small corpus cleaned once into out/: (src, tgt, out, the output files' bytes)."""
    src, tgt, _ = noisy_corpus()
    in_src = write_lines(tmp_path / "in" / "c.en", src)
    in_tgt = write_lines(tmp_path / "in" / "c.de", tgt)
    out = tmp_path / "out"
    assert run_cli("clean", in_src, in_tgt, "--output", out, "--filters", "length").code == 0
    return in_src, in_tgt, out, {p.name: p.read_bytes() for p in out.iterdir()}


def bad_utf8(tmp_path: Path) -> tuple[Path, Path]:
    src = write_lines(tmp_path / "in" / "c.en", [p[0] for p in toy_pairs(100)])
    lines = [p[1].encode("utf-8") for p in toy_pairs(100)]
    lines[56] = b"Ein Hund \xff l\xc3"
    return src, write_lines(tmp_path / "in" / "c.de", lines)


def short_target(tmp_path: Path) -> tuple[Path, Path]:
    src = write_lines(tmp_path / "in" / "c.en", [p[0] for p in toy_pairs(100)])
    return src, write_lines(tmp_path / "in" / "c.de", [p[1] for p in toy_pairs(97)])


@pytest.mark.parametrize(
    "make, extra, fragments",
    [
        (
            None,
            ["--filters", "length,bogus"],
            ["--filters: unknown filter 'bogus'", "known filters: length, char_ratio"],
        ),
        (None, ["--target", "xx"], ["--target: the language filter's identifier does not know language 'xx'"]),
        (None, ["--option", "copy.max_similarity=2"], ["--option copy.max_similarity: must be in (0, 1.0]"]),
        (None, ["--option", "dedup.near"], ["--option 'dedup.near': give NAME.OPTION=VALUE"]),
        (bad_utf8, [], ["c.de:57: invalid UTF-8", "give --skip-bad-lines"]),
        (short_target, [], ["c.en has 100 lines but", "c.de has 97"]),
    ],
)
def test_bad_input_is_one_line_and_leaves_the_output_as_it_was(
    tmp_path, run_cli, corpus_and_old_output, make, extra, fragments
):
    in_src, in_tgt, out, before = corpus_and_old_output
    if make is not None:
        in_src, in_tgt = make(tmp_path)
    assert_one_line_error(run_cli("clean", in_src, in_tgt, "--output", out, *extra), *fragments)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no temp file left, nothing replaced


def test_skip_bad_lines_and_other_refusals(tmp_path, run_cli):
    src, tgt = bad_utf8(tmp_path)
    out = tmp_path / "out"
    assert run_cli("clean", src, tgt, "--output", out, "--filters", "length", "--skip-bad-lines").code == 0
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert (report["pairs_read"], report["bad_lines_skipped"], report["pairs_kept"]) == (100, 1, 99)

    no_lang = write_lines(tmp_path / "in" / "corpus", ["A dog ."])
    assert_one_line_error(
        run_cli("clean", no_lang, tgt, "--output", out), "corpus: cannot tell its language", "--source"
    )
    assert_one_line_error(run_cli("clean", src, tgt, "--output", src.parent), "the inputs are there", "another folder")
    assert_one_line_error(run_cli("clean", tmp_path / "nope.en", tgt, "--output", out), "IN_SRC:", "file not found")
    assert_one_line_error(run_cli("clean", src, src, "--output", out, "--target", "de"), "same file name")


# ------------------------------------------------------------------------------------ prepare with filters
def test_prepare_applies_data_filters_to_train_only(tmp_path, write_parallel, write_config, run_cli):
    unlike = [(s, t) for s, t in toy_pairs(400) if difflib.SequenceMatcher(None, s.lower(), t.lower()).ratio() < 0.8]
    good = list(dict.fromkeys(unlike))[:200]  # no copies, no duplicates
    train = good + [
        ("Visit www.example.com/shop/item/12345", "Besuchen Sie uns"),
        ("A dog runs .", "A dog runs ."),
        ("A dog runs .", "Hund Hund Hund Hund Hund Hund ."),
        (good[3][0].upper(), good[3][1] + " !"),
    ]
    valid = [("A dog runs .", "A dog runs ."), ("A cat .", "Eine Katze .")]
    src, tgt = write_parallel("train", pairs=train)
    vsrc, vtgt = write_parallel("valid", pairs=valid)
    splits = {"train": {"src": str(src), "tgt": str(tgt)}, "valid": {"src": str(vsrc), "tgt": str(vtgt)}}
    data = {"dir": str(tmp_path / "data"), "vocab_size": 100, "splits": splits}
    filters = {"url": None, "repeat": {"max_run": 3}, "copy": {}, "dedup": {}}
    result = run_cli("prepare", write_config({"data": {**data, "filters": filters}}))
    assert result.code == 0, result.err
    manifest = json.loads((tmp_path / "data" / "manifest.json").read_text())
    entry = manifest["splits"]["train"]
    removed = {name: entry["filtered"][name] for name in ("url", "repeat", "copy", "dedup")}
    assert len(good) == 200 and removed == {"url": 1, "repeat": 1, "copy": 1, "dedup": 1}
    assert entry["filtered"]["duplicate"] == 0  # data.dedup (exact) stays off
    assert manifest["splits"]["valid"]["pairs_kept"] == 2  # other splits are never filtered
    assert "train copy: 1" in result.out

    assert_one_line_error(
        run_cli("prepare", write_config({"data": {**data, "filters": ["copy", "lang"]}}, "bad.yaml")),
        "'data.filters'",
        "unknown filter 'lang'; known filters: length, char_ratio, url, repeat, copy, script, language, dedup",
    )
    assert_one_line_error(
        run_cli("prepare", write_config({"data": {**data, "filters": {"copy": {"ratio": 1}}}}, "bad2.yaml")),
        "data.filters.copy: unknown option 'ratio'; its options: max_similarity",
    )
    assert_one_line_error(
        run_cli("prepare", write_config({"data": {**data, "tgt_lang": "xx", "filters": ["language"]}}, "bad3.yaml")),
        "data.tgt_lang: the language filter's identifier does not know language 'xx'",
    )


def test_filter_options_are_dataclass_fields_with_defaults():
    for cls in F.FILTERS.values():
        for field in F.options_of(cls):
            has_default = field.default is not dataclasses.MISSING or field.default_factory is not dataclasses.MISSING
            assert has_default, (cls.name, field.name)
