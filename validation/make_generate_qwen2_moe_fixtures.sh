#!/usr/bin/env bash
# Measures `model.generate` for Qwen2-MoE (validation/cases_generate_qwen2_moe.jsonl: its mask code
# makes the window-0 sliding-window mask over the cache in every cached forward; fp32, AMP bf16,
# bf16) with ../shared/truth and writes fixtures/truth/hf_generate_qwen2_moe.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh generate_qwen2_moe causal-lm --jobs 2 --timeout 3600
