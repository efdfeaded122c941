#!/usr/bin/env bash
# Measures truth cases on the GGUF checkpoints of fixtures/weights/gguf/ (written by
# validation/make_gguf_model_fixtures.py): ../shared/truth runs the config transformers rebuilds
# from each file (`NAME.json` beside it; Gemma2 through validation/hf_attn_models.py, eager as
# transformers runs it), vramscope reads the `.gguf` itself (each case's `vramscope` entry), and
# the result goes to fixtures/truth/hf_gguf.jsonl.
PREFIX= exec "$(dirname "$0")/make_py_fixtures.sh" gguf causal-lm --jobs 2 "$@"
