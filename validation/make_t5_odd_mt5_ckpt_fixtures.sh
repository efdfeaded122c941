#!/usr/bin/env bash
# Measures validation/cases_t5_odd_mt5_ckpt.jsonl (`validation/random_configs.py 3233 --truth 16
# --t5 --odd-heads --half --dropouts --write-cases t5_odd_mt5_ckpt --only 11`: a checkpointed mT5
# step at batch 4 in AMP bf16 whose d_kv, 10, runs the SDPA math fallback) with ../shared/truth and
# writes fixtures/truth/hf_t5_odd_mt5_ckpt.jsonl. Allocated memory is exact in every phase;
# reserved is 4% high, a known gap: the math fallback's `AddBackward0` sums the broadcast position
# bias's gradient to [1, H, L, S] and casts it before the last bmm, where vramscope hands the
# scores' gradient on and sums it after the node (the fused kernels' ExpandBackward0).
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh t5_odd_mt5_ckpt seq2seq-lm --jobs 2 "$@"
