#!/usr/bin/env bash
# Measures validation/cases_onnx_softmax.jsonl with ../shared/truth and writes
# fixtures/truth/onnx_softmax.jsonl: validation/onnx_models.py's `attn_text` (the text classifier
# with attention written out: `q @ k^T * scale`, a plain `softmax`, dropout, `@ v`), estimated from
# its export fixtures/onnx/attention_text_classifier.onnx. Under float16 autocast the softmax
# (`fp32_set_opt_dtype`) reads the half scores straight into a float32 output; under bfloat16 it
# casts them up first. fp32, AMP fp16 and bf16 AdamW, AMP fp16 SGD, AMP fp16 inference.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=fixtures/truth/onnx_softmax.jsonl exec validation/make_py_fixtures.sh onnx_softmax classification --jobs 1 "$@"
