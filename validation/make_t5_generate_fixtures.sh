#!/usr/bin/env bash
# Measures validation/cases_t5_generate.jsonl with ../shared/truth and writes
# fixtures/truth/hf_t5_generate.jsonl: `model.generate(input_ids, do_sample=False,
# max_new_tokens=N)` of encoder-decoders (validation/t5_models.py:generate): T5, FLAN-T5 (gated),
# mT5 and UMT5 (a bias per layer), in fp32, pure bf16 / fp16, AMP bf16 / fp16, SDPA and eager
# attention, a left-padded prompt batch, and t5-small at 512 prompt tokens.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh t5_generate seq2seq-lm --jobs 3 "$@"
