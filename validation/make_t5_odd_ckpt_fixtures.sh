#!/usr/bin/env bash
# Measures validation/cases_t5_odd_ckpt.jsonl (`validation/random_configs.py 3123 --truth 16 --t5
# --odd-heads --pad --write-cases t5_odd_ckpt --only 4,13`: two checkpointed mT5 steps whose d_kv,
# 6 and 10, runs the SDPA math fallback) with ../shared/truth and writes
# fixtures/truth/hf_t5_odd_ckpt.jsonl. Their reserved memory was 14% and 25% low until the math
# fallback's backward released a recomputed node's saved tensors before its incoming gradient,
# left the key's gradient uncopied at its view and cast a bf16 mask's gradient before the last
# bmm (the thirty-first session); byte-exact in every phase since.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh t5_odd_ckpt seq2seq-lm --jobs 2 "$@"
