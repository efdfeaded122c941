#!/usr/bin/env bash
# Measures validation/cases_router_logits.jsonl with ../shared/truth and writes
# fixtures/truth/hf_router_logits.jsonl: Qwen3-MoE, Qwen2-MoE (causal LM and sequence
# classifier) and Mixtral configs with `output_router_logits: true`, whose output keeps every
# router's logits until the forward returns and whose causal LM computes the load-balancing
# loss from them (its graph dropped with the output: measure.py's loss reads the logits only);
# training (AMP bf16 / fp16, fp32, pure bf16, checkpointing), inference, a generation and a
# padded batch.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX= exec validation/make_py_fixtures.sh router_logits causal-lm --jobs 2 "$@"
