#!/usr/bin/env bash
# Measures training and inference on padded batches (validation/cases_padded.jsonl: the batch's
# attention_mask passed to the model, built by validation/padding_models.py; Llama 3.2, Mistral
# past its sliding window, Phi-3, Qwen2 (an unaligned length, AMP fp16, sequence
# classification), Qwen3 in bf16, Mixtral with and without a window, Qwen2-MoE, Gemma, Gemma3, GPT-2, OPT;
# BERT, RoBERTa, XLM-RoBERTa, DistilBERT; eager Llama 3.2, Qwen3, Phi-3; checkpointing,
# inference) with ../shared/truth and writes fixtures/truth/hf_padded.jsonl (~2 min). vramscope
# runs them with --padded.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh padded causal-lm --jobs 2
