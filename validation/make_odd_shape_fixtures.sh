#!/usr/bin/env bash
# Measures truth cases with odd batches and sequence lengths across the families
# (validation/cases_odd_shapes.jsonl: batches of 3, 5 and 7, sequences from 1 to 2049 that are not
# powers of two, a sliding window exceeded, fp32, AMP bf16/fp16, checkpointing, inference) with
# ../shared/truth and writes fixtures/truth/hf_odd_shapes.jsonl. Gemma2 runs through
# validation/hf_attn_models.py (eager attention, as transformers runs it); generation, eager,
# LoRA and T5 cases through the py: factories of validation/.
PREFIX= exec "$(dirname "$0")/make_py_fixtures.sh" odd_shapes causal-lm --jobs 2 "$@"
