#!/usr/bin/env bash
# Measures the QLoRA / 4-bit truth cases (validation/cases_qlora.jsonl, models in
# validation/qlora_models.py: bitsandbytes' storage and kernels rewritten with plain torch ops, since
# bitsandbytes cannot run under the truth tool) with ../shared/truth and writes
# fixtures/truth/hf_qlora.jsonl: the compact format of compact_results.py plus `model` (the config
# vramscope reads) and `extra_args` (its flags).
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh qlora causal-lm
