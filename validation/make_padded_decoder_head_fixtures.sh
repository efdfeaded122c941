#!/usr/bin/env bash
# Measures validation/cases_padded_decoder_heads.jsonl with ../shared/truth and writes
# fixtures/truth/hf_padded_decoder_heads.jsonl: the token-classification and question-answering
# cases of cases_decoder_heads.jsonl (the Llama family, Gemma, Gemma2, the MoE decoders, GPT-2,
# OPT; with and without the cache the heads' base model fills, SDPA or eager) on padded batches
# (validation/encoder_head_models.py with `pad`).
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh padded_decoder_heads token-cls --jobs 2 "$@"
