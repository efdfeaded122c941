#!/usr/bin/env bash
# Measures sequence classification with the decoder-only families (validation/cases_seq_cls.jsonl:
# `{Llama,GPT2,OPT,Qwen2,Qwen3,Mistral,Phi3,Gemma,Gemma2,Gemma3,Mixtral,Qwen3Moe}ForSequenceClassification`
# through validation/hf_attn_models.py's `seq_cls`: with and without a pad token, fp32, AMP bf16 and
# fp16, checkpointing, inference, eager attention) with ../shared/truth and writes
# fixtures/truth/hf_seq_cls.jsonl.
PREFIX= exec "$(dirname "$0")/make_py_fixtures.sh" seq_cls seq-cls --jobs 2 "$@"
