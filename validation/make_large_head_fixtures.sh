#!/usr/bin/env bash
# Measures validation/cases_large_heads.jsonl with ../shared/truth and writes
# fixtures/truth/hf_large_heads.jsonl: full-width per-token heads and bare models drawn by
# `validation/random_configs.py SEED --truth K --large --heads` (fixtures/hf/random/s2640_7_*,
# s2634_8_*): a bare BertModel (hidden 8192, a 256k vocabulary) in AMP fp16 inference, whose
# `embedding_output` stays a local of the model's forward until after the pooler (its peak was
# -0.12% before), and a Llama token classifier trained in float32 at 4096 tokens, whose base
# model fills a cache while training.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX= exec validation/make_py_fixtures.sh large_heads token-cls --jobs 2 "$@"
