#!/usr/bin/env bash
# Measures the 12 random causal LMs of checkpoint-like widths loaded in 4 bits (NF4, double
# quantization or not) with QLoRA adapters on random targets, or without adapters for inference,
# of validation/cases_random_qlora_medium.jsonl (written by `validation/random_configs.py 2508
# --truth 12 --qlora --medium --write-cases random_qlora_medium`; fixtures/hf/random/s2508_*)
# with ../shared/truth and writes fixtures/truth/hf_random_qlora_medium.jsonl. Among them a
# Qwen3 under AMP bf16 and a Gemma3 under AMP fp16: their 4-bit projections return float32,
# which their q/k norms and Gemma3's post-feed-forward norm read.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh random_qlora_medium causal-lm --jobs 2 "$@"
