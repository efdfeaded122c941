#!/usr/bin/env bash
# Measures validation/cases_generate_padded.jsonl with ../shared/truth and writes
# fixtures/truth/hf_generate_padded.jsonl: `model.generate(input_ids, attention_mask=...)` on
# left-padded batches (validation/generate_models.py:generate with `pad`: the first prompt starts
# with `pad` padding positions): Qwen2, Llama 3.2, Phi-3, Qwen3, Mistral (inside and past a
# 64-token window), GPT-2, OPT, Gemma, Gemma2, Gemma3 (past its window), Mixtral; fp32, pure
# bf16 / fp16, AMP bf16 / fp16, SDPA and eager attention, a 300-token generation.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh generate_padded causal-lm --jobs 2 --timeout 3600 "$@"
