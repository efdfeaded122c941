#!/usr/bin/env bash
# Measures LoRA / freeze truth cases (models in validation/lora_models.py) with ../shared/truth and
# writes the compact fixture: the format of compact_results.py plus `model` (the config vramscope
# reads) and `extra_args` (its flags).
#   validation/make_lora_fixtures.sh                  # cases_lora.jsonl -> fixtures/truth/hf_lora.jsonl
#   validation/make_lora_fixtures.sh lora_gpt2        # cases_lora_gpt2.jsonl -> hf_lora_gpt2.jsonl
#   MEASURE=0 validation/make_lora_fixtures.sh lora_gpt2   # convert .truth/raw/*_results.jsonl only
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-$HOME/.venvs/truth}
name=${1:-lora}
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
        r["model"], r["extra_args"], r["task"] = v["config"], v["args"], "causal-lm"
        out.write(json.dumps(r, separators=(",", ":")) + "\n")
PY
wc -l "$out"
