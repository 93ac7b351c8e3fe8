"""The benchmark scripts that time one shared run, end to end from a checkout: `scripts/bench_train.py` trains a
tiny model for a few seconds on the toy corpus and scores the first 200 pairs of the shipped test_2016_flickr
(data/multi30k), then reports again with --reuse; `scripts/bench_translate.py`, `bench_constraints.py` and
`bench_ct2_engine.py` time and score that run; `scripts/bench_lora.py --smoke`. The whole experiments are in
tests/test_bench_experiments.py (a module of their own, so that the two run on two workers). The figures are
checked against what they are computed from: BLEU and chrF against sacreBLEU on hypotheses the test reads or writes
itself, rates against the counts and seconds printed beside them, training figures against the run's metrics.jsonl
and the test's own clock. Timings are never held to a speed.
"""

from __future__ import annotations

import gzip
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
import sacrebleu
import yaml

import mtkit
from conftest import TINY_TRANSFORMER, cli, without_curves, write_lines, write_toy_splits

pytestmark = pytest.mark.slow  # processes, training runs, benchmark scripts

ROOT = Path(__file__).resolve().parent.parent
TEST_EN = ROOT / "data" / "multi30k" / "test_2016_flickr.en.gz"
TEST_DE = ROOT / "data" / "multi30k" / "test_2016_flickr.de.gz"
VAL_DE = ROOT / "data" / "multi30k" / "val.de.gz"
ENV = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PYTHONUNBUFFERED="1")
NUMBER = r"(-?\d+(?:\.\d+)?)"


def run_script(*args, cwd: Path) -> str:
    proc = subprocess.run(
        [sys.executable, *map(str, args)], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def figure(pattern: str, text: str) -> float:
    match = re.search(pattern, text, re.MULTILINE)
    assert match, f"no line matching {pattern!r} in:\n{text}"
    return float(match.group(1))


def read_gz(path: Path) -> list[str]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def bleu_chrf(hyps: list[str], refs: list[str]) -> tuple[float, float]:
    """sacreBLEU's corpus BLEU and chrF with its defaults, called directly."""
    return sacrebleu.corpus_bleu(hyps, [refs]).score, sacrebleu.corpus_chrf(hyps, [refs]).score


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]


def mtkit_translate(run_dir: Path, sources: list[str], beam: int, tmp: Path, dtype: str = "auto") -> list[str]:
    """``mtkit translate`` of ``sources`` at ``beam`` on one thread (in this process): the command line's own
    translations."""
    src, out = tmp / f"src.b{beam}.txt", tmp / f"hyp.b{beam}.txt"
    src.write_text("\n".join(sources) + "\n", encoding="utf-8")
    assert cli("translate", run_dir, "-i", src, "-o", out, "--beam-size", beam, "--threads", 1, "--dtype", dtype) == 0
    return out.read_text(encoding="utf-8").splitlines()


def rate_matches(rate: float, count: int, seconds: float) -> bool:
    """``rate`` (printed to 0.1) is ``count / seconds`` for the seconds printed to 0.01 beside it."""
    return count / (seconds + 0.005) - 0.05 <= rate <= count / max(seconds - 0.005, 1e-9) + 0.05


def write_head_split(folder: Path, n: int = 200) -> tuple[list[str], list[str]]:
    """folder/head.en.gz and head.de.gz: the first ``n`` pairs of test_2016_flickr, a split for the scripts'
    --data and --split; (sources, references)."""
    sources, refs = read_gz(TEST_EN)[:n], read_gz(TEST_DE)[:n]
    for lang, lines in (("en", sources), ("de", refs)):
        write_lines(folder / f"head.{lang}.gz", lines, gz=True)
    return sources, refs


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    """(config path, run dir, bench_train output, its seconds, the largest RSS in MB of this process's children)
    of one 1.2-second benchmark run on the toy corpus."""
    root = tmp_path_factory.mktemp("bench")
    run_dir = root / "run"
    tree = {
        "data": {"dir": str(root / "data"), "vocab_size": 100, "splits": write_toy_splits(root)},
        "model": {**TINY_TRANSFORMER, "dropout": 0.1},
        "training": {
            "run_dir": str(run_dir),
            "devices": "cpu",
            "batch_tokens": 600,
            "lr": 2e-3,
            "warmup_updates": 4,
            "log_every": 1,
            "validate_every": 1000,
            "keep_last": 2,
            "average_last": 2,
            "save_every": 5,
        },
        "decoding": {"max_len_a": 1.0, "max_len_b": 4, "batch_size": 250},
    }
    config = root / "tiny-bench.yaml"
    config.write_text(yaml.safe_dump(without_curves(tree), sort_keys=False), encoding="utf-8")
    write_head_split(root)
    start = time.perf_counter()
    out = run_script(
        ROOT / "scripts" / "bench_train.py",
        config,
        *("--minutes", "0.02", "--skip-flops", "--threads", "1", "--run-dir", run_dir),
        *("--data", root, "--split", "head"),
        cwd=root,
    )
    seconds = time.perf_counter() - start
    children_rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KB on Linux
    return config, run_dir, out, seconds, children_rss_mb


def test_bench_train_prints_every_figure_and_translates_the_split(bench_run):
    config, run_dir, out, seconds, children_rss_mb = bench_run
    records = metrics(run_dir)
    train = [r for r in records if r["kind"] == "train"]
    steady = train[2:]  # after the default --warmup-logs 2
    assert steady, records
    assert figure(r"^updates\s+" + NUMBER, out) == max(r["update"] for r in records) >= 1
    tokens_per_s = sum(r["tgt_tokens_per_s"] for r in steady) / len(steady)
    assert re.search(rf"^target tokens/s\s+{tokens_per_s:.0f} \(mean of {len(steady)} log windows after 2\)", out, re.M)
    padding = sum(r["padding"] for r in steady) / len(steady)
    assert figure(r"^padding fraction\s+" + NUMBER, out) == float(f"{padding:.3f}")
    # the trainer's peak: one of this process's descendants, so within the largest of them
    assert 0 < figure(r"^peak RSS \(train\)\s+" + NUMBER + " MB", out) <= children_rss_mb + 0.5
    # the trainer's wall time: no less than the training time it recorded, no more than the whole script's
    trained = max(r["elapsed"] for r in records) / 60
    assert trained - 0.05 <= figure(r"^wall time train\s+" + NUMBER + " min", out) <= seconds / 60 + 0.05
    sources = read_gz(config.parent / "head.en.gz")
    hyps = (run_dir / "test.beam5.de").read_text(encoding="utf-8").split("\n")
    assert hyps[-1] == "" and len(hyps) - 1 == len(sources) == 200
    bleu, chrf = bleu_chrf(hyps[:-1], read_gz(config.parent / "head.de.gz"))  # `mtkit score --json -w 2`: 2 decimals
    assert figure(r"^test BLEU beam 5\s+" + NUMBER, out) == float(f"{bleu:.2f}")
    assert figure(r"^test chrF beam 5\s+" + NUMBER, out) == float(f"{chrf:.2f}")


def test_bench_train_reuse_reports_on_the_run_without_training_or_inventing_a_memory_figure(bench_run):
    config, run_dir, first, _, _ = bench_run
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    out = run_script(
        ROOT / "scripts" / "bench_train.py",
        config,
        "--minutes",
        "0.02",
        "--skip-flops",
        "--threads",
        "1",
        "--run-dir",
        run_dir,
        "--reuse",
        *("--data", config.parent, "--split", "head"),
        cwd=config.parent,
    )
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == checkpoints  # nothing trained
    assert figure(r"^updates\s+" + NUMBER, out) == figure(r"^updates\s+" + NUMBER, first)
    assert figure(r"^test BLEU beam 5\s+" + NUMBER, out) == figure(r"^test BLEU beam 5\s+" + NUMBER, first)
    assert re.search(r"^peak RSS \(train\)\s+not measured", out, re.MULTILINE), out
    trained = max(r["elapsed"] for r in metrics(run_dir)) / 60  # the trainer's own time
    assert figure(r"^training time\s+" + NUMBER + " min", out) == float(f"{trained:.1f}")


def test_bench_translate_prints_a_row_per_beam(bench_run, tmp_path):
    _, run_dir, _, _, _ = bench_run
    sources, refs = write_head_split(tmp_path)
    start = time.perf_counter()
    out = run_script(
        ROOT / "scripts" / "bench_translate.py",
        run_dir,
        *("--data", tmp_path, "--split", "head"),
        "--beams",
        "5",
        "1",
        "--threads",
        "1",
        "--warmup",
        "2",
        "--decode",
        "mbr:mbr_candidates=2,mbr_epsilon=0",
        cwd=run_dir.parent,
    )
    elapsed = time.perf_counter() - start
    rows = [line.split() for line in out.splitlines() if line.startswith("torch ")]
    mbr = "mbr:mbr_candidates=2,mbr_epsilon=0"
    assert [row[2] for row in rows] == ["5", "1", mbr], out
    hyps = {beam: mtkit_translate(run_dir, sources, beam, tmp_path, "float32") for beam in (5, 1)}  # the rows' dtype
    hyps[mbr] = mtkit.load(
        run_dir, algorithm="mbr", mbr_candidates=2, mbr_epsilon=0, beam_size=5, nbest=1, device="cpu", dtype="float32"
    ).translate(sources)
    for row in rows:
        seconds, sentences_per_s, bleu, chrf = float(row[4]), float(row[5]), float(row[7]), float(row[8])
        assert 0 < seconds < elapsed and rate_matches(sentences_per_s, len(sources), seconds), row
        expected = bleu_chrf(hyps[row[2] if row[2] == mbr else int(row[2])], refs)
        assert (bleu, chrf) == tuple(float(f"{x:.2f}") for x in expected), (row, expected)


def test_bench_constraints_meets_every_constraint_and_prefix(bench_run, tmp_path):
    _, run_dir, _, _, _ = bench_run
    out = run_script(
        ROOT / "scripts" / "bench_constraints.py",
        run_dir,
        "--limit",
        "12",
        "--beam",
        "3",
        "--threads",
        "1",
        "--warmup",
        "2",
        cwd=run_dir.parent,
    )
    met, asked = re.search(r"^coverage: (\d+)/(\d+) sentences meet all their constraints", out, re.MULTILINE).groups()
    assert met == asked and int(asked) > 0, out
    assert "not met" not in out
    bleu, chrf = bleu_chrf(mtkit_translate(run_dir, read_gz(TEST_EN)[:12], 3, tmp_path), read_gz(TEST_DE)[:12])
    assert figure(r"^plain\s+BLEU\s+" + NUMBER, out) == float(f"{bleu:.2f}")
    assert figure(r"^plain\s+BLEU.*chrF\s+" + NUMBER, out) == float(f"{chrf:.2f}")
    for name in ("plain", "constrained"):
        line = re.search(rf"^{name}\s+BLEU.*\s{NUMBER} sent/s\s+\({NUMBER} s\)$", out, re.MULTILINE)
        assert line and rate_matches(float(line.group(1)), 12, float(line.group(2))), out
    assert re.search(r"^prefix \(first 1-3 reference words\): 12/12 outputs start with it", out, re.MULTILINE), out


def test_bench_ct2_engine_times_mtkit_and_the_plain_script_and_compares_their_lines(bench_run, tmp_path):
    pytest.importorskip("ctranslate2")
    _, run_dir, _, _, _ = bench_run
    source = tmp_path / "source.txt"
    source.write_text("\n".join(read_gz(TEST_EN)[:30]) + "\n", encoding="utf-8")
    work = tmp_path / "work"
    out = run_script(
        ROOT / "scripts" / "bench_ct2_engine.py",
        run_dir,
        *("--input", source, "--repeat", "2", "--threads", "1", "--out", work, "--inside"),
        *("--cases", "float32:5", "int8:1"),  # 2 of the 4 cases: only the cases asked for run
        cwd=tmp_path,
    )
    for what in ("empty input", "5 lines"):
        assert re.search(rf"^start-up, {what}: mtkit {NUMBER} s, ct2_direct.py {NUMBER} s$", out, re.MULTILINE), out
    summaries = re.findall(
        rf"^(float32|int8) beam (\d): (mtkit|--search ctranslate2) fastest {NUMBER} s against {NUMBER} s, "
        rf"ratio {NUMBER} \(median of the turns' ratios {NUMBER}\); lines equal to the script's (\d+)/(\d+)$",
        out,
        re.MULTILINE,
    )
    assert [(c, b, n) for c, b, n, *_ in summaries] == [
        ("float32", "5", "mtkit"),
        ("float32", "5", "--search ctranslate2"),  # a beam's own search: beam 5 only
        ("int8", "1", "mtkit"),
    ], out
    assert re.findall(r"^(float32|int8) beam (\d) run 1: ", out, re.MULTILINE) == [("float32", "5"), ("int8", "1")], out
    for compute, beam, name, fastest, direct, ratio, median, same, total in summaries:
        runs = re.findall(rf"^{compute} beam {beam} run \d: (.*)$", out, re.MULTILINE)
        assert len(runs) == 2, out
        seconds = {
            who: [float(re.search(rf"{re.escape(who)} {NUMBER} s", run).group(1)) for run in runs]
            for who in (name, "ct2_direct.py")
        }
        assert float(fastest) == min(seconds[name]) and float(direct) == min(seconds["ct2_direct.py"])
        # --inside: each process's time split into CTranslate2's calls and the rest, which add up to it
        for who in (name, "ct2_direct.py"):
            for run, whole in zip(runs, seconds[who]):
                split = rf"{re.escape(who)} {NUMBER} s \(CTranslate2 {NUMBER} s, rest {NUMBER} s\)"
                ct2, rest = re.search(split, run).groups()[1:]
                assert 0 < float(ct2) < whole and abs(float(ct2) + float(rest) - whole) <= 0.002
        medians = re.search(rf"^{compute} beam {beam}, medians: (.*)$", out, re.MULTILINE).group(1)
        assert re.search(rf"{re.escape(name)} CTranslate2 {NUMBER} s, rest {NUMBER} s", medians), medians

        # the ratios are printed to 0.01 and worked out from times printed to 0.001 s: rounding may move each by
        # 0.005 plus what 0.0005 s of either time makes of it
        def rounding(ratio: float, a: float, b: float) -> float:
            return 0.005 + ratio * (0.0005 / a + 0.0005 / b) + 1e-9

        expected = float(direct) / float(fastest)
        assert abs(float(ratio) - expected) <= rounding(expected, float(direct), float(fastest))
        turns = sorted(d / t for d, t in zip(seconds["ct2_direct.py"], seconds[name]))
        slack = max(rounding(d / t, d, t) for d, t in zip(seconds["ct2_direct.py"], seconds[name]))
        assert abs(float(median) - (turns[0] + turns[1]) / 2) <= slack
        slug = {"mtkit": "mtkit", "--search ctranslate2": "search"}[name]
        mine = (work / f"out-{compute}-{beam}-{slug}.txt").read_text(encoding="utf-8").splitlines()
        script = (work / f"out-{compute}-{beam}-direct.txt").read_text(encoding="utf-8").splitlines()
        assert len(mine) == len(script) == int(total) == 30
        assert int(same) == sum(a == b for a, b in zip(mine, script))


def test_bench_lora_smoke_prints_each_mode_asked_and_its_trained_parameters(tmp_path):
    """scripts/bench_lora.py --smoke --modes full,lora-ckpt (lora-ckpt is lora with gradient checkpointing: the
    lora row's path and more, each mode a process of its own): a row each; the counts are the model's (d_model 32,
    1+1 layers, FFN 64, 100 subwords) and those of rank-8 adapters on its attention projections."""
    out = run_script(ROOT / "scripts" / "bench_lora.py", "--smoke", "--modes", "full,lora-ckpt", cwd=tmp_path)
    rows = {}
    for line in out.splitlines():
        fields = line.split()
        if fields and fields[0] in ("full", "lora", "lora-ckpt"):
            rows[fields[0]] = [float(x.replace(",", "")) for x in fields[1:]]
    assert sorted(rows) == ["full", "lora-ckpt"], out
    params, trained, memory, tokens_per_s, seconds = rows["full"]
    assert params == trained and memory > 0 and tokens_per_s > 0
    # r x (in + out) per adapted layer: encoder qkv 32->96, out 32->32; decoder qkv, out, cross q, kv 32->64, out
    adapters = 8 * ((32 + 96) + 64 + (32 + 96) + 64 + 64 + (32 + 64) + 64)
    assert rows["lora-ckpt"][:2] == [params + adapters, adapters], rows["lora-ckpt"]
    assert rows["lora-ckpt"][2] > 0 and rows["lora-ckpt"][3] > 0
    assert "LoRA rank 8" in out and "peak RSS MiB" in out


def test_bench_nllb_ct2_smoke_imports_exports_and_decodes_with_each_engine(tmp_path):
    """scripts/bench_nllb_ct2.py --smoke: a random NLLB-shaped directory imported and exported (int8); a row per
    engine and search whose tokens/s is sentences/s times the tokens an output has (at most 4 and EOS)."""
    pytest.importorskip("ctranslate2")
    out = run_script(ROOT / "scripts" / "bench_nllb_ct2.py", "--smoke", "--work", tmp_path / "w", cwd=tmp_path)
    engines = ("torch auto", "torch float32", "ctranslate2 int8", "ctranslate2 direct")
    rows = re.findall(rf"^({'|'.join(engines)}) +(greedy|beam 4) +([\d.]+) +([\d.]+) ", out, re.M)
    assert [(r[0], r[1]) for r in rows] == [(e, search) for search in ("greedy", "beam 4") for e in engines], out
    for _, _, sentences, tokens in rows:
        assert 0 < float(tokens) <= 5 * float(sentences) * 1.01
    assert "mtkit import-hf:" in out and "mtkit export int8:" in out and not (tmp_path / "w" / "hf").exists()


def test_bench_ct2_prefix_times_both_ways_and_counts_equal_outputs(bench_run, tmp_path):
    """scripts/bench_ct2_prefix.py: a row per way with its turns and their best, the outputs the two agree on (all
    but near-ties), and the speed ratio of the two bests."""
    pytest.importorskip("ctranslate2")
    _, run_dir, _, _, _ = bench_run
    args = (run_dir, "--turns", "1", "--beam", "2", "--limit", "300", "--threads", "1")
    out = run_script(ROOT / "scripts" / "bench_ct2_prefix.py", *args, cwd=tmp_path)
    bests = {}
    for name in ("CTranslate2's scores", "every candidate rescored"):
        best, turn = re.search(rf"^{name} +best +([\d.]+) s  \(([\d.]+)\)  300 sentences, beam 2", out, re.M).groups()
        assert best == turn, out
        bests[name] = float(best)
    assert figure(r"^outputs equal: (\d+) of 300", out) >= 297  # a near-tie may rank the other way
    ratio = figure(r"^CTranslate2's scores: ([\d.]+)x", out)
    # the times are printed to 0.01 s and the ratio to 0.01: the ratio of the printed times within their rounding
    slow, fast = bests["every candidate rescored"], bests["CTranslate2's scores"]
    assert (slow - 0.005) / (fast + 0.005) - 0.005 <= ratio <= (slow + 0.005) / max(fast - 0.005, 1e-9) + 0.005, out


def test_relabel_run_serves_the_same_model_as_another_direction(bench_run, tmp_path):
    """scripts/relabel_run.py: the copy claims de-en (its spec and its loaded languages) and translates exactly as
    the run it copies."""
    from mtkit.serving.models import model_spec

    _, run_dir, _, _, _ = bench_run
    out = tmp_path / "mirror"
    run_script(ROOT / "scripts" / "relabel_run.py", run_dir, out, "--src", "de", "--tgt", "en", cwd=tmp_path)
    assert model_spec(out).directions == (("de", "en"),)
    mirror, original = (mtkit.load(path, device="cpu", dtype="float32") for path in (out, run_dir))
    assert mirror.languages == ("de", "en") and original.languages == ("en", "de")
    lines = read_gz(TEST_EN)[:20]
    assert mirror.translate(lines) == original.translate(lines)


def test_bench_glossary_carries_every_term_and_leaves_the_other_sentences_as_they_were(bench_run, tmp_path):
    _, run_dir, _, _, _ = bench_run
    corpus = run_dir.parent / "corpus"
    for lang in ("en", "de"):  # the toy test split, as the script reads a split
        lines = (corpus / f"test.{lang}").read_text(encoding="utf-8")
        (tmp_path / f"test.{lang}.gz").write_bytes(gzip.compress(lines.encode()))
    glossary = tmp_path / "terms.tsv"
    glossary.write_text("tree\tGarten\ndog\tBall\nred ball\trot\n", encoding="utf-8")  # pairs the corpus never has
    out = run_script(
        ROOT / "scripts" / "bench_glossary.py",
        run_dir,
        "--glossary",
        glossary,
        "--data",
        tmp_path,
        "--split",
        "test",
        "--beam",
        "3",
        "--threads",
        "1",
        "--warmup",
        "2",
        cwd=run_dir.parent,
    )
    sources = read_gz(tmp_path / "test.en.gz")
    bearing = [s for s in sources if re.search(r"\b(tree|dog|red ball)\b", s, re.IGNORECASE)]
    assert 0 < len(bearing) < len(sources), out
    assert re.search(rf"^term-bearing sentences: {len(bearing)} ", out, re.MULTILINE), out
    assert re.search(rf"^carry every target term: {len(bearing)}/{len(bearing)} \(100.0%\)", out, re.MULTILINE), out
    untouched = len(sources) - len(bearing)
    assert re.search(rf"^untouched sentences: {untouched}; the same with the glossary: {untouched}/", out, re.M), out
    without = re.search(r"^  without the glossary  (.*)$", out, re.MULTILINE).group(1)
    assert re.search(r"^  with the glossary     (.*)$", out, re.MULTILINE).group(1) == without
    for name in ("without", "with"):
        line = re.search(rf"^{name}\s+{NUMBER} sent/s\s+\({NUMBER} s\)$", out, re.MULTILINE)
        assert line and rate_matches(float(line.group(1)), len(bearing), float(line.group(2))), out
    assert figure(rf"^time with the glossary / without: {NUMBER}x$", out) > 0
