#!/usr/bin/env bash
# Measures validation/cases_padded_heads.jsonl with ../shared/truth and writes
# fixtures/truth/hf_padded_heads.jsonl: padded batches (validation/encoder_head_models.py with
# `pad`) through the encoders' per-token heads (token classification, question answering: BERT,
# RoBERTa, DistilBERT; AMP bf16 / fp16, fp32, checkpointing, bf16 inference) and the bare models
# in inference (BERT, RoBERTa, DistilBERT, GPT-2, Qwen2, Llama 3.2, with and without the cache the
# decoders fill; EmbeddingGemma's bidirectional masks, inside and past its window), SDPA or eager
# attention.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh padded_heads token-cls --jobs 2 "$@"
