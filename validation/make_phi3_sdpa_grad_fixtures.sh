#!/usr/bin/env bash
# Measures validation/cases_phi3_sdpa_grads.jsonl (a random Phi-3 token classifier under AMP fp16
# and SDPA, whose q, k and v gradients cuDNN attention returns heads-first) with ../shared/truth
# and writes fixtures/truth/hf_phi3_sdpa_grads.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh phi3_sdpa_grads token-cls "$@"
