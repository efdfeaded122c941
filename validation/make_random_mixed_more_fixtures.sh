#!/usr/bin/env bash
# Measures the random configs of validation/cases_random_mixed_more.jsonl (written by
# `validation/random_configs.py 2991 --truth 14 --knobs --dropouts --half --nulls --write-cases
# random_mixed_more`, drawn as make_random_mixed_fixtures.sh's; fixtures/hf/random/s2991_*) with
# ../shared/truth and writes fixtures/truth/hf_random_mixed_more.jsonl. Case 2 is left out: its
# XLM-RoBERTa config has `"pad_token_id": null`, which transformers' forward fails on and
# vramscope refuses (hf_config.rs, roberta_needs_a_pad_token_id).
PREFIX= exec "$(dirname "$0")/make_py_fixtures.sh" random_mixed_more causal-lm --jobs 2 "$@"
