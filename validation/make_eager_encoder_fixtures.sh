#!/usr/bin/env bash
# Measures eager attention for the encoder families (validation/cases_eager_encoders.jsonl: BERT
# masked-LM and sequence classification, RoBERTa, DistilBERT, built with
# attn_implementation="eager" by validation/generate_models.py's `eager_encoder`, and T5 / FLAN-T5
# by validation/t5_models.py's `t5` with attn="eager") with ../shared/truth and writes
# fixtures/truth/hf_eager_encoders.jsonl (each case's --task from its `vramscope` entry).
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh eager_encoders masked-lm --jobs 2 "$@"
