#!/usr/bin/env bash
# Measures the 32 random causal LMs of validation/cases_random_eager.jsonl under
# attn_implementation="eager" (written by `validation/random_configs.py 1725 --truth 16 --eager
# --write-cases random_eager`, then seed 1726's 16 appended the same way; fixtures/hf/random/s1725_*,
# s1726_*) with ../shared/truth and writes fixtures/truth/hf_random_eager.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh random_eager causal-lm --jobs 2 "$@"
