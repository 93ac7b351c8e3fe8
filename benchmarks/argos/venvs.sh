#!/usr/bin/env bash
# The virtual environments of Argos Translate and LibreTranslate that tests/test_argos.py and
# scripts/bench_argos.py install mtkit's packages into, each with the exact versions of its requirements file:
#
#   benchmarks/argos/venvs.sh [DIR]      (DIR defaults to .venv-argos in the checkout, which git ignores)
#
#   DIR/argos            argostranslate 1.11.0 (requirements-argos.txt), PyTorch's CPU build installed first
#   DIR/libretranslate   libretranslate 1.9.6 (requirements-libretranslate.txt): it runs on argos-translate-lt,
#                        LibreTranslate's fork of argostranslate under the same import name, so the two cannot share
#                        one environment
#
# An environment is rebuilt only when its requirements file changed (its sha256 is kept in DIR/NAME/.requirements);
# the two are built side by side. Only PyPI is needed (and wherever pip is set up to find torch's CPU wheel, as for
# `make setup`). Environment: PYTHON (default python3).
set -euo pipefail

me=benchmarks/argos/venvs.sh
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=${1:-$root/.venv-argos}
python=${PYTHON:-python3}
command -v "$python" >/dev/null || { echo "$me: no $python on PATH; set PYTHON to a Python 3.11" >&2; exit 2; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

build() {  # NAME REQUIREMENTS
    local name=$1 requirements=$2 venv=$dir/$1 log=$dir/$1.pip.log want
    want=$(sha256sum "$requirements" | cut -d' ' -f1)
    if [ "$(cat "$venv/.requirements" 2>/dev/null || true)" == "$want" ]; then
        return 0
    fi
    echo "$me: building $venv ($(basename "$requirements")) ..." >&2
    rm -rf "$venv"
    "$python" -m venv "$venv"
    local pip=("$venv/bin/python" -m pip install -q --disable-pip-version-check --no-compile)
    local torch
    torch=$(grep -E '^torch==' "$requirements" || true)
    {
        if [ -n "$torch" ]; then "${pip[@]}" "$torch"; fi &&  # the CPU build first: nothing may pull a CUDA one
        "${pip[@]}" -r "$requirements" &&
        "$venv/bin/python" -m pip check
    } >"$log" 2>&1 || { tail -n 20 "$log" >&2; echo "$me: installing $name failed; see $log" >&2; return 1; }
    echo "$want" >"$venv/.requirements"
}

exec 9>"$dir/.lock"
flock 9  # one builder at a time
start=$(date +%s)
build argos "$root/benchmarks/argos/requirements-argos.txt" &
argos=$!
build libretranslate "$root/benchmarks/argos/requirements-libretranslate.txt" &
libre=$!
status=0
wait "$argos" || status=1
wait "$libre" || status=1
[ "$status" == 0 ] || exit 1
echo "$me: $dir/argos and $dir/libretranslate ready ($(( $(date +%s) - start )) s)" >&2
