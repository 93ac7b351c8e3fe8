"""The benchmark scripts that run whole experiments, each from a checkout with its own tiny data and models (the
scripts timing one shared run are in tests/test_bench_scripts.py, whose helpers these use): `scripts/bench_positions.py`
trains a tiny model 3 updates with two position schemes on data prepared once and prints its table;
`scripts/bench_distill.py` trains a tiny teacher for a few seconds, distils the toy corpus with it, trains a student
on that and on the original data, and decodes, sizes and tabulates each model; `scripts/bench_multilingual.py`;
`scripts/bench_clean.py` judges a noisy corpus and trains on its three splits; `scripts/bench_backtranslate.py
--smoke` trains a de->en model on half of 300 Multi30k pairs, back-translates the other half's German with it (plain
and tagged), trains the four en->de systems a few updates each and tabulates their scores. The figures are checked
against what they are computed from; timings are never held to a speed.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import TINY_TRANSFORMER, cli, without_curves, write_lines, write_toy_splits
from test_bench_scripts import (
    NUMBER,
    ROOT,
    TEST_DE,
    TEST_EN,
    VAL_DE,
    bleu_chrf,
    figure,
    metrics,
    rate_matches,
    read_gz,
    run_script,
)

pytestmark = pytest.mark.slow  # processes, training runs, benchmark scripts


def positions_cells(root: Path, sources: int, schemes=("relative", "alibi")) -> dict[str, list[str]]:
    """scheme -> the table's BLEU / chrF cells, recomputed with sacreBLEU from each scheme's eval.hyp.txt, the toy
    references and the source lengths in the data dir's .idx offsets (train's longest is L)."""
    data = root / "bench" / "data"

    def source_lengths(split: str) -> np.ndarray:
        return np.diff(np.fromfile(data / f"{split}.en.idx", dtype=np.int64))

    longest = int(source_lengths("train").max())
    refs = {
        split: (root / "corpus" / f"{split}.de").read_text(encoding="utf-8").splitlines()[:sources]
        for split in ("valid", "test")
    }
    lengths = np.concatenate([source_lengths("valid")[:sources], source_lengths("test")[:sources]])
    pooled_refs = refs["valid"] + refs["test"]
    joined = {k: [" ".join(refs["test"][i : i + k]) for i in range(0, sources - k + 1, k)] for k in (2, 3)}

    def cell(hyps: list[str], refs: list[str]) -> str:
        return "{:.1f} / {:.1f}".format(*bleu_chrf(hyps, refs)) if hyps else "-"

    cells = {}
    for scheme in schemes:
        hyps = (root / "bench" / scheme / "eval.hyp.txt").read_text(encoding="utf-8").splitlines()
        pooled, at = hyps[: 2 * sources], 2 * sources
        row = []
        for low, high in ((0.0, 1.0), (1.0, 1.5), (1.5, 2.0), (2.0, float("inf"))):
            picked = [i for i, n in enumerate(lengths) if low * longest < n <= high * longest]
            row.append(cell([pooled[i] for i in picked], [pooled_refs[i] for i in picked]))
        for k in (2, 3):
            row.append(cell(hyps[at : at + len(joined[k])], joined[k]))
            at += len(joined[k])
        assert at == len(hyps), (scheme, len(hyps))
        cells[scheme] = row
    return cells


def test_bench_positions_prepares_once_and_prints_a_row_per_scheme(tmp_path):
    tree = {
        "data": {"dir": str(tmp_path / "unused"), "vocab_size": 100, "splits": write_toy_splits(tmp_path)},
        "model": TINY_TRANSFORMER,
        "training": {
            "run_dir": str(tmp_path / "unused-run"),
            "devices": "cpu",
            "batch_tokens": 400,
            "warmup_updates": 4,
            "log_every": 1,
            "validate_every": 1000,
            "valid_max_sentences": 4,
        },
        "decoding": {"max_len_a": 1.0, "max_len_b": 4, "batch_size": 100},
    }
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(without_curves(tree), sort_keys=False), encoding="utf-8")
    args = ["--config", config, "--updates", "3", "--max-target-len", "8", "--workdir", tmp_path / "bench"]
    out = run_script(
        ROOT / "scripts" / "bench_positions.py",
        *args,
        *("--threads", "1", "--beam-size", "2", "--eval-sentences", "20", "--schemes", "relative", "alibi"),
        "--in-process",
        cwd=tmp_path,
    )  # two of the five schemes (each trains and decodes alike; tests/test_transformer.py covers all five)
    assert len(re.findall(r"^\$ mtkit prepare ", out, re.MULTILINE)) == 1, out  # one data dir for both
    assert len(re.findall(r"^\$ mtkit train ", out, re.MULTILINE)) == 2, out
    table = out[out.index("`python scripts/bench_positions.py") :]
    assert (tmp_path / "bench" / "table.md").read_text(encoding="utf-8").strip() == table.strip()
    assert "--updates 3" in table.splitlines()[0] and "L = " in table
    header, _, *rows = [line.strip("|").split("|") for line in table.splitlines() if line.startswith("|")]
    counts = [int(re.search(r"\((\d+)\)", cell).group(1)) for cell in header[3:]]
    assert sum(counts[:4]) == 40 and counts[4:] == [10, 6]  # 20 val + 20 test by length; 20 test joined by 2, 3
    assert [row[0].strip() for row in rows] == ["relative", "alibi"]
    expected = positions_cells(tmp_path, sources=20)
    for row in rows:
        assert int(row[1]) == 3
        assert [cell.strip() for cell in row[3:]] == expected[row[0].strip()], row


def test_bench_distill_distils_trains_both_students_and_tabulates_what_it_decoded(tmp_path):
    """Two selection rules (a data dir and a student each, trained exactly --updates), the original-data student;
    each printed figure recomputed from what the script wrote."""
    splits = write_toy_splits(tmp_path)
    training = {"devices": "cpu", "batch_tokens": 600, "lr": 2e-3, "warmup_updates": 4, "log_every": 1}
    training |= {"validate_every": 1000, "valid_max_sentences": 10, "keep_last": 2, "average_last": 2, "save_every": 5}
    decoding = {"max_len_a": 1.0, "max_len_b": 4, "batch_size": 250}
    student_model = {**TINY_TRANSFORMER, "encoder_layers": 2, "decoder_layers": 1, "decoder_ffn_dim": 32}
    configs = {}
    for name, model in (("teacher", TINY_TRANSFORMER), ("student", student_model)):
        tree = {  # the student's data.dir is its own (the script distils into the work dir): distill accepts it
            "data": {"dir": str(tmp_path / f"{name}-data"), "vocab_size": 100, "splits": splits},
            "model": model,
            "training": {"run_dir": str(tmp_path / f"{name}-unused"), **training},
            "decoding": decoding,
        }
        configs[name] = tmp_path / f"{name}.yaml"
        configs[name].write_text(yaml.safe_dump(without_curves(tree), sort_keys=False), encoding="utf-8")
    work = tmp_path / "work"
    out = run_script(
        ROOT / "scripts" / "bench_distill.py",
        *("--teacher-config", configs["teacher"], "--student-config", configs["student"], "--workdir", work),
        *("--minutes", "0.02", "--limit", "20", "--threads", "1", "--in-process"),
        *("--select", "chrf", "top", "--updates", "6"),
        cwd=tmp_path,
    )
    for rule in ("chrf", "top"):
        manifest = json.loads((work / f"distilled-{rule}" / "manifest.json").read_text(encoding="utf-8"))
        assert manifest["distillation"]["teachers"][0]["path"].startswith(str(tmp_path / "runs" / "distill-teacher"))
        assert manifest["distillation"]["select"] == rule
        checkpoints = (work / f"student-distilled-{rule}" / "checkpoints").glob("ckpt_*.safetensors")
        assert max(int(c.stem.split("_")[1]) for c in checkpoints) == 6  # --updates 6, the clock unbounded
    refs = {"test": read_gz(TEST_DE)[:20], "val": read_gz(VAL_DE)[:20]}
    decodes = re.findall(
        r"^(\S+) (test|val) beam (\d): ([\d.]+) s, ([\d.]+) sent/s, BLEU ([\d.]+) chrF ([\d.]+) \((.+)\)$", out, re.M
    )
    assert len(decodes) == 4 * 2 * 2, out  # models x splits x beams
    cells = {}
    for key, split, beam, seconds, rate, bleu, chrf, path in decodes:
        hyps = (tmp_path / path).read_text(encoding="utf-8").splitlines()
        assert len(hyps) == 20 and rate_matches(float(rate), 20, float(seconds)), (path, rate, seconds)
        expected = bleu_chrf(hyps, refs[split])
        assert (float(bleu), float(chrf)) == tuple(float(f"{x:.2f}") for x in expected), (path, expected)
        cells[key, split, int(beam)] = (rate, "{:.2f} / {:.2f}".format(*expected), expected[0])

    from mtkit.checkpoint import load_checkpoint

    table = [line.strip("|").split("|") for line in out.splitlines() if line.startswith("|")]
    rows = {row[0].strip(): [cell.strip() for cell in row[1:]] for row in table[2:]}
    runs = {
        "teacher": ("teacher", tmp_path / "runs" / "distill-teacher"),
        "distilled student (chrf)": ("student-distilled-chrf", work / "student-distilled-chrf"),
        "distilled student (top)": ("student-distilled-top", work / "student-distilled-top"),
        "original-data student": ("student-original", work / "student-original"),
    }
    assert list(rows) == list(runs), out  # no ensemble, no peer row without --ensemble, --peer
    # each command's printed seconds, in order: prepare, the teacher, then distill and train for each rule, the
    # original-data student
    logged = re.findall(r"^\s+([\d.]+) s  \$ mtkit (\w+) ", out, re.MULTILINE)
    steps = [float(seconds) for seconds, _ in logged]
    verbs = [verb for _, verb in logged]
    assert verbs[:7] == ["prepare", "train", "distill", "train", "distill", "train", "train"], out
    pipelines = {
        "teacher": [0, 1],
        "distilled student (chrf)": [0, 1, 2, 3],
        "distilled student (top)": [0, 1, 4, 5],
        "original-data student": [0, 6],
    }
    for name, (key, run) in runs.items():
        test_bleu, val_bleu, beam5, greedy, params, mib, clock = rows[name]
        assert (test_bleu, val_bleu) == (cells[key, "test", 5][1], cells[key, "val", 5][1]), (name, cells)
        assert (beam5, greedy) == (cells[key, "test", 5][0], cells[key, "test", 1][0]), name
        assert params == f"{load_checkpoint(run).model.num_parameters():,}"
        assert mib == f"{(work / 'export' / key / 'model.bin').stat().st_size / 2**20:.2f}"
        minutes = sum(steps[step] for step in pipelines[name]) / 60
        assert clock.endswith(" min") and abs(float(clock.split()[0]) - minutes) <= 0.06, (name, clock, steps)
    teacher = float(rows["teacher"][2])
    for rule in ("chrf", "top"):
        name = re.escape(f"distilled student ({rule})")
        student = float(rows[f"distilled student ({rule})"][2])
        ratio = figure(rf"^{name} / teacher, default decoding \(beam 5 / beam 5\), sentences/s: " + NUMBER, out)
        assert (student - 0.05) / (teacher + 0.05) - 0.005 <= ratio <= (student + 0.05) / (teacher - 0.05) + 0.005
        delta = cells[f"student-distilled-{rule}", "test", 5][2] - cells["teacher", "test", 5][2]
        assert abs(figure(rf"^{name} test BLEU - teacher's: \+?" + NUMBER, out) - delta) <= 0.006
    assert "onmt_translate" not in out


def test_bench_multilingual_reports_each_direction_the_speed_and_zero_shot_against_pivoting(tmp_path):
    """The report of the equal-time comparison, on tiny runs trained a few updates on the first lines of the
    four-way Multi30k: a one-to-many run (given twice, as the 60- and 20-minute runs), a bilingual en-de run and
    a many-to-many run. Each printed score is sacreBLEU's of the same model's translations, made here."""
    import mtkit

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for lang in ("en", "de", "fr", "cs"):
        for split in ("train", "val"):
            text = read_gz(ROOT / "data" / "multi30k" / f"{split}.{lang}.gz")[: 300 if split == "train" else 20]
            (corpus / f"{split}.{lang}").write_text("\n".join(text) + "\n", encoding="utf-8")

    def direction(src: str, tgt: str) -> dict:
        files = {
            key: {"src": str(corpus / f"{split}.{src}"), "tgt": str(corpus / f"{split}.{tgt}")}
            for key, split in (("train", "train"), ("valid", "val"))
        }
        return {"src_lang": src, "tgt_lang": tgt, "splits": files}

    training = {"max_updates": 4, "batch_tokens": 400, "lr": 2e-3, "warmup_updates": 2, "log_every": 2}
    training |= {"validate_every": 1000, "valid_bleu": False, "threads": 1, "devices": "cpu"}
    datas = {
        "multi": {"directions": [direction("en", t) for t in ("de", "fr", "cs")], "target_tag": "decoder"},
        "bi": direction("en", "de"),
        "many": {"directions": [direction(a, b) for x in ("de", "fr", "cs") for a, b in (("en", x), (x, "en"))]},
    }
    for name, data in datas.items():
        tree = {
            "data": {"dir": str(tmp_path / f"data-{name}"), "vocab_size": 120, **data},
            "model": TINY_TRANSFORMER,
            "training": {"run_dir": str(tmp_path / name), **training},
            "decoding": {"max_len_a": 1.0, "max_len_b": 4},
        }
        config = tmp_path / f"{name}.yaml"
        config.write_text(yaml.safe_dump(without_curves(tree), sort_keys=False), encoding="utf-8")
        for command in ("prepare", "train"):
            assert cli(command, config) == 0
    multi, bi, many = (str(tmp_path / name) for name in ("multi", "bi", "many"))
    out = run_script(
        ROOT / "scripts" / "bench_multilingual.py",
        *("--multi", multi, multi, "--bilingual", f"de={bi}", "--many", many),
        *(
            "--split",
            "val",
            "--limit",
            "12",
            "--beam-size",
            "2",
            "--threads",
            "1",
            "--dtype",
            "float32",
            "--in-process",
        ),
        cwd=tmp_path,
    )
    source = {lang: read_gz(ROOT / "data" / "multi30k" / f"val.{lang}.gz")[:12] for lang in ("en", "de", "fr", "cs")}
    rows = re.findall(rf"^\| en-(\w+) \| {NUMBER} \| {NUMBER} \| {NUMBER} \| {NUMBER} \|(.*)$", out, re.MULTILINE)
    assert [row[0] for row in rows] == ["de", "fr", "cs"], out
    model = mtkit.load(multi, beam_size=2, threads=1, dtype="float32")
    for lang, bleu, chrf, bleu2, chrf2, _ in rows:
        expected = bleu_chrf(model.translate(source["en"], target=lang), source[lang])
        assert (float(bleu), float(chrf)) == (float(bleu2), float(chrf2)) == tuple(float(f"{x:.2f}") for x in expected)
    bilingual = re.search(rf"^\| en-de \|.*\| {NUMBER} \| {NUMBER} \| {re.escape(bi)} \|$", out, re.MULTILINE)
    expected = bleu_chrf(mtkit.load(bi, beam_size=2, threads=1, dtype="float32").translate(source["en"]), source["de"])
    assert bilingual and (float(bilingual.group(1)), float(bilingual.group(2))) == tuple(
        float(f"{x:.2f}") for x in expected
    )
    speed = re.search(
        rf"^sentences/s on en-de, median of 3: \S+ {NUMBER}, \S+ {NUMBER} \({NUMBER}x\)$", out, re.MULTILINE
    )
    assert speed and abs(float(speed.group(3)) - float(speed.group(1)) / float(speed.group(2))) <= 0.01, out
    zero_shot = re.findall(rf"^\| (\w+)-(\w+) \| {NUMBER} \| {NUMBER} \| {NUMBER} \| {NUMBER} \|$", out, re.MULTILINE)
    assert [(a, b) for a, b, *_ in zero_shot] == [
        (a, b) for a in ("de", "fr", "cs") for b in ("de", "fr", "cs") if a != b
    ], out
    many_model = mtkit.load(many, beam_size=2, threads=1, dtype="float32")
    src, tgt, direct, direct_chrf, pivot, pivot_chrf = zero_shot[0]
    assert (float(direct), float(direct_chrf)) == tuple(
        float(f"{x:.2f}") for x in bleu_chrf(many_model.translate(source[src], target=tgt), source[tgt])
    )
    english = many_model.translate(source[src], target="en")
    assert (float(pivot), float(pivot_chrf)) == tuple(
        float(f"{x:.2f}") for x in bleu_chrf(many_model.translate(english, target=tgt), source[tgt])
    )


def test_bench_clean_judges_the_noise_and_trains_on_each_split(tmp_path):
    """The noise experiment on 300 pairs: the filters' table adds up and catches what it must (every copied target
    and every French or Czech one); three tiny models train 2 updates each and their scores are sacreBLEU's on
    the hypotheses they wrote."""
    test_src = write_lines(tmp_path / "test.en", read_gz(TEST_EN)[:20])
    test_tgt = write_lines(tmp_path / "test.de", read_gz(TEST_DE)[:20])
    tree = {
        "data": {"dir": "unused", "vocab_size": 100, "splits": {"train": {"src": "x", "tgt": "y"}}},
        "model": TINY_TRANSFORMER,
        "training": {"run_dir": "unused", "devices": "cpu", "batch_tokens": 400, "warmup_updates": 2},
        "decoding": {"max_len_a": 1.0, "max_len_b": 4},
    }
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(without_curves(tree), sort_keys=False), encoding="utf-8")
    work = tmp_path / "bench"
    args = ["--workdir", work, "--pairs", "300", "--config", config, "--updates", "2", "--minutes", "5"]
    args += ["--test-src", test_src, "--test-tgt", test_tgt]
    out = run_script(ROOT / "scripts" / "bench_clean.py", *args, cwd=tmp_path)
    rows = {line.split()[0]: line.split() for line in out.splitlines() if re.match(r"^[a-z_]+ +\d+ +\d+ +[\d.]+", line)}
    for kind in ("copy", "other_language"):
        assert float(rows[kind][3]) == 1.0, out
    total = rows["all"]
    assert int(total[1]) == sum(
        int(r[1])
        for k, r in rows.items()
        if k in ("char_ratio", "copy", "language", "dedup", "url", "repeat", "length", "script")
    )
    refs, out = read_gz(TEST_DE)[:20], out[out.index("train split") :]
    for name in ("clean", "noisy", "filtered"):
        bleu, chrf = figure(rf"^{name} +\d+ +([\d.]+)", out), figure(rf"^{name} +\d+ +[\d.]+ +([\d.]+)", out)
        hyps = (work / name / "test.hyp").read_text(encoding="utf-8").splitlines()
        assert (bleu, chrf) == tuple(round(x, 2) for x in bleu_chrf(hyps, refs)), (name, out)


def test_bench_backtranslate_smoke_trains_the_four_systems_and_tabulates_what_it_decoded(tmp_path):
    work = tmp_path / "work"
    out = run_script(
        ROOT / "scripts" / "bench_backtranslate.py", "--smoke", "--threads", "1", "--workdir", work, cwd=tmp_path
    )
    pairs = read_gz(ROOT / "data" / "multi30k" / "train.en.gz")[:300]
    assert "parallel: 150 pairs; monolingual: 150 lines" in out
    assert (work / "corpus" / "mono.de").read_text(encoding="utf-8").splitlines() == read_gz(
        ROOT / "data" / "multi30k" / "train.de.gz"
    )[150:300]
    assert (work / "corpus" / "half.en").read_text(encoding="utf-8").splitlines() == pairs[:150]
    plain = (work / "bt-plain" / "bt.en").read_text(encoding="utf-8").splitlines()
    tagged = (work / "bt-tagged" / "bt.en").read_text(encoding="utf-8").splitlines()
    assert len(plain) == 150 and tagged == [f"<BT> {line}".strip() for line in plain]
    refs = read_gz(TEST_DE)[:50]
    decoded = dict(re.findall(r"^(\([a-d]\) [^:]+): BLEU [\d.]+ chrF [\d.]+ on 50 sentences \((.+)\)$", out, re.M))
    rows = re.findall(rf"^\| (\([a-d]\) [^|]+?) \| (\d+) \| (\d+) \| {NUMBER} \| {NUMBER} \|$", out, re.M)
    names = ["(a) half", "(b) half + BT", "(c) half + tagged BT", "(d) all pairs"]
    assert [row[0] for row in rows] == names and sorted(decoded) == names, out
    runs = dict(zip(names, ("en-de-half", "en-de-bt", "en-de-tagged-bt", "en-de-all")))
    kept = {}
    for name, train_pairs, updates, bleu, chrf in rows:
        hyps = Path(decoded[name]).read_text(encoding="utf-8").splitlines()
        assert len(hyps) == 50
        assert (float(bleu), float(chrf)) == tuple(float(f"{x:.2f}") for x in bleu_chrf(hyps, refs)), name
        manifest = json.loads((work / "data" / runs[name] / "manifest.json").read_text(encoding="utf-8"))
        kept[name] = manifest["splits"]["train"]["pairs_kept"]
        assert int(train_pairs) == kept[name]
        records = metrics(work / runs[name])
        assert int(updates) == max(r["update"] for r in records if "update" in r) == 3
    assert kept["(a) half"] <= 150 < kept["(b) half + BT"] <= 300 and kept["(d) all pairs"] <= 300
    manifest = json.loads((work / "data" / "en-de-tagged-bt" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["inputs"]["train"]["mix"][0]["pairs_drawn"] == 150
    assert manifest["config"]["user_symbols"] == ["<BT>"]
    from mtkit.tokenizer import Tokenizer

    tok = Tokenizer.from_dir(work / "data" / "en-de-tagged-bt")
    assert "<BT>" in tok.src_pieces(tok.encode_src(["<BT> A dog runs ."])[0])
    assert re.search(r"^\d{4}-\d\d-\d\d \d\d:\d\d; .+ cores; torch kernels", out, re.M), out
