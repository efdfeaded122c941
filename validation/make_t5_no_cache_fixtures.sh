#!/usr/bin/env bash
# Measures validation/cases_t5_no_cache.jsonl with ../shared/truth and writes
# fixtures/truth/hf_t5_no_cache.jsonl: an encoder-decoder's `model.generate` with the config's
# `use_cache` false (validation/t5_models.py:generate with overrides {"use_cache": false};
# vramscope with --use-cache false), so that generate() keeps no cache and every decoder forward
# runs over the whole decoder sequence so far, the cross-attention's keys and values made anew:
# T5 in fp32, pure bf16 / fp16, AMP bf16 / fp16, eager attention, a left-padded prompt batch,
# FLAN-T5, mT5, UMT5, t5-small at full depth, and a 300-token generation past the step budget.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh t5_no_cache seq2seq-lm --jobs 3 "$@"
