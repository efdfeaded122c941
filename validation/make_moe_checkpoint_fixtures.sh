#!/usr/bin/env bash
# Measures validation/cases_moe_checkpoint.jsonl with ../shared/truth and writes
# fixtures/truth/hf_moe_checkpoint.jsonl: gradient-checkpointed Mixture-of-Experts training steps
# without bf16 autocast (fp32, AMP fp16, pure fp16; Mixtral, Qwen2-MoE, Qwen3-MoE, a top-1
# Mixtral), which measure.py's hf: route cannot measure (its first checkpointed MoE layer
# initializes the fake CUDA runtime, which torch.utils.checkpoint refuses):
# generate_models.py:cuda_initialized runs the same step with CUDA initialized first.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh moe_checkpoint causal-lm --jobs 1 "$@"
