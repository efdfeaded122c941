#!/usr/bin/env bash
# Measures the eager-attention truth cases (validation/cases_eager.jsonl: HF models built with
# attn_implementation="eager", model `eager` in validation/generate_models.py; measure.py's hf:
# loader sets sdpa after --config-overrides, so the override cannot select eager there) with
# ../shared/truth and writes fixtures/truth/hf_eager.jsonl (compact format plus `model`, the
# config vramscope reads, and `extra_args`: --attn-implementation eager).
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh eager causal-lm --jobs 2
