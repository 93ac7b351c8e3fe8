#!/usr/bin/env bash
# Exercise mtkit's GPU code paths end to end and print measured figures for each step:
#   env        device, driver, torch / CUDA / NCCL versions
#   prepare    mtkit prepare on the shipped Multi30k data
#   train      the Multi30k Transformer for UPDATES updates in fp32, bf16 (autocast) and fp16 (autocast + GradScaler):
#              target tokens/s, valid loss / BLEU, a check that no logged figure is NaN or inf
#   resume     --resume of the fp16 run (else bf16, fp32) for RESUME_UPDATES more updates: checkpoint -> GPU
#   ddp        training under a real NCCL process group of one process with DDP on (scripts/ddp_world1.py), then
#              a resume under it
#   translate  test_2016_flickr with the fp32 run: beam 5 and 1 in float32, beam 5 in bfloat16 and float16;
#              wall seconds (process start and model load included), sentences/s, BLEU / chrF
#   rnn        the Bahdanau and Luong baselines for RNN_UPDATES updates (fp32), then one bf16 and one fp16 run
#   export     mtkit export --format ctranslate2 --quantization float16, translate with it on DEVICE (and on
#              the CPU when that fails), timed and scored (needs the ctranslate2 package)
#   pytest     tests/test_transformer.py tests/test_search.py (CPU tests; only when time is left)
#
# Every step runs even when an earlier one failed; each failure is recorded in the summary with its exit code.
# A step is skipped when less than STEP_MIN seconds of TIME_BUDGET are left, and a command is stopped at
# STEP_TIMEOUT seconds or at the end of the budget, whichever comes first.
#
# Usage (repository root; the package must be importable, e.g. PYTHONPATH=$PWD):
#   scripts/gpu_check.sh                                              # on a GPU machine, about 6 minutes on an H100
#   DEVICE=cpu UPDATES=4 VALID_EVERY=2 RESUME_UPDATES=2 DDP_UPDATES=2 RNN_UPDATES=2 TEST_LINES=40 \
#     VALID_SENTS=20 EXTRA_SET="training.batch_tokens=512" scripts/gpu_check.sh   # a dry run on the CPU
# Output: $OUT/gpu_check.log (everything), $OUT/summary.txt (one line per step and figure) and
# $OUT/details.tar.gz (each run's config.yaml and metrics.jsonl, the hypotheses, per-command logs).
# Without OUT, output goes to $WORK/out.
set -u -o pipefail

PY=${PY:-python3}
DEVICE=${DEVICE:-cuda}                   # training.devices / --device for everything below
UPDATES=${UPDATES:-300}                  # Transformer updates per precision
VALID_EVERY=${VALID_EVERY:-150}
RESUME_UPDATES=${RESUME_UPDATES:-50}     # updates added by the resume step
DDP_UPDATES=${DDP_UPDATES:-100}
RNN_UPDATES=${RNN_UPDATES:-50}
VALID_SENTS=${VALID_SENTS:-500}          # training.valid_max_sentences (greedy valid BLEU)
TEST_LINES=${TEST_LINES:-0}              # translate only the first N test sentences (0: all 1,000)
EXTRA_SET=${EXTRA_SET:-}                 # extra space-separated --set items for every training run
PRECISIONS=${PRECISIONS:-"fp32 bf16 fp16"}
STEPS=${STEPS:-"env prepare train resume ddp translate rnn export pytest"}
TIME_BUDGET=${TIME_BUDGET:-540}          # seconds; later steps are skipped rather than cut off by the caller
STEP_MIN=${STEP_MIN:-20}                 # a step starts only with this many seconds of the budget left
STEP_TIMEOUT=${STEP_TIMEOUT:-240}        # one command's limit
WORK=${WORK:-runs/gpu-check}
OUT=${OUT:-$WORK/out}

TCONFIG=configs/multi30k-transformer.yaml
TEST_SRC=data/multi30k/test_2016_flickr.en.gz
TEST_REF=data/multi30k/test_2016_flickr.de.gz

mkdir -p "$WORK" "$OUT" "$WORK/logs" "$WORK/hyps"
rm -rf "${WORK:?}"/runs "$WORK"/export "$WORK"/logs/* "$WORK"/hyps/*
LOG=$OUT/gpu_check.log
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
: >"$LOG"
export PYTHONUNBUFFERED=1
START=$(date +%s.%N)
MTKIT=("$PY" -m mtkit)
COMMON=(--set training.devices="$DEVICE" --set training.valid_max_sentences="$VALID_SENTS" --set training.max_minutes=30)
for item in $EXTRA_SET; do COMMON+=(--set "$item"); done

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
left() { awk -v s="$START" -v b="$(now)" -v t="$TIME_BUDGET" 'BEGIN { printf "%d", t - (b - s) }'; }
note() { echo "$*" | tee -a "$SUMMARY"; }     # a line for the summary
banner() { printf '\n=============== %s (t=%ss) ===============\n' "$*" "$(since "$START")"; }
wants() { [[ " $STEPS " == *" $1 "* ]]; }

# run NAME CMD...: run one command with a time limit, its output in the log and in logs/NAME.log;
# records "NAME rc=.. seconds=.." in the summary and returns the command's exit code
run() {
    local name=$1 t0 rc secs limit
    shift
    limit=$(left)
    if ((limit < STEP_MIN)); then
        note "$name SKIPPED (time budget: ${limit}s left)"
        return 99
    fi
    ((limit > STEP_TIMEOUT)) && limit=$STEP_TIMEOUT
    echo "+ $*"
    t0=$(now)
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$WORK/logs/$name.log"
    rc=$?
    secs=$(since "$t0")
    if ((rc == 0)); then
        note "$name ok seconds=$secs"
    else
        note "$name FAILED rc=$rc seconds=$secs: $(grep -v '^\s*$' "$WORK/logs/$name.log" | tail -1 | cut -c1-300)"
    fi
    return $rc
}

# run_figures RUN_DIR: tokens/s (mean of the log windows after the first), last train loss, every validation,
# and whether any logged figure is NaN / inf
run_figures() {
    "$PY" - "$1" <<'EOF' | tee -a "$SUMMARY"
import json, math, sys
from pathlib import Path
run = Path(sys.argv[1])
path = run / "metrics.jsonl"
if not path.is_file():
    print(f"  {run.name}: no metrics.jsonl"); sys.exit()
recs = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
train = [r for r in recs if r.get("kind") == "train"]
valid = [r for r in recs if r.get("kind") == "valid"]
bad = [(r.get("kind"), r.get("update"), k) for r in recs for k, v in r.items()
       if isinstance(v, float) and not math.isfinite(v)]
tps = [r["tgt_tokens_per_s"] for r in train[1:]] or [r["tgt_tokens_per_s"] for r in train]
if train:
    last = train[-1]
    print(f"  {run.name}: updates {last['update']}, tgt tokens/s {sum(tps) / len(tps):,.0f} (mean of {len(tps)} "
          f"windows after the first; max {max(tps):,.0f}), last train loss {last['loss']:.3f} ppl {last['ppl']:.1f}, "
          f"{last['elapsed']:.1f}s of training")
for v in valid:
    bleu = f", BLEU {v['bleu']:.2f} chrF {v['chrf']:.2f}" if "bleu" in v else ""
    print(f"  {run.name}: valid @ {v['update']}: loss {v['loss']:.3f} ppl {v['ppl']:.2f}{bleu} ({v.get('seconds', 0):.1f}s)")
print(f"  {run.name}: non-finite figures: {bad[:5] if bad else 'none'}")
EOF
}

# translate_test NAME RUN ARGS...: translate the test set (timed by run), then score it; returns translate's exit code
translate_test() {
    local name=$1 run=$2 hyp=$WORK/hyps/$1.de secs
    shift 2
    run "translate-$name" "${MTKIT[@]}" translate "$run" --input "$WORK/test.en" --output "$hyp" "$@" || return
    secs=$(grep -m1 "^translate-$name ok" "$SUMMARY" | sed 's/.*seconds=//')
    "${MTKIT[@]}" score "$WORK/test.de" -i "$hyp" --json -m bleu -m chrf >"$WORK/logs/score-$name.json" 2>&1
    "$PY" - "$WORK/logs/score-$name.json" "$(wc -l <"$WORK/test.en")" "$secs" "$name" <<'EOF' | tee -a "$SUMMARY"
import json, sys
path, lines, secs, name = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
try:
    s = json.load(open(path))
    print(f"  {name}: {lines} sentences in {secs:.1f}s wall (process start and model load included) = "
          f"{lines / secs:.1f} sent/s; BLEU {s['bleu']['score']:.2f} chrF {s['chrf']['score']:.2f}")
except Exception as err:
    print(f"  {name}: score failed: {err}: {open(path).read()[:300]}")
EOF
}

main() {
# ------------------------------------------------------------------------------------------------- env
if wants env; then
    banner env
    note "date $(date -u +%Y-%m-%dT%H:%M:%SZ) host $(hostname) DEVICE=$DEVICE UPDATES=$UPDATES"
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | sed 's/^/gpu /' | tee -a "$SUMMARY"
    "$PY" - <<'EOF' | tee -a "$SUMMARY"
import platform, torch
print(f"python {platform.python_version()} torch {torch.__version__} cuda {torch.version.cuda} "
      f"cuda available {torch.cuda.is_available()}")
if torch.cuda.is_available():
    p = torch.cuda.get_device_properties(0)
    print(f"device {p.name}, {p.total_memory / 2**30:.1f} GiB, {p.multi_processor_count} SMs, capability "
          f"{p.major}.{p.minor}, bf16 {torch.cuda.is_bf16_supported()}, nccl {'.'.join(map(str, torch.cuda.nccl.version()))}")
for name in ("pydantic", "sentencepiece", "sacrebleu", "safetensors", "ctranslate2"):
    try:
        print(f"{name} {__import__(name).__version__}")
    except Exception as err:
        print(f"{name} missing ({err.__class__.__name__})")
EOF
fi

# --------------------------------------------------------------------------------------------- prepare
if wants prepare; then
    banner prepare
    run prepare "${MTKIT[@]}" prepare "$TCONFIG"
fi
zcat "$TEST_SRC" >"$WORK/test.en"
zcat "$TEST_REF" >"$WORK/test.de"
if ((TEST_LINES > 0)); then
    head -n "$TEST_LINES" "$WORK/test.en" >"$WORK/t" && mv "$WORK/t" "$WORK/test.en"
    head -n "$TEST_LINES" "$WORK/test.de" >"$WORK/t" && mv "$WORK/t" "$WORK/test.de"
fi

# ---------------------------------------------------------------------------------- train, 3 precisions
if wants train; then
    for prec in $PRECISIONS; do
        banner "train $prec"
        run "train-$prec" "${MTKIT[@]}" train "$TCONFIG" "${COMMON[@]}" --set training.precision="$prec" \
            --set training.max_updates="$UPDATES" --set training.validate_every="$VALID_EVERY" \
            --set training.run_dir="$WORK/runs/$prec"
        run_figures "$WORK/runs/$prec"
    done
fi

# ---------------------------------------------------------------------------------------------- resume
if wants resume; then
    banner resume
    target=""
    for prec in fp16 bf16 fp32; do
        if ls "$WORK/runs/$prec/checkpoints"/ckpt_*.safetensors >/dev/null 2>&1; then target=$WORK/runs/$prec; break; fi
    done
    if [[ -n $target ]]; then
        run "resume-$(basename "$target")" "${MTKIT[@]}" train --resume "$target" \
            --set training.max_updates=$((UPDATES + RESUME_UPDATES))
        grep -h "resumed from" "$WORK/logs/resume-$(basename "$target").log" | sed 's/^/  /' | tee -a "$SUMMARY"
        run_figures "$target"
    else
        note "resume SKIPPED: no run with checkpoints"
    fi
fi

# ------------------------------------------------------------------------------------------------- ddp
if wants ddp; then
    banner "ddp (one process, real process group)"
    backend=gloo
    [[ $DEVICE == cuda ]] && backend=nccl
    TORCHRUN=("$PY" -m torch.distributed.run --standalone --nproc_per_node 1 scripts/ddp_world1.py "$backend")
    run "ddp-$backend" "${TORCHRUN[@]}" train "$TCONFIG" "${COMMON[@]}" --set training.max_updates="$DDP_UPDATES" \
        --set training.validate_every="$DDP_UPDATES" --set training.run_dir="$WORK/runs/ddp"
    run "ddp-$backend-resume" "${TORCHRUN[@]}" train --resume "$WORK/runs/ddp" \
        --set training.max_updates=$((DDP_UPDATES + RESUME_UPDATES))
    run_figures "$WORK/runs/ddp"
fi

# ------------------------------------------------------------------------------------------- translate
if wants translate; then
    banner "translate test_2016_flickr ($(wc -l <"$WORK/test.en") sentences) with the fp32 run"
    run_dir=$WORK/runs/fp32
    for spec in "beam5-float32 5 float32" "beam1-float32 1 float32" "beam5-bfloat16 5 bfloat16" "beam5-float16 5 float16"; do
        read -r name beam dtype <<<"$spec"
        translate_test "$name" "$run_dir" --beam-size "$beam" --device "$DEVICE" --dtype "$dtype"
    done
fi

# ------------------------------------------------------------------------------------------------- rnn
if wants rnn; then
    for arch in bahdanau luong; do
        banner "rnn $arch fp32"
        run "rnn-$arch" "${MTKIT[@]}" train "configs/multi30k-$arch.yaml" "${COMMON[@]}" \
            --set training.max_updates="$RNN_UPDATES" --set training.validate_every="$RNN_UPDATES" \
            --set training.run_dir="$WORK/runs/$arch"
        run_figures "$WORK/runs/$arch"
    done
    # mixed precision through the recurrent kernels (fp16 needs a GPU: it fails at once on the CPU)
    for spec in "bahdanau bf16" "luong fp16"; do
        read -r arch prec <<<"$spec"
        banner "rnn $arch $prec"
        run "rnn-$arch-$prec" "${MTKIT[@]}" train "configs/multi30k-$arch.yaml" "${COMMON[@]}" \
            --set training.precision="$prec" --set training.max_updates="$RNN_UPDATES" \
            --set training.validate_every="$RNN_UPDATES" --set training.run_dir="$WORK/runs/$arch-$prec"
        run_figures "$WORK/runs/$arch-$prec"
    done
fi

# ---------------------------------------------------------------------------------------------- export
if wants export; then
    banner "export to CTranslate2 (float16)"
    if "$PY" -c "import ctranslate2" 2>/dev/null; then
        "$PY" -c "import ctranslate2 as c; print('ctranslate2', c.__version__, 'cuda devices', c.get_cuda_device_count())" 2>&1 | tee -a "$SUMMARY"
        if run export "${MTKIT[@]}" export "$WORK/runs/fp32" --format ctranslate2 --output "$WORK/export" --quantization float16; then
            translate_test "ct2-float16-beam5-$DEVICE" "$WORK/export" --beam-size 5 --device "$DEVICE" ||
                if [[ $DEVICE != cpu ]]; then
                    translate_test "ct2-float16-beam5-cpu" "$WORK/export" --beam-size 5 --device cpu
                fi
        fi
    else
        note "export SKIPPED: ctranslate2 is not installed"
    fi
fi

# ---------------------------------------------------------------------------------------------- pytest
if wants pytest; then
    banner pytest
    run pytest "$PY" -m pytest -q -x -p no:cacheprovider tests/test_transformer.py tests/test_search.py
fi

# ------------------------------------------------------------------------------------------------ done
banner "summary ($(since "$START")s in all)"
cat "$SUMMARY"
tar -czf "$OUT/details.tar.gz" -C "$WORK" logs hyps $(cd "$WORK" && ls -d runs/*/metrics.jsonl runs/*/config.yaml 2>/dev/null)
echo "output: $LOG $SUMMARY $OUT/details.tar.gz"
! grep -q "FAILED" "$SUMMARY"
}

main 2>&1 | tee -a "$LOG"
exit "${PIPESTATUS[0]}"
