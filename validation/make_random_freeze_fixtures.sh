#!/usr/bin/env bash
# Measures the 16 random causal LMs of validation/cases_random_freeze.jsonl (written by
# `validation/random_configs.py 2610 --truth 16 --freeze --write-cases random_freeze`;
# fixtures/hf/random/s2610_*), each trained with the parameters of 1-3 random name patterns frozen
# (validation/lora_models.py:freeze; vramscope's `--freeze`), some checkpointed, with
# ../shared/truth and writes fixtures/truth/hf_random_freeze.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh random_freeze causal-lm --jobs 2 "$@"
