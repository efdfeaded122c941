#!/usr/bin/env bash
# Measures validation/cases_generate_eager_mqa.jsonl with ../shared/truth and writes
# fixtures/truth/hf_generate_eager_mqa.jsonl: eager-attention `model.generate()` of models with one
# kv head (a Mistral drawn by random_configs.py seed 2851, Gemma 2B) at batch 2 and 4. Under AMP
# the cache's values are float32 (they follow its keys), so autocast's cast of the expanded values
# is the contiguous copy `probs @ v` needs; in a pure bf16 model matmul copies them itself.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX= exec validation/make_py_fixtures.sh generate_eager_mqa causal-lm --jobs 1 "$@"
