#!/usr/bin/env bash
# Measures the LoRA / freeze truth cases (validation/cases_lora.jsonl, models in
# validation/lora_models.py) with ../shared/truth and writes fixtures/truth/hf_lora.jsonl: the compact
# format of compact_results.py plus `model` (the config vramscope reads) and `extra_args` (its flags).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-$HOME/.venvs/truth}
mkdir -p .truth/raw
"$VENV/bin/python" ../shared/truth/run_cases.py validation/cases_lora.jsonl --out .truth/raw/lora_results.jsonl
python3 validation/compact_results.py .truth/raw/lora_results.jsonl --prefix py: --out .truth/raw/lora_compact.jsonl
python3 - <<'PY'
import json
cases = {c["name"]: c for c in map(json.loads, open("validation/cases_lora.jsonl"))}
with open("fixtures/truth/hf_lora.jsonl", "w") as out:
    for line in open(".truth/raw/lora_compact.jsonl"):
        r = json.loads(line)
        v = cases[r["name"]]["vramscope"]
        r["model"], r["extra_args"], r["task"] = v["config"], v["args"], "causal-lm"
        out.write(json.dumps(r, separators=(",", ":")) + "\n")
PY
wc -l fixtures/truth/hf_lora.jsonl
