#!/usr/bin/env bash
# Measures the generation truth cases of the Mixture-of-Experts decoders (Mixtral, Qwen3-MoE:
# validation/cases_generate_moe.jsonl, `model.generate` with the KV cache, models in
# validation/generate_models.py: the prefill runs the experts as `grouped_mm`, the decode steps as
# `batched_mm`) with ../shared/truth and writes fixtures/truth/hf_generate_moe.jsonl (the format of
# hf_generate.jsonl). About 3 minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh generate_moe causal-lm --jobs 2 --timeout 3600
