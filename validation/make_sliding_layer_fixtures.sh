#!/usr/bin/env bash
# Measures validation/cases_sliding_layers.jsonl with ../shared/truth and writes
# fixtures/truth/hf_sliding_layers.jsonl: Qwen2 with `use_sliding_window` (layers from
# `max_window_layers` on slide) and Qwen3 with `layer_types`, a window of 64: `model.generate()`
# with per-layer caches (sliding layers keep their last `w - 1` positions, full ones all; SDPA
# and eager, fp32, bf16, fp16, AMP bf16) and the bare models' forward, whose `use_cache` fills
# the same caches.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX= exec validation/make_py_fixtures.sh sliding_layers causal-lm --jobs 1 "$@"
