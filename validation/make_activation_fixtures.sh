#!/usr/bin/env bash
# Measures validation/cases_activations.jsonl with ../shared/truth and writes
# fixtures/truth/hf_activations.jsonl: each family with an activation other than its default
# (transformers' ACT2FN names; the configs and cases come from
# validation/make_activation_configs.py), in training and inference under fp32, bf16 and
# autocast.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=hf: exec validation/make_py_fixtures.sh activations causal-lm --jobs 2 "$@"
