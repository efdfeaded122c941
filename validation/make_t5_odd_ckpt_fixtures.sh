#!/usr/bin/env bash
# Measures validation/cases_t5_odd_ckpt.jsonl (`validation/random_configs.py 3123 --truth 16 --t5
# --odd-heads --pad --write-cases t5_odd_ckpt --only 4,13`: two checkpointed mT5 steps whose d_kv,
# 6 and 10, runs the SDPA math fallback) with ../shared/truth and writes
# fixtures/truth/hf_t5_odd_ckpt.jsonl. vramscope's allocated memory is exact in every phase; its
# reserved memory is 14% and 25% low: the recomputation's stop releases the block's remaining
# locals in another order than Python's frames do (innermost frame first, each frame's locals in
# order), which the fused kernels' smaller blocks happen not to show.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh t5_odd_ckpt seq2seq-lm --jobs 2 "$@"
