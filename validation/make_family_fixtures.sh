#!/usr/bin/env bash
# Measures the decoder-family truth cases (validation/cases_hf_families.jsonl: Gemma, Gemma2, Gemma3,
# Phi-3, Qwen3 and the sliding-window masks of Phi-3 / Mistral, on their configs cut to 2 layers in
# fixtures/hf/configs/) with ../shared/truth and writes fixtures/truth/hf_families.jsonl: the compact
# format of compact_results.py with `model` the config vramscope reads. Gemma2 runs through
# validation/hf_attn_models.py (eager attention, what transformers uses for it; measure.py's hf:
# route forces sdpa, which transformers refuses for Gemma2).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-$HOME/.venvs/truth}
mkdir -p .truth/raw
"$VENV/bin/python" ../shared/truth/run_cases.py validation/cases_hf_families.jsonl \
    --out .truth/raw/hf_families_results.jsonl --jobs 2
python3 validation/compact_results.py .truth/raw/hf_families_results.jsonl --prefix '' \
    --order validation/cases_hf_families.jsonl --out .truth/raw/hf_families_compact.jsonl
python3 - <<'PY'
import json
cases = {c["name"]: c for c in map(json.loads, open("validation/cases_hf_families.jsonl"))}
with open("fixtures/truth/hf_families.jsonl", "w") as out:
    for line in open(".truth/raw/hf_families_compact.jsonl"):
        r = json.loads(line)
        c = cases[r["name"]]
        r["model"] = c["vramscope"]["config"] if "vramscope" in c else c["model"][len("hf:../"):]
        r["task"] = "causal-lm"
        out.write(json.dumps(r, separators=(",", ":")) + "\n")
PY
wc -l fixtures/truth/hf_families.jsonl
