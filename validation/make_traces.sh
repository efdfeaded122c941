#!/usr/bin/env bash
# Event traces for simulator debugging (written to the git-ignored .truth/traces/):
#   - every torchvision case of shared/truth/dev_cases.jsonl
#   - the small batch-2 cases of validation/cases_small_traces.jsonl
# For each case NAME: .truth/traces/NAME.trace.jsonl (alloc/free events) and .truth/traces/NAME.json (record).
# Usage: validation/make_traces.sh [dev|small|all]   (2 measure.py processes at a time)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TRUTH=${TRUTH:-/work/shared/truth}
export VENV=${VENV:-$HOME/.venvs/truth}
PY=$VENV/bin/python
OUT=$ROOT/.truth/traces
mkdir -p "$OUT"
export PY TRUTH OUT
what=${1:-all}
lists=()
[[ $what == dev || $what == all ]] && lists+=("$TRUTH/dev_cases.jsonl")
[[ $what == small || $what == all ]] && lists+=("$ROOT/validation/cases_small_traces.jsonl")
for list in "${lists[@]}"; do
  python3 -c '
import json, sys
for l in open(sys.argv[1]):
    l = l.strip()
    if l and not l.startswith(("#", "//")):
        c = json.loads(l)
        if c["model"].startswith("torchvision:"):
            print(c["name"])
' "$list" | while read -r name; do echo "$list $name"; done
done | xargs -P 2 -L 1 bash -c '
list=$0; name=$1
if "$PY" "$TRUTH/measure.py" --spec "$list" --name "$name" --base-dir "$(dirname "$list")" \
     --trace "$OUT/$name.trace.jsonl" --json --out "$OUT/$name.json" > "$OUT/$name.stdout" 2> "$OUT/$name.stderr"; then
  echo "ok     $name"; rm -f "$OUT/$name.stdout"
else
  echo "FAILED $name (see $OUT/$name.stderr)"
fi'
