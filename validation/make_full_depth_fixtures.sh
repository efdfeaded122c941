#!/usr/bin/env bash
# Measures truth cases on built-in zoo checkpoints at their full depth and real sizes
# (validation/cases_full_depth.jsonl: Llama-3.2-1B, Qwen2.5-0.5B, Qwen3-0.6B, Llama-3-8B,
# Mistral-7B, Gemma-2-2B, Gemma-3-1B, Phi-3-mini, GPT-2 large and XL, OPT-1.3B, BERT-large,
# Qwen2.5-7B and Mixtral-8x7B; training in fp32 and AMP, checkpointing, inference in bf16) with
# ../shared/truth and writes fixtures/truth/hf_full_depth.jsonl. The other sets cut most models
# to two layers; these cases check what only a full stack shows (the allocator's segments over
# dozens of layers, 128k-vocabulary losses, gigabyte gradients).
PREFIX= exec "$(dirname "$0")/make_py_fixtures.sh" full_depth causal-lm --jobs 2 "$@"
