#!/usr/bin/env bash
# Measures validation/cases_router_jitter.jsonl with ../shared/truth and writes
# fixtures/truth/hf_router_jitter.jsonl: the small Mixtral config with `router_jitter_noise: 0.1`
# (fixtures/hf/configs/mixtral_small_2l_jitter.json), whose sparse blocks multiply their input in
# place by uniform noise in training (kept for backward; nothing in eval): AMP bf16, fp32 and
# pure bf16 training, AMP bf16 inference, and LoRA (the frozen model's blocks still draw it).
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX= exec validation/make_py_fixtures.sh router_jitter causal-lm --jobs 2 "$@"
