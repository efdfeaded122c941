#!/usr/bin/env bash
# Measures the `--weights-dtype from-files` truth cases (validation/cases_checkpoint_dtypes.jsonl,
# models in validation/checkpoint_models.py: parameters materialised in the dtypes of the checkpoint
# folders under fixtures/weights/) with ../shared/truth and writes
# fixtures/truth/hf_checkpoint_dtypes.jsonl: the compact format of compact_results.py plus `model`
# (the folder vramscope reads) and `extra_args` (its flags).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-$HOME/.venvs/truth}
mkdir -p .truth/raw
"$VENV/bin/python" ../shared/truth/run_cases.py validation/cases_checkpoint_dtypes.jsonl --out .truth/raw/checkpoint_dtypes_results.jsonl
python3 validation/compact_results.py .truth/raw/checkpoint_dtypes_results.jsonl --prefix py: --out .truth/raw/checkpoint_dtypes_compact.jsonl
python3 - <<'PY'
import json
cases = {c["name"]: c for c in map(json.loads, open("validation/cases_checkpoint_dtypes.jsonl"))}
with open("fixtures/truth/hf_checkpoint_dtypes.jsonl", "w") as out:
    for line in open(".truth/raw/checkpoint_dtypes_compact.jsonl"):
        r = json.loads(line)
        v = cases[r["name"]]["vramscope"]
        r["model"], r["extra_args"], r["task"] = v["config"], v["args"], "causal-lm"
        out.write(json.dumps(r, separators=(",", ":")) + "\n")
PY
wc -l fixtures/truth/hf_checkpoint_dtypes.jsonl
