#!/usr/bin/env bash
# Measures eager attention for the causal-LM families beyond gpt2 / llama / mistral / qwen2
# (validation/cases_eager_families.jsonl: Qwen3, Phi-3, OPT and Mixtral, batch-1 cases, and AMP fp16 for GPT-2,
# Qwen2 and Mistral, built with
# attn_implementation="eager" by validation/generate_models.py's `eager`) with ../shared/truth and
# writes fixtures/truth/hf_eager_families.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh eager_families causal-lm --jobs 2
