#!/usr/bin/env bash
# Measures the generation truth cases of the decoder families beyond GPT-2 / OPT / Llama / Mistral /
# Qwen2 (validation/cases_generate_families.jsonl: `model.generate` with the KV cache, models in
# validation/generate_models.py) with ../shared/truth and writes
# fixtures/truth/hf_generate_families.jsonl (the format of hf_generate.jsonl: `mode: "generate"`,
# no `seq`, `extra_args` --prompt-len / --new-tokens). A few minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh generate_families causal-lm --jobs 2 --timeout 3600
