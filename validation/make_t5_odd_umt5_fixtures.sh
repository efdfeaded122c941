#!/usr/bin/env bash
# Measures validation/cases_t5_odd_umt5.jsonl (`validation/random_configs.py 3233 --truth 16 --t5
# --odd-heads --half --dropouts --write-cases t5_odd_umt5 --only 10`: a UMT5 step at batch 2 in
# AMP bf16 whose d_kv, 10, runs the SDPA math fallback) with ../shared/truth and writes
# fixtures/truth/hf_t5_odd_umt5.jsonl. Its reserved memory was 17% low while the key's heads view
# passed its gradient on as it is: the k projection's matmul then copies it to rows
# (`UnsafeViewBackward0`), which a batch of one does not need.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh t5_odd_umt5 seq2seq-lm --jobs 2 "$@"
