#!/usr/bin/env bash
# Measures truth cases on built-in zoo checkpoints at their full depth and real sizes
# (validation/cases_full_depth.jsonl: Llama-3.2-1B, Qwen2.5-0.5B, Qwen3-0.6B, Llama-3-8B, Llama-2-13B,
# Qwen2.5-14B, Llama-3-70B, Mistral-7B, Gemma-2-2B/9B, Gemma-3-1B, Phi-3-mini, GPT-2 large and XL,
# OPT-1.3B, BERT-large, RoBERTa-base, Qwen2.5-7B/72B, Llama-2-70B, Mixtral-8x7B and FLAN-T5-base;
# training in fp32 and AMP, checkpointing, inference in bf16, generation) with ../shared/truth and writes
# fixtures/truth/hf_full_depth.jsonl. The other sets cut most models to two layers; these cases
# check what only a full stack shows (the allocator's segments over dozens of layers, 128k-
# vocabulary losses, gigabyte gradients, caches of 32-80 layers). Gemma-2 runs through
# validation/hf_attn_models.py (eager attention), generations through validation/generate_models.py
# (FLAN-T5's through validation/t5_models.py:generate, its task seq2seq-lm in its vramscope entry).
# About 15 minutes with 2 jobs (the generations are most of it).
PREFIX= exec "$(dirname "$0")/make_py_fixtures.sh" full_depth causal-lm --jobs 2 "$@"
