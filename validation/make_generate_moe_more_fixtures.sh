#!/usr/bin/env bash
# Measures more MoE generations (validation/cases_generate_moe_more.jsonl): Qwen2-MoE, whose mask
# code makes the window-0 sliding-window mask over the cache in every cached forward, and Mixtral
# with a sliding window (its cache layers are sliding ones; inside the window); fp32, AMP bf16,
# bf16. Writes fixtures/truth/hf_generate_moe_more.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh generate_moe_more causal-lm --jobs 2 --timeout 3600
