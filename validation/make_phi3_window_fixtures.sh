#!/usr/bin/env bash
# Measures validation/cases_phi3_window.jsonl with ../shared/truth and writes
# fixtures/truth/hf_phi3_window.jsonl: Phi-3 past its sliding window under AMP, where
# sdpa_attention_forward repeats k and v for the masked kernel and copies the output
# (`.transpose(1, 2).contiguous()`) while the repeated k and v are still its locals: a token
# classifier of full width at 4096 tokens (validation/random_configs.py 2626 --large --heads,
# case 4; its reserved peak was +0.05% before), the 2-layer Phi-3 mini past a 64-token window and
# at 4096 tokens (window 2047).
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX= exec validation/make_py_fixtures.sh phi3_window causal-lm --jobs 2 "$@"
