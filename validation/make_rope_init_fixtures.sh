#!/usr/bin/env bash
# Measures validation/cases_rope_init.jsonl (fixtures/hf/rope/: Llama and Mistral with linear rope
# scaling, Qwen2 with yarn) with ../shared/truth and writes fixtures/truth/hf_rope_init.jsonl: the
# model phase computes `inv_freq` by the rope type's own steps (layers::ROPE_INIT_LINEAR,
# ROPE_INIT_YARN), which the model phase's peak shows on a small model.
PREFIX= exec "$(dirname "$0")/make_py_fixtures.sh" rope_init causal-lm --jobs 2 "$@"
