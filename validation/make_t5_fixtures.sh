#!/usr/bin/env bash
# Measures the T5 truth cases (validation/cases_t5.jsonl, the measured step in
# validation/t5_models.py) with ../shared/truth and writes fixtures/truth/hf_t5.jsonl: the compact
# format of compact_results.py plus `model` (the config vramscope reads), `task` and `extra_args`
# (its flags, e.g. --target-len).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-$HOME/.venvs/truth}
mkdir -p .truth/raw
"$VENV/bin/python" ../shared/truth/run_cases.py validation/cases_t5.jsonl --out .truth/raw/t5_results.jsonl
python3 validation/compact_results.py .truth/raw/t5_results.jsonl --prefix py: \
    --order validation/cases_t5.jsonl --out .truth/raw/t5_compact.jsonl
python3 - <<'PY'
import json
cases = {c["name"]: c for c in map(json.loads, open("validation/cases_t5.jsonl"))}
with open("fixtures/truth/hf_t5.jsonl", "w") as out:
    for line in open(".truth/raw/t5_compact.jsonl"):
        r = json.loads(line)
        v = cases[r["name"]]["vramscope"]
        r["model"], r["extra_args"], r["task"] = v["config"], v["args"], "seq2seq-lm"
        out.write(json.dumps(r, separators=(",", ":")) + "\n")
PY
wc -l fixtures/truth/hf_t5.jsonl
