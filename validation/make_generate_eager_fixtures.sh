#!/usr/bin/env bash
# Measures `model.generate` with eager attention (validation/cases_generate_eager.jsonl: GPT-2, OPT, Qwen2,
# Qwen3, Phi-3, Gemma and Gemma3 with attn_implementation="eager", and Gemma2, which always runs
# it; validation/generate_models.py's `generate` with attn="eager") with ../shared/truth and
# writes fixtures/truth/hf_generate_eager.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh generate_eager causal-lm --jobs 2
