#!/usr/bin/env bash
# Measures the generation truth cases (validation/cases_generate.jsonl: `model.generate` with the
# KV cache, models in validation/generate_models.py) with ../shared/truth and writes
# fixtures/truth/hf_generate.jsonl: the compact format of compact_results.py with `model` (the
# config vramscope reads), `mode: "generate"`, no `seq`, and `extra_args` (--prompt-len,
# --new-tokens). The long case (1500 new tokens) takes tens of minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-$HOME/.venvs/truth}
mkdir -p .truth/raw
"$VENV/bin/python" ../shared/truth/run_cases.py validation/cases_generate.jsonl \
    --out .truth/raw/generate_results.jsonl --jobs 2 --timeout 3600
python3 validation/compact_results.py .truth/raw/generate_results.jsonl --prefix py: \
    --order validation/cases_generate.jsonl --out .truth/raw/generate_compact.jsonl
python3 validation/vramscope_fixture.py validation/cases_generate.jsonl .truth/raw/generate_compact.jsonl \
    fixtures/truth/hf_generate.jsonl
wc -l fixtures/truth/hf_generate.jsonl
