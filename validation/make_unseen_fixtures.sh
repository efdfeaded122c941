#!/usr/bin/env bash
# Measures truth cases on real checkpoints' configs that are not built in
# (validation/cases_unseen.jsonl: SmolLM2-135M, RoBERTa-large and OPT-350m whole; Qwen1.5-MoE-A2.7B,
# Llama-3.1-8B, Mixtral-8x22B, Gemma-2-27b, flan-t5-base and Phi-4-mini cut to 2 layers in
# fixtures/hf/configs/) with ../shared/truth and writes fixtures/truth/hf_unseen.jsonl. Gemma2 runs
# through validation/hf_attn_models.py (eager attention, as transformers runs it) and T5 through
# validation/t5_models.py; each case's `vramscope` entry says what vramscope reads.
PREFIX= exec "$(dirname "$0")/make_py_fixtures.sh" unseen causal-lm --jobs 2 "$@"
