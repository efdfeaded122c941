#!/usr/bin/env bash
# Measures validation/cases_generate_4bit.jsonl with ../shared/truth and writes
# fixtures/truth/hf_generate_4bit.jsonl: `model.generate` of causal LMs loaded in 4 bits
# (validation/qlora_models.py:generate_4bit: bitsandbytes' NF4 storage and `MatMul4Bit` written
# with plain torch ops, as the QLoRA fixtures; vramscope with --load-in-4bit), with the KV cache
# and without it (`use_cache: false`): Qwen2 and Llama 3.2 in pure bf16 and fp32, with and without
# double quantization, and GPT-2 (its Conv1D layers quantized) generating 300 tokens without a
# cache past the step budget.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh generate_4bit causal-lm --jobs 3 "$@"
