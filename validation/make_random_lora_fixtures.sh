#!/usr/bin/env bash
# Measures the 32 random causal LMs with LoRA adapters (random targets, rank, dropout,
# checkpointing) of validation/cases_random_lora.jsonl (written by `validation/random_configs.py
# 1727 --truth 16 --lora --write-cases random_lora`, then seed 1726's 16 appended the same way;
# fixtures/hf/random/s1727_*, s1726_*) with
# ../shared/truth and writes fixtures/truth/hf_random_lora.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh random_lora causal-lm --jobs 2 "$@"
