#!/usr/bin/env bash
# Measures validation/cases_generate_padded_window.jsonl with ../shared/truth and writes
# fixtures/truth/hf_generate_padded_window.jsonl: left-padded `model.generate()` past a sliding
# window of 64 (Mistral, Phi-3, Gemma3, Gemma2, Qwen2's sliding layers, Mixtral; SDPA and eager;
# fp32, bf16, AMP bf16): the boolean copy of the `[B, total]` attention mask, the sliding layers'
# masks over the cache's last `w - 1` positions and the new ones.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX= exec validation/make_py_fixtures.sh generate_padded_window causal-lm --jobs 1 "$@"
