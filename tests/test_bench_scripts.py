"""The benchmark scripts run end to end from a checkout: `scripts/bench_train.py` trains a
tiny model for a few seconds on the toy corpus and scores the shipped test_2016_flickr (data/multi30k), then
reports again with --reuse; `scripts/bench_translate.py` times and scores that run; `scripts/bench_positions.py`
trains a tiny model 3 updates with two position schemes on data prepared once and prints its table;
`scripts/bench_distill.py` trains a tiny teacher for a few seconds, distils the toy corpus with it, trains a student
on that and on the original data, and decodes, sizes and tabulates each model; `scripts/bench_backtranslate.py
--smoke` trains a de->en model on half of 300 Multi30k pairs, back-translates the other half's German with it (plain
and tagged), trains the four en->de systems a few updates each and tabulates their scores. The figures are checked against
what they are computed from: BLEU and chrF against sacreBLEU on hypotheses the test reads or writes itself, rates
against the counts and seconds printed beside them, training figures against the run's metrics.jsonl and the test's
own clock. Timings are never held to a speed.
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

import numpy as np
import pytest
import sacrebleu
import yaml

import mtkit
from conftest import TINY_TRANSFORMER, write_lines, write_toy_splits

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
    """``mtkit translate`` of ``sources`` at ``beam`` on one thread: the command line's own translations."""
    src, out = tmp / f"src.b{beam}.txt", tmp / f"hyp.b{beam}.txt"
    src.write_text("\n".join(sources) + "\n", encoding="utf-8")
    cmd = ["-m", "mtkit", "translate", run_dir, "-i", src, "-o", out, "--beam-size", beam, "--threads", "1"]
    cmd += ["--dtype", dtype]
    run_script(*cmd, cwd=tmp)
    return out.read_text(encoding="utf-8").splitlines()


def rate_matches(rate: float, count: int, seconds: float) -> bool:
    """``rate`` (printed to 0.1) is ``count / seconds`` for the seconds printed to 0.01 beside it."""
    return count / (seconds + 0.005) - 0.05 <= rate <= count / max(seconds - 0.005, 1e-9) + 0.05


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    """(config path, run dir, bench_train output, its seconds, the largest RSS in MB of this process's children)
    of one 3-second benchmark run on the toy corpus."""
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
    config.write_text(yaml.safe_dump(tree, sort_keys=False), encoding="utf-8")
    start = time.perf_counter()
    out = run_script(
        ROOT / "scripts" / "bench_train.py",
        config,
        "--minutes",
        "0.05",
        "--skip-flops",
        "--threads",
        "1",
        "--run-dir",
        run_dir,
        cwd=root,
    )
    seconds = time.perf_counter() - start
    children_rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024  # KB on Linux
    return config, run_dir, out, seconds, children_rss_mb


def test_bench_train_prints_every_figure_and_translates_the_whole_test_set(bench_run):
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
    sources = read_gz(TEST_EN)
    hyps = (run_dir / "test.beam5.de").read_text(encoding="utf-8").split("\n")
    assert hyps[-1] == "" and len(hyps) - 1 == len(sources) == 1000
    bleu, chrf = bleu_chrf(hyps[:-1], read_gz(TEST_DE))  # the script asks `mtkit score --json -w 2`: two decimals
    assert figure(r"^test BLEU beam 5\s+" + NUMBER, out) == float(f"{bleu:.2f}")
    assert figure(r"^test chrF beam 5\s+" + NUMBER, out) == float(f"{chrf:.2f}")


def test_bench_train_reuse_reports_on_the_run_without_training_or_inventing_a_memory_figure(bench_run):
    config, run_dir, first, _, _ = bench_run
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    out = run_script(
        ROOT / "scripts" / "bench_train.py",
        config,
        "--minutes",
        "0.05",
        "--skip-flops",
        "--threads",
        "1",
        "--run-dir",
        run_dir,
        "--reuse",
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
    start = time.perf_counter()
    out = run_script(
        ROOT / "scripts" / "bench_translate.py",
        run_dir,
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
    sources, refs = read_gz(TEST_EN), read_gz(TEST_DE)
    hyps = {beam: mtkit_translate(run_dir, sources, beam, tmp_path, "float32") for beam in (5, 1)}  # the rows' dtype
    hyps[mbr] = mtkit.load(
        run_dir, algorithm="mbr", mbr_candidates=2, mbr_epsilon=0, beam_size=5, nbest=1, device="cpu", dtype="float32"
    ).translate(sources)
    for row in rows:
        seconds, sentences_per_s, bleu, chrf = float(row[4]), float(row[5]), float(row[7]), float(row[8])
        assert 0 < seconds < elapsed and rate_matches(sentences_per_s, len(sources), seconds), row
        expected = bleu_chrf(hyps[row[2] if row[2] == mbr else int(row[2])], refs)
        assert (bleu, chrf) == tuple(float(f"{x:.2f}") for x in expected), (row, expected)


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
    config.write_text(yaml.safe_dump(tree, sort_keys=False), encoding="utf-8")
    args = ["--config", config, "--updates", "3", "--max-target-len", "8", "--workdir", tmp_path / "bench"]
    out = run_script(
        ROOT / "scripts" / "bench_positions.py",
        *args,
        *("--threads", "1", "--beam-size", "2", "--eval-sentences", "20", "--schemes", "relative", "alibi"),
        cwd=tmp_path,
    )  # two of the five schemes (each trains and decodes alike; tests/test_transformer.py covers all five)
    assert len(re.findall(r"^\$ .* -m mtkit prepare ", out, re.MULTILINE)) == 1, out  # one data dir for both
    assert len(re.findall(r"^\$ .* -m mtkit train ", out, re.MULTILINE)) == 2, out
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


def test_bench_distill_distils_trains_both_students_and_tabulates_what_it_decoded(tmp_path):
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
        configs[name].write_text(yaml.safe_dump(tree, sort_keys=False), encoding="utf-8")
    work = tmp_path / "work"
    out = run_script(
        ROOT / "scripts" / "bench_distill.py",
        *("--teacher-config", configs["teacher"], "--student-config", configs["student"], "--workdir", work),
        *("--minutes", "0.05", "--limit", "20", "--threads", "1"),
        cwd=tmp_path,
    )
    manifest = json.loads((work / "distilled" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["distillation"]["teachers"][0]["path"].startswith(str(tmp_path / "runs" / "distill-teacher"))
    refs = {"test": read_gz(TEST_DE)[:20], "val": read_gz(VAL_DE)[:20]}
    decodes = re.findall(
        r"^(\S+) (test|val) beam (\d): ([\d.]+) s, ([\d.]+) sent/s, BLEU ([\d.]+) chrF ([\d.]+) \((.+)\)$", out, re.M
    )
    assert len(decodes) == 3 * 2 * 2, out  # models x splits x beams
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
        "distilled student": ("student-distilled", work / "student-distilled"),
        "original-data student": ("student-original", work / "student-original"),
    }
    assert list(rows) == list(runs), out  # no ensemble, no peer row without --ensemble, --peer
    steps = {}  # each command's printed seconds, by what it ran
    for seconds, verb, target in re.findall(r"^\s+([\d.]+) s  \$ mtkit (\w+) (\S+)", out, re.MULTILINE):
        steps.setdefault(f"{verb} {Path(target).name}", float(seconds))
    pipelines = {
        "teacher": ["prepare teacher.yaml", "train teacher.yaml"],
        "distilled student": [
            "prepare teacher.yaml",
            "train teacher.yaml",
            "distill distill-teacher",
            "train student.yaml",
        ],
        "original-data student": ["prepare teacher.yaml", "train student-original.yaml"],
    }
    for name, (key, run) in runs.items():
        test_bleu, val_bleu, beam5, greedy, params, mib, clock = rows[name]
        assert (test_bleu, val_bleu) == (cells[key, "test", 5][1], cells[key, "val", 5][1]), (name, cells)
        assert (beam5, greedy) == (cells[key, "test", 5][0], cells[key, "test", 1][0]), name
        assert params == f"{load_checkpoint(run).model.num_parameters():,}"
        assert mib == f"{(work / 'export' / key / 'model.bin').stat().st_size / 2**20:.2f}"
        minutes = sum(steps[step] for step in pipelines[name]) / 60
        assert clock.endswith(" min") and abs(float(clock.split()[0]) - minutes) <= 0.06, (name, clock, steps)
    student, teacher = float(rows["distilled student"][2]), float(rows["teacher"][2])
    ratio = figure(r"^distilled student / teacher, default decoding \(beam 5 / beam 5\), sentences/s: " + NUMBER, out)
    assert (student - 0.05) / (teacher + 0.05) - 0.005 <= ratio <= (student + 0.05) / (teacher - 0.05) + 0.005
    delta = cells["student-distilled", "test", 5][2] - cells["teacher", "test", 5][2]
    assert abs(figure(r"^distilled student test BLEU - teacher's: \+?" + NUMBER, out) - delta) <= 0.006
    assert "onmt_translate" not in out


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
        (c, b, n)
        for c in ("float32", "int8")
        for b, names in (("5", ("mtkit", "--search ctranslate2")), ("1", ("mtkit",)))
        for n in names
    ], out
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
        assert abs(float(ratio) - float(direct) / float(fastest)) <= 0.01
        turns = sorted(d / t for d, t in zip(seconds["ct2_direct.py"], seconds[name]))
        assert abs(float(median) - (turns[0] + turns[1]) / 2) <= 0.01
        slug = {"mtkit": "mtkit", "--search ctranslate2": "search"}[name]
        mine = (work / f"out-{compute}-{beam}-{slug}.txt").read_text(encoding="utf-8").splitlines()
        script = (work / f"out-{compute}-{beam}-direct.txt").read_text(encoding="utf-8").splitlines()
        assert len(mine) == len(script) == int(total) == 30
        assert int(same) == sum(a == b for a, b in zip(mine, script))


def test_bench_ct2_engine_times_only_the_cases_asked_for(bench_run, tmp_path):
    pytest.importorskip("ctranslate2")
    _, run_dir, _, _, _ = bench_run
    source = tmp_path / "source.txt"
    source.write_text("\n".join(read_gz(TEST_EN)[:10]) + "\n", encoding="utf-8")
    out = run_script(
        ROOT / "scripts" / "bench_ct2_engine.py",
        run_dir,
        *("--input", source, "--repeat", "1", "--threads", "1", "--out", tmp_path / "work", "--cases", "int8:1"),
        cwd=tmp_path,
    )
    assert re.findall(r"^(float32|int8) beam (\d) run 1: ", out, re.MULTILINE) == [("int8", "1")], out
    assert re.findall(r"^(float32|int8) beam (\d): mtkit fastest ", out, re.MULTILINE) == [("int8", "1")], out


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
        config.write_text(yaml.safe_dump(tree, sort_keys=False), encoding="utf-8")
        for command in ("prepare", "train"):
            run_script("-m", "mtkit", command, config, cwd=tmp_path)
    multi, bi, many = (str(tmp_path / name) for name in ("multi", "bi", "many"))
    out = run_script(
        ROOT / "scripts" / "bench_multilingual.py",
        *("--multi", multi, multi, "--bilingual", f"de={bi}", "--many", many),
        *("--split", "val", "--limit", "12", "--beam-size", "2", "--threads", "1", "--dtype", "float32"),
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
    config.write_text(yaml.safe_dump(tree, sort_keys=False), encoding="utf-8")
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


def test_bench_lora_smoke_prints_each_mode_and_its_trained_parameters(tmp_path):
    """scripts/bench_lora.py --smoke: full, lora and lora-ckpt rows; the counts are the model's (d_model 32, 1+1
    layers, FFN 64, 100 subwords) and those of rank-8 adapters on its attention projections."""
    out = run_script(ROOT / "scripts" / "bench_lora.py", "--smoke", cwd=tmp_path)
    rows = {}
    for line in out.splitlines():
        fields = line.split()
        if fields and fields[0] in ("full", "lora", "lora-ckpt"):
            rows[fields[0]] = [float(x.replace(",", "")) for x in fields[1:]]
    assert sorted(rows) == ["full", "lora", "lora-ckpt"], out
    params, trained, memory, tokens_per_s, seconds = rows["full"]
    assert params == trained and memory > 0 and tokens_per_s > 0
    # r x (in + out) per adapted layer: encoder qkv 32->96, out 32->32; decoder qkv, out, cross q, kv 32->64, out
    adapters = 8 * ((32 + 96) + 64 + (32 + 96) + 64 + 64 + (32 + 64) + 64)
    for mode in ("lora", "lora-ckpt"):
        assert rows[mode][:2] == [params + adapters, adapters], (mode, rows[mode])
        assert rows[mode][2] > 0 and rows[mode][3] > 0
    assert "LoRA rank 8" in out and "peak RSS MiB" in out
