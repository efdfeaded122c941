#!/usr/bin/env bash
# Measures the Gemma decoders run as their bare model (validation/cases_gemma_features.jsonl:
# EmbeddingGemma-300m's Gemma3TextModel with bidirectional attention at full depth and cut to 2
# layers, in fp32, bf16 and fp16 weights, AMP and eager attention; the causal Gemma3TextModel;
# Gemma-3-1B, Gemma-2B and Gemma-2-2B's bare models; validation/encoder_head_models.py:
# feature_extraction builds them) with ../shared/truth and writes
# fixtures/truth/hf_gemma_features.jsonl. With use_bidirectional_attention the mask code passes an
# or_mask_function, so both masks are built through torch.vmap and always materialized, and SDPA
# runs masked on every layer.
PREFIX= exec "$(dirname "$0")/make_py_fixtures.sh" gemma_features feature-extraction --jobs 2 "$@"
