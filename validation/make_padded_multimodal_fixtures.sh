#!/usr/bin/env bash
# Measures validation/cases_padded_multimodal.jsonl with ../shared/truth and writes
# fixtures/truth/hf_padded_multimodal.jsonl: Gemma3ForConditionalGeneration (gemma-3-4b-it cut to
# 6 layers) trained and run on padded text batches (validation/multimodal_models.py:
# gemma3_text_only with `pad`): AMP bf16, pure bf16 inference, fp32 with checkpointing and eager
# attention.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh padded_multimodal causal-lm --jobs 2 "$@"
