"""One smoke test of the whole pipeline through the real command line, as separate processes
(like fairseq's test_binaries): prepare -> train (200 updates of a tiny Transformer, enough to translate some
words) -> translate -> score.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import sacrebleu
import yaml

from conftest import TINY_TRANSFORMER

pytestmark = pytest.mark.slow  # processes, training runs, benchmark scripts

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def mtkit(*args, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mtkit", *map(str, args)], input=stdin, capture_output=True, env=ENV, timeout=300
    )


def ok(done: subprocess.CompletedProcess) -> subprocess.CompletedProcess:
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert b"Traceback" not in done.stderr
    return done


def test_prepare_train_translate_score(tmp_path, toy_data, write_config):
    run_dir = tmp_path / "run"
    config = write_config(
        {
            "data": toy_data(),
            "model": {**TINY_TRANSFORMER, "max_positions": 64},
            "training": {
                "run_dir": str(run_dir),
                "max_updates": 200,
                "batch_tokens": 500,
                "lr": 3e-3,
                "warmup_updates": 10,
                "validate_every": 100,
                "log_every": 10,
                "threads": 1,
                "valid_max_sentences": 8,
                "curves": True,  # the default, which the tests' configs otherwise turn off
            },
            "decoding": {"beam_size": 3, "threads": 1, "device": "cpu"},
        }
    )
    data_dir = tmp_path / "data"
    test_src, test_ref = tmp_path / "corpus" / "test.en", tmp_path / "corpus" / "test.de"

    ok(mtkit("prepare", config))
    manifest = json.loads((data_dir / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["splits"]["train"]["pairs_kept"] == 300
    assert (data_dir / "spm.model").is_file()

    ok(mtkit("train", config))
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert "ckpt_0000200.safetensors" in checkpoints and "best.safetensors" in checkpoints
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    assert max(r["update"] for r in records) == 200
    assert any(r["kind"] == "valid" for r in records)
    assert (run_dir / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    hyps = tmp_path / "hyps.de"
    done = ok(mtkit("translate", run_dir, "-i", test_src, "-o", hyps))
    assert done.stdout == b""
    n_test = len(test_src.read_text(encoding="utf-8").splitlines())
    assert n_test == 30
    hyp_text = hyps.read_text(encoding="utf-8")
    assert hyp_text.endswith("\n") and len(hyp_text.splitlines()) == n_test

    scored = ok(mtkit("score", test_ref, "-i", hyps, "--json"))
    scores = json.loads(scored.stdout)
    assert set(scores) == {"bleu", "chrf", "ter"}
    # the printed scores are sacreBLEU's on the files, rounded as sacreBLEU prints them (one decimal)
    refs, hyp_lines = test_ref.read_text(encoding="utf-8").splitlines(), hyp_text.splitlines()
    assert sum(map(bool, hyp_lines)) > n_test // 2, hyp_lines  # a translation to score, not empty lines
    expected = {
        "bleu": sacrebleu.corpus_bleu(hyp_lines, [refs]).score,
        "chrf": sacrebleu.corpus_chrf(hyp_lines, [refs]).score,
        "ter": sacrebleu.corpus_ter(hyp_lines, [refs]).score,
    }
    assert {m: scores[m]["score"] for m in expected} == {m: float(f"{x:.1f}") for m, x in expected.items()}
    assert scores["bleu"]["signature"].startswith("nrefs:1|")

    table = ok(mtkit("score", test_ref, stdin=hyps.read_bytes()))  # the pipe form: translate | score
    assert b"BLEU" in table.stdout
    assert yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))["model"]["d_model"] == 32
