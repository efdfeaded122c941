#!/usr/bin/env bash
# Measures LoRA / freeze truth cases (models in validation/lora_models.py) with ../shared/truth and
# writes the compact fixture: the format of compact_results.py plus `model` (the config vramscope
# reads) and `extra_args` (its flags).
#   validation/make_lora_fixtures.sh                  # cases_lora.jsonl -> fixtures/truth/hf_lora.jsonl
#   validation/make_lora_fixtures.sh lora_gpt2        # cases_lora_gpt2.jsonl -> hf_lora_gpt2.jsonl
#   validation/make_lora_fixtures.sh lora_upcast      # bf16 models, PEFT's float32 adapters
#   MEASURE=0 validation/make_lora_fixtures.sh lora_gpt2   # convert .truth/raw/*_results.jsonl only
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh "${1:-lora}" causal-lm
