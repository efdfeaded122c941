#!/usr/bin/env bash
# Measures the T5-family truth cases with ../shared/truth and writes the compact fixture: the format of
# compact_results.py plus `model` (the config vramscope reads), `task` and `extra_args` (its flags,
# e.g. --target-len). The measured step is validation/t5_models.py.
#   validation/make_t5_fixtures.sh                      # cases_t5.jsonl -> fixtures/truth/hf_t5.jsonl
#   validation/make_t5_fixtures.sh t5_variants          # cases_t5_variants.jsonl -> hf_t5_variants.jsonl
#   MEASURE=0 validation/make_t5_fixtures.sh t5_variants   # convert .truth/raw/*_results.jsonl only
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-$HOME/.venvs/truth}
name=${1:-t5}
cases=validation/cases_$name.jsonl
raw=.truth/raw/${name}_results.jsonl
out=fixtures/truth/hf_$name.jsonl
mkdir -p .truth/raw
if [ "${MEASURE:-1}" != 0 ]; then
  "$VENV/bin/python" ../shared/truth/run_cases.py "$cases" --out "$raw"
fi
python3 validation/compact_results.py "$raw" --prefix py: \
    --order "$cases" --out ".truth/raw/${name}_compact.jsonl"
python3 - "$cases" ".truth/raw/${name}_compact.jsonl" "$out" <<'PY'
import json, sys
cases_path, compact, out_path = sys.argv[1:]
cases = {c["name"]: c for c in map(json.loads, open(cases_path))}
with open(out_path, "w") as out:
    for line in open(compact):
        r = json.loads(line)
        v = cases[r["name"]]["vramscope"]
        r["model"], r["extra_args"], r["task"] = v["config"], v["args"], "seq2seq-lm"
        out.write(json.dumps(r, separators=(",", ":")) + "\n")
PY
wc -l "$out"
