#!/usr/bin/env bash
# The OpenNMT-py peer of docs/benchmarks.md, measured on this machine.
#
#   benchmarks/peer_opennmt.sh MINUTES [WORKDIR]
#
# 1. Builds its own virtual environment in WORKDIR/venv (once): OpenNMT-py 3.5.1 and CTranslate2 4.8.5, with the
#    torch of constraints.txt and the scorer and tokenizer versions mtkit uses (sacrebleu 2.6.0, sentencepiece
#    0.2.3).
# 2. Segments the shipped data/multi30k (English -> German) with one joint SentencePiece BPE model of 8,000
#    subwords, as configs/multi30k-transformer.yaml does.
# 3. Trains benchmarks/opennmt-peer.yaml (the model size of configs/multi30k-transformer.yaml: 3+3 layers,
#    d_model 256, 4 heads, FFN 1024, tied embeddings, 4,096-token batches) for MINUTES of wall time.
# 4. Translates test_2016_flickr at beam 5 and greedy with onmt_translate (64 sentences a batch) and with
#    CTranslate2 float32 and int8 (32 a batch, onmt_translate's output-length cap), and scores with sacreBLEU.
# 5. Prints the date, the CPU, updates, target tokens/s (OpenNMT-py's own reports), epochs, and per decoder:
#    seconds, sentences/s, BLEU and chrF.
#
# Environment: THREADS (default 2: torch and CTranslate2 threads), REUSE=1 (keep the last trained model and only
# decode again), PYTHON (default python3, for the venv). WORKDIR defaults to ${TMPDIR:-/tmp}/mtkit-peer-opennmt.
# Run it with the machine otherwise idle, right before or after mtkit's own benchmark
# (python scripts/bench_train.py configs/multi30k-transformer.yaml --minutes MINUTES), so that the two runs
# see the same machine.
set -euo pipefail

me=benchmarks/peer_opennmt.sh
usage="usage: $me MINUTES [WORKDIR]"
bad_usage() { echo "$me: $1 ($usage)" >&2; exit 2; }
fail() { echo "$me: $1" >&2; exit 1; }

if [ "$#" -lt 1 ] || [ "$#" -gt 2 ]; then
    bad_usage "expected MINUTES and at most a WORKDIR, got $# arguments"
fi
minutes=$1
if ! [[ "$minutes" =~ ^[0-9]+([.][0-9]+)?$ ]] || ! awk -v m="$minutes" 'BEGIN { exit !(m > 0) }'; then
    bad_usage "MINUTES must be a positive number of minutes of training, got '$minutes'"
fi
threads=${THREADS:-2}
[[ "$threads" =~ ^[1-9][0-9]*$ ]] || bad_usage "THREADS must be a positive whole number, got '$threads'"
reuse=${REUSE:-0}
[[ "$reuse" == 0 || "$reuse" == 1 ]] || bad_usage "REUSE must be 0 or 1, got '$reuse'"
python=${PYTHON:-python3}
command -v "$python" >/dev/null || bad_usage "no $python on PATH; set PYTHON to a Python 3.10 or newer"
for tool in timeout awk; do command -v "$tool" >/dev/null || fail "this script needs '$tool' (coreutils, awk)"; done

root=$(cd "$(dirname "$0")/.." && pwd)
data=$root/data/multi30k
config=$root/benchmarks/opennmt-peer.yaml
helper=$root/benchmarks/peer_opennmt.py
[ -f "$data/train.en.gz" ] || fail "$data/train.en.gz not found: run it from an mtkit checkout"
work=${2:-${TMPDIR:-/tmp}/mtkit-peer-opennmt}
mkdir -p "$work" || bad_usage "cannot create WORKDIR '$work'"
work=$(cd "$work" && pwd)

# --------------------------------------------------------------------------------------- 1. environment
torch_pin=$(grep -E '^torch==' "$root/constraints.txt" || true)
torch_pin=${torch_pin:-torch==2.13.0}
pins="opennmt-py==3.5.1 ctranslate2==4.8.5 sacrebleu==2.6.0 sentencepiece==0.2.3 $torch_pin"
venv=$work/venv
if [ "$(cat "$venv/.pins" 2>/dev/null || true)" != "$pins" ]; then
    echo "setting up $venv ($pins) ..." >&2
    rm -rf "$venv"
    "$python" -m venv "$venv" || fail "could not create a virtual environment with $python"
    pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check)
    log=$work/pip.log
    {
        "${pip[@]}" -c "$root/constraints.txt" "$torch_pin" &&
        # OpenNMT-py 3.5.1 declares torch<2.3 but runs on the torch mtkit uses, so it goes in without its declared
        # dependencies and the ones it imports go in next. It imports every data transform at start-up, hence
        # spaCy, fastText, rapidfuzz and pyahocorasick, although this run uses none of them.
        "${pip[@]}" --no-deps opennmt-py==3.5.1 &&
        "${pip[@]}" ctranslate2==4.8.5 sacrebleu==2.6.0 sentencepiece==0.2.3 configargparse pyyaml six \
            'pyonmttok>=1.37,<2' rapidfuzz pyahocorasick fasttext-wheel spacy
    } >"$log" 2>&1 || fail "installing the peer's packages failed; see $log"
    echo "$pins" >"$venv/.pins"
fi
export PATH=$venv/bin:$PATH OMP_NUM_THREADS=$threads MKL_NUM_THREADS=$threads
py=$venv/bin/python
# onmt_translate loads its (own, trusted) checkpoints with torch.load, which torch >= 2.6 restricts by default
export TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1

cd "$work"
mkdir -p data run eval

# ------------------------------------------------------------------------------------------ 2. data
"$py" "$helper" prepare "$data" data "$threads" || fail "preparing the data failed (see above)"
if [ ! -s run/vocab.shared ]; then
    onmt_build_vocab -config "$config" -n_sample -1 -save_data run/vocab >run/build-vocab.log 2>&1 ||
        fail "onmt_build_vocab failed; see $work/run/build-vocab.log"
fi

# ------------------------------------------------------------------------------------------ 3. training
if [ "$reuse" == 0 ] || ! compgen -G "run/model_step_*.pt" >/dev/null; then
    rm -f run/model_step_*.pt run/train.log run/train.out
    seconds=$(awk -v m="$minutes" 'BEGIN { printf "%d", m * 60 + 0.5 }')
    echo "training OpenNMT-py for $minutes min on $threads threads (log: $work/run/train.out) ..." >&2
    status=0
    timeout -s INT "$seconds" onmt_train -config "$config" >run/train.out 2>&1 || status=$?
    # timeout's 124 is the expected end; anything else means onmt_train stopped by itself
    [ "$status" == 124 ] || fail "onmt_train stopped before the time limit (exit $status); see $work/run/train.out"
fi
checkpoint=$("$py" "$helper" checkpoint run) || exit 1

# ----------------------------------------------------------------------------------- 4-5. decode, report
echo "== OpenNMT-py 3.5.1 peer: $minutes min of training on $threads threads"
printf '%-18s%s\n' "date" "$(date -u '+%Y-%m-%d %H:%M UTC')"
"$py" "$helper" machine
"$py" "$helper" training run/train.out data/train.sp.en "$checkpoint" || exit 1
for beam in 5 1; do
    start=$(date +%s.%N)
    onmt_translate -model "$checkpoint" -src data/test_2016_flickr.sp.en -output "eval/onmt.b$beam" \
        -beam_size "$beam" -batch_size 64 -batch_type sents -report_time >"eval/onmt.b$beam.log" 2>&1 ||
        fail "onmt_translate failed at beam $beam; see $work/eval/onmt.b$beam.log"
    end=$(date +%s.%N)
    wall=$(awk -v s="$start" -v e="$end" 'BEGIN { printf "%.2f", e - s }')
    "$py" "$helper" onmt-row "eval/onmt.b$beam.log" "eval/onmt.b$beam" data/spm8k.model \
        data/test_2016_flickr.de "$beam" "$wall" || exit 1
done
"$py" "$helper" ct2-rows "$checkpoint" eval/ct2 data/test_2016_flickr.sp.en data/spm8k.model \
    data/test_2016_flickr.de "$threads" || exit 1
