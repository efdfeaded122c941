#!/usr/bin/env bash
# Measures the decoders' per-token heads (validation/cases_decoder_heads.jsonl: transformers'
# GenericForTokenClassification, dropout and `score`, the loss through model.loss_function outside
# the forward, and GenericForQuestionAnswering, `qa_outputs` and the loss the forward computes from
# start/end positions, on the Llama family (Llama, Mistral, Qwen2, Qwen3, Phi-3), the
# Mixture-of-Experts models, GPT-2 (its own two classes), OPT (question answering) and Gemma /
# Gemma2 (token classification), 2-layer configs from
# fixtures/hf/configs/ and Qwen2.5-0.5B whole;
# validation/encoder_head_models.py builds them, with the DynamicCache the config's use_cache
# fills) with ../shared/truth and writes fixtures/truth/hf_decoder_heads.jsonl.
PREFIX= exec "$(dirname "$0")/make_py_fixtures.sh" decoder_heads token-cls --jobs 2 "$@"
