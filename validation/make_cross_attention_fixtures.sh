#!/usr/bin/env bash
# Measures validation/cases_cross_attention.jsonl (fixtures/hf/configs/gpt2_cross_attention_2l.json:
# GPT-2 with add_cross_attention, run alone) with ../shared/truth and writes
# fixtures/truth/hf_cross_attention.jsonl: each block also holds `crossattention` and
# `ln_cross_attn`, created between ln_2 and mlp and never called without encoder_hidden_states
# (parameters without gradients or optimizer state).
PREFIX= exec "$(dirname "$0")/make_py_fixtures.sh" cross_attention causal-lm --jobs 2 "$@"
