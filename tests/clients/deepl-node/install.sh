#!/usr/bin/env bash
# DeepL's Node.js client for tests/test_deepl.py: the exact tree of package-lock.json (npm's integrity hashes) into
# node_modules beside it, from the npm registry; again only when the lock changed. Without npm nothing is installed
# and the test that runs the client is skipped, saying so.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
command -v npm >/dev/null || { echo "$0: no npm on PATH; DeepL's Node.js client is not installed" >&2; exit 0; }
want=$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)
[ "$(cat "$here/node_modules/.mtkit-lock" 2>/dev/null || true)" == "$want" ] && exit 0
(cd "$here" && npm ci --no-audit --no-fund --ignore-scripts --loglevel=error)
echo "$want" >"$here/node_modules/.mtkit-lock"
