#!/usr/bin/env bash
# Measures the QLoRA / 4-bit truth cases (validation/cases_qlora.jsonl, models in
# validation/qlora_models.py: bitsandbytes' storage and kernels rewritten with plain torch ops, since
# bitsandbytes cannot run under the truth tool) with ../shared/truth and writes
# fixtures/truth/hf_qlora.jsonl: the compact format of compact_results.py plus `model` (the config
# vramscope reads) and `extra_args` (its flags).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-$HOME/.venvs/truth}
mkdir -p .truth/raw
"$VENV/bin/python" ../shared/truth/run_cases.py validation/cases_qlora.jsonl --out .truth/raw/qlora_results.jsonl
python3 validation/compact_results.py .truth/raw/qlora_results.jsonl --prefix py: --out .truth/raw/qlora_compact.jsonl
python3 - <<'PY'
import json
cases = {c["name"]: c for c in map(json.loads, open("validation/cases_qlora.jsonl"))}
with open("fixtures/truth/hf_qlora.jsonl", "w") as out:
    for line in open(".truth/raw/qlora_compact.jsonl"):
        r = json.loads(line)
        v = cases[r["name"]]["vramscope"]
        r["model"], r["extra_args"], r["task"] = v["config"], v["args"], "causal-lm"
        out.write(json.dumps(r, separators=(",", ":")) + "\n")
PY
wc -l fixtures/truth/hf_qlora.jsonl
