#!/usr/bin/env bash
# Measures validation/cases_moe_sliding.jsonl with ../shared/truth and writes
# fixtures/truth/hf_moe_sliding.jsonl: the Qwen MoE decoders with `use_sliding_window` and a
# window of 64 (Qwen2-MoE: layers 0 and 2 slide, the `(i + 1)`-odd layers below
# `max_window_layers`; Qwen3-MoE: every layer), inside and past the window: training (fp32, AMP,
# checkpointed AMP fp16, eager AMP bf16), `model.generate()` with their sliding cache layers
# (SDPA and eager, fp32 / bf16 / fp16 / AMP bf16, a left-padded batch) and the bare model's
# forward, whose `use_cache` fills the same caches.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX= exec validation/make_py_fixtures.sh moe_sliding causal-lm --jobs 1 "$@"
