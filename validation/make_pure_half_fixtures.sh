#!/usr/bin/env bash
# Measures validation/cases_pure_half.jsonl with ../shared/truth and writes
# fixtures/truth/hf_pure_half.jsonl: pure float16 / bfloat16 models (`model.half()`,
# `model.bfloat16()`). Under `attn_implementation="eager"` their `softmax(scores,
# dtype=torch.float32)` reads float16 scores straight into a float32 output (`half_to_float`, no
# float32 copy; bfloat16 ones are copied first): training, checkpointing and inference of the
# Llama family, Gemma2, Gemma3, OPT and Mixtral, and generations (past a sliding window too).
# Checkpointed layers (SDPA and eager): the checkpoint frame goes with the last saved tensor, in
# the norm's `PowBackward0` here, not at the layer's first node (`ToCopyBackward0` saves nothing).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=fixtures/truth/hf_pure_half.jsonl PREFIX= exec validation/make_py_fixtures.sh pure_half causal-lm --jobs 1 "$@"
