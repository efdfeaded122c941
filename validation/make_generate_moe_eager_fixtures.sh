#!/usr/bin/env bash
# Measures validation/cases_generate_moe_eager.jsonl with ../shared/truth and writes
# fixtures/truth/hf_generate_moe_eager.jsonl: `model.generate()` of the Mixture-of-Experts decoders
# with `attn_implementation="eager"` (Mixtral, past a sliding window of 64 too, Qwen3-MoE,
# Qwen2-MoE): the additive masks over the cache and the `[B, H, q, kv]` scores each step, fp32,
# bf16, fp16 and AMP bf16.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX= exec validation/make_py_fixtures.sh generate_moe_eager causal-lm --jobs 1 "$@"
