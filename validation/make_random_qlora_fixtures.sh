#!/usr/bin/env bash
# Measures the 16 random causal LMs loaded in 4 bits (NF4, double quantization or not) with QLoRA
# adapters on random targets, or without adapters for inference, of
# validation/cases_random_qlora.jsonl (written by `validation/random_configs.py 1800 --truth 16
# --qlora --write-cases random_qlora`; fixtures/hf/random/s1800_*) with ../shared/truth and
# writes fixtures/truth/hf_random_qlora.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh random_qlora causal-lm --jobs 2 "$@"
