#!/usr/bin/env bash
# Measures validation/cases_random_t5_odd_heads.jsonl (`validation/random_configs.py 3104 --truth 16
# --t5 --odd-heads --pad --write-cases random_t5_odd_heads`: random T5 / mT5 / UMT5 steps whose
# d_kv is 6, 10 or 12, so that their attention runs flash attention on padded copies or, with the
# position bias as a mask, the math fallback) with ../shared/truth and writes
# fixtures/truth/hf_random_t5_odd_heads.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh random_t5_odd_heads seq2seq-lm --jobs 2 "$@"
