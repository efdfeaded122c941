#!/usr/bin/env bash
# Measures the generation truth cases of the decoder families beyond GPT-2 / OPT / Llama / Mistral /
# Qwen2 (validation/cases_generate_families.jsonl: `model.generate` with the KV cache, models in
# validation/generate_models.py) with ../shared/truth and writes
# fixtures/truth/hf_generate_families.jsonl (the format of hf_generate.jsonl: `mode: "generate"`,
# no `seq`, `extra_args` --prompt-len / --new-tokens). A few minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-$HOME/.venvs/truth}
mkdir -p .truth/raw
"$VENV/bin/python" ../shared/truth/run_cases.py validation/cases_generate_families.jsonl \
    --out .truth/raw/generate_families_results.jsonl --jobs 2 --timeout 3600
python3 validation/compact_results.py .truth/raw/generate_families_results.jsonl --prefix py: \
    --order validation/cases_generate_families.jsonl --out .truth/raw/generate_families_compact.jsonl
python3 validation/vramscope_fixture.py validation/cases_generate_families.jsonl \
    .truth/raw/generate_families_compact.jsonl fixtures/truth/hf_generate_families.jsonl
wc -l fixtures/truth/hf_generate_families.jsonl
