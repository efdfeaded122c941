#!/usr/bin/env bash
# Measures the decoders' bare models that the Llama family's and Gemma's fixtures do not cover
# (validation/cases_bare_decoders.jsonl: GPT2Model, OPTModel, MixtralModel, Qwen2MoeModel,
# Qwen3MoeModel, from AutoModel as validation/encoder_head_models.py's feature_extraction builds
# them, in inference: `out = model(input_ids=x)`, the last hidden state and the DynamicCache the
# config's use_cache fills, kept until the next forward returns) with ../shared/truth and writes
# fixtures/truth/hf_bare_decoders.jsonl.
PREFIX= exec "$(dirname "$0")/make_py_fixtures.sh" bare_decoders feature-extraction --jobs 2 "$@"
