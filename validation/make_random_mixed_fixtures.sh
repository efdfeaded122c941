#!/usr/bin/env bash
# Measures the 12 random configs of validation/cases_random_mixed.jsonl (written by
# `validation/random_configs.py 2990 --truth 12 --knobs --dropouts --half --nulls --write-cases
# random_mixed`: every field draw at once, pure fp16 / bf16 parameters; fixtures/hf/random/s2990_*)
# with ../shared/truth and writes fixtures/truth/hf_random_mixed.jsonl. Case 5 (Phi-3 with
# resid_pdrop, checkpointed) reserved +33% before the residual dropouts kept the attention's and
# the MLP's outputs until the sum was bound.
PREFIX= exec "$(dirname "$0")/make_py_fixtures.sh" random_mixed causal-lm --jobs 2 "$@"
