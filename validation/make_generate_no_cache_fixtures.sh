#!/usr/bin/env bash
# Measures validation/cases_generate_no_cache.jsonl with ../shared/truth and writes
# fixtures/truth/hf_generate_no_cache.jsonl: `model.generate` of causal LMs whose config says
# `use_cache: false` (as a checkpoint saved after training with gradient checkpointing does), so
# that generate() keeps no cache and every step reruns the whole sequence so far
# (validation/generate_models.py:generate with use_cache=False; vramscope with --use-cache false):
# Qwen2, GPT-2, Llama 3.2 (a left-padded batch, eager attention), OPT, Gemma, Gemma2, Gemma3 and
# Mistral past their sliding windows, Phi-3, Mixtral, Qwen3-MoE and Qwen3, in fp32, pure bf16 and AMP,
# and four past the step budget (Qwen2.5-0.5B, GPT-2, a 2-layer Qwen2: 300 to 1,200 new tokens).
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh generate_no_cache causal-lm --jobs 3 "$@"
