#!/usr/bin/env bash
# Measures validation/cases_cross_attention_generate.jsonl (GPT-2 with add_cross_attention,
# `model.generate()` through validation/generate_models.py) with ../shared/truth and writes
# fixtures/truth/hf_cross_attention_generate.jsonl: the unused cross-attention layers' parameters
# and the EncoderDecoderCache whose cross-attention half stays empty.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh cross_attention_generate causal-lm --jobs 2 "$@"
