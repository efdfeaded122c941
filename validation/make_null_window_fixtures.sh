#!/usr/bin/env bash
# Measures validation/cases_null_window.jsonl (fixtures/hf/configs/*_null_window.json: Qwen3-MoE and
# Qwen2 with use_sliding_window true and "sliding_window": null, 4200 tokens) with ../shared/truth
# and writes fixtures/truth/hf_null_window.jsonl: a null window stays None in their config classes
# (no window, the causal mask), not the default 4096; Qwen3-MoE was read as 4096 before (+117% on
# the inference peak).
PREFIX= exec "$(dirname "$0")/make_py_fixtures.sh" null_window causal-lm --jobs 2 "$@"
