#!/usr/bin/env bash
# Measures validation/cases_generate_eager_window.jsonl with ../shared/truth and writes
# fixtures/truth/hf_generate_eager_window.jsonl: `model.generate()` with eager attention past the
# sliding window (Gemma2, which always runs eager, Mistral, Gemma3 and Phi-3 with
# `attn_implementation="eager"`, each with `sliding_window: 64`; Gemma-2-2B and Mistral-7B at
# their real 4096, two layers deep): the sliding layers' float masks
# over the cache's last `w - 1` positions plus the new ones, fp32, bf16 and AMP bf16.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX= exec validation/make_py_fixtures.sh generate_eager_window causal-lm --jobs 1 "$@"
