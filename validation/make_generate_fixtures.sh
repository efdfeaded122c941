#!/usr/bin/env bash
# Measures the generation truth cases (validation/cases_generate.jsonl: `model.generate` with the
# KV cache, models in validation/generate_models.py) with ../shared/truth and writes
# fixtures/truth/hf_generate.jsonl: the compact format of compact_results.py with `model` (the
# config vramscope reads), `mode: "generate"`, no `seq`, and `extra_args` (--prompt-len,
# --new-tokens). The long case (1500 new tokens) takes tens of minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh generate causal-lm --jobs 2 --timeout 3600
