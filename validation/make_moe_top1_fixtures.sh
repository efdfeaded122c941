#!/usr/bin/env bash
# Measures validation/cases_moe_top1.jsonl with ../shared/truth and writes
# fixtures/truth/hf_moe_top1.jsonl: Mixture-of-Experts models with one expert per token
# (`num_experts_per_tok: 1`), whose experts' sum over k and its view pass the gradient on as
# views: Qwen3-MoE (a random sequence classifier), Mixtral and Qwen2-MoE; fp32, AMP, inference.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX= exec validation/make_py_fixtures.sh moe_top1 causal-lm --jobs 1 "$@"
