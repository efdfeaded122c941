#!/usr/bin/env bash
# Measures the T5-family truth cases with ../shared/truth and writes the compact fixture: the format of
# compact_results.py plus `model` (the config vramscope reads), `task` and `extra_args` (its flags,
# e.g. --target-len). The measured step is validation/t5_models.py.
#   validation/make_t5_fixtures.sh                      # cases_t5.jsonl -> fixtures/truth/hf_t5.jsonl
#   validation/make_t5_fixtures.sh t5_variants          # cases_t5_variants.jsonl -> hf_t5_variants.jsonl
#   MEASURE=0 validation/make_t5_fixtures.sh t5_variants   # convert .truth/raw/*_results.jsonl only
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh "${1:-t5}" seq2seq-lm
