#!/usr/bin/env bash
# Train candidate demo recipes for a fixed number of updates each and print val / test BLEU (beam 5) per recipe.
#
#   benchmarks/demo_recipe.sh JOBS_FILE [PARALLEL]      e.g. benchmarks/demo_recipe.sh benchmarks/demo-recipe/round3.txt 4
#
# JOBS_FILE: one recipe a line, "NAME key=value key=value ..." (--set overrides of configs/multi30k-transformer.yaml).
# Each recipe's max_updates is what its model reaches in about 9.5 minutes on a 2-core AVX2-only CPU (measured
# update rates), so recipes are compared at the same CPU budget. Learning per update does not depend on the device,
# so the recipes can be trained on a GPU (DEVICE=cuda, the default) and the winner checked on the CPU with make demo.
# Output: one line per recipe, "NAME upd=N val=BLEU test=BLEU :: overrides"; runs land in runs/demo-recipe/NAME.
set -u -o pipefail
if [[ $# -lt 1 || ! -f ${1:-} ]]; then
  echo "usage: benchmarks/demo_recipe.sh JOBS_FILE [PARALLEL] (JOBS_FILE: a readable file of 'NAME key=value ...' lines)" >&2
  exit 2
fi
cd "$(dirname "$0")/.." || exit 2
JOBS=$1 PARALLEL=${2:-1} DEVICE=${DEVICE:-cuda} PY=${PY:-python3}
export DEVICE PY

one() {  # one NAME OVERRIDES...
  local name=$1; shift
  local run=runs/demo-recipe/$name sets=() split
  for s in "$@"; do sets+=(--set "$s"); done
  mkdir -p "$run"
  if ! "$PY" -m mtkit train configs/multi30k-transformer.yaml --set "training.run_dir=$run" \
      --set "training.devices=$DEVICE" --set training.max_minutes=null --set training.log_every=50 \
      --set training.validate_every=100000 --set training.valid_bleu=false "${sets[@]}" >"$run/train.log" 2>&1; then
    echo "$name: training failed: $(tail -1 "$run/train.log")"; return 0
  fi
  for split in val test_2016_flickr; do
    gzip -dc "data/multi30k/$split.en.gz" >"$run/$split.en"
    gzip -dc "data/multi30k/$split.de.gz" >"$run/$split.de"
    "$PY" -m mtkit translate "$run" --input "$run/$split.en" --output "$run/$split.hyp" --beam-size 5 \
      --device "$DEVICE" 2>>"$run/translate.log"
    "$PY" -m mtkit score "$run/$split.de" --hyps "$run/$split.hyp" --metric bleu --json |
      "$PY" -c "import json, sys; print(round(json.load(sys.stdin)['bleu']['score'], 2))" >"$run/$split.bleu"
  done
  local updates
  updates=$(grep -o 'stopped at update [0-9]*' "$run/train.log" | grep -o '[0-9]*$')
  echo "$name upd=$updates val=$(cat "$run/val.bleu") test=$(cat "$run/test_2016_flickr.bleu") :: $*"
}
export -f one

"$PY" -m mtkit prepare configs/multi30k-transformer.yaml >/dev/null || exit 1
if grep -q 'data.dir=work/multi30k-ende-5k' "$JOBS"; then
  "$PY" -m mtkit prepare configs/multi30k-transformer.yaml --set data.vocab_size=5000 \
    --set data.dir=work/multi30k-ende-5k >/dev/null || exit 1
fi
grep -v '^#' "$JOBS" | grep . | xargs -P "$PARALLEL" -L 1 bash -c 'one "$@"' _
