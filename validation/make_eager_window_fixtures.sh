#!/usr/bin/env bash
# Measures validation/cases_eager_windows.jsonl (eager attention with a sliding window: Mixtral
# past it, Qwen2 with sliding layers, Mistral inside it; configs fixtures/hf/configs/*_tiny_window*)
# with ../shared/truth and writes fixtures/truth/hf_eager_windows.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh eager_windows causal-lm --jobs 2 "$@"
