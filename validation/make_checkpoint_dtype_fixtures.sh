#!/usr/bin/env bash
# Measures the `--weights-dtype from-files` truth cases (validation/cases_checkpoint_dtypes.jsonl,
# models in validation/checkpoint_models.py: parameters materialised in the dtypes of the checkpoint
# folders under fixtures/weights/) with ../shared/truth and writes
# fixtures/truth/hf_checkpoint_dtypes.jsonl: the compact format of compact_results.py plus `model`
# (the folder vramscope reads) and `extra_args` (its flags).
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh checkpoint_dtypes causal-lm
