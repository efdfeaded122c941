#!/usr/bin/env bash
# Measures truth cases on more real checkpoints' shapes that are not built in, each cut to 2
# layers (validation/cases_unseen_shapes.jsonl: Mistral-NeMo with head_dim 128 under 5120 / 32
# heads, Qwen3-30B-A3B (128 experts, top 8), Qwen2-57B-A14B (64 experts and a 20480-wide shared
# expert), Phi-3-medium (40 heads over 10 KV heads), Gemma-3-4B's text model, Phi-3.5-mini with
# longrope scaling, a Llama with attention and MLP biases, T5-11B (128 heads of d_kv 128)) with
# ../shared/truth and writes fixtures/truth/hf_unseen_shapes.jsonl. T5 runs through
# validation/t5_models.py; each case's `vramscope` entry says what vramscope reads.
PREFIX= exec "$(dirname "$0")/make_py_fixtures.sh" unseen_shapes causal-lm --jobs 2 "$@"
