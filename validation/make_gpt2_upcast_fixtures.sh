#!/usr/bin/env bash
# Measures validation/cases_gpt2_upcast.jsonl with ../shared/truth and writes
# fixtures/truth/hf_gpt2_upcast.jsonl: GPT-2 with `reorder_and_upcast_attn` under eager
# attention, which runs `_upcast_and_reordered_attn` (a float32 `baddbmm` of copied q and k with
# autocast off): training in fp32, AMP bf16 and fp16, pure bf16, checkpointed; inference; and
# `model.generate()` in fp32, AMP bf16 and fp16.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh gpt2_upcast causal-lm --jobs 1 "$@"
