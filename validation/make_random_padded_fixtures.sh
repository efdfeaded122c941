#!/usr/bin/env bash
# Measures the 24 random causal LMs on padded batches (SDPA or eager attention, every causal
# family, Gemma2 always eager) of validation/cases_random_padded.jsonl (written by
# `validation/random_configs.py 1902 --truth 24 --padded --write-cases random_padded`;
# fixtures/hf/random/s1902_*) with ../shared/truth and writes fixtures/truth/hf_random_padded.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh random_padded causal-lm --jobs 2 "$@"
