#!/usr/bin/env bash
# Measures validation/cases_head_dims.jsonl (fixtures/hf/configs/*_head_dim_*.json: Llama, GPT-2,
# BERT and Qwen2 whose head dims no fused attention kernel takes as they are: 12, 10 and 6, and
# 264) with ../shared/truth and writes fixtures/truth/hf_head_dims.jsonl. In half precision flash
# attention runs on copies of q, k and v padded to a multiple of 8; in float32 a head dim that is
# not a multiple of 4 runs the math fallback; past 256 half precision runs mem-efficient attention
# (validation/sdpa_choice.py prints torch's own choice).
PREFIX= exec "$(dirname "$0")/make_py_fixtures.sh" head_dims causal-lm --jobs 2 "$@"
