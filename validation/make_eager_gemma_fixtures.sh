#!/usr/bin/env bash
# Measures eager attention for Gemma and Gemma3 (Gemma2 always runs it: hf_families.jsonl)
# (validation/cases_eager_gemma.jsonl: fp32 and AMP bf16 AdamW, Gemma3 past its 512-token sliding
# window at 640, fp32 inference) with ../shared/truth and writes fixtures/truth/hf_eager_gemma.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh eager_gemma causal-lm --jobs 2
