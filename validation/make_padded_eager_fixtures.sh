#!/usr/bin/env bash
# Measures validation/cases_padded_eager.jsonl with ../shared/truth and writes
# fixtures/truth/hf_padded_eager.jsonl: eager attention's additive masks in pure bf16 (GPT-2 and
# OPT unpadded, whose `where` scalars take the embeddings' dtype; a Llama padded batch), and padded
# batches with several mask patterns (Qwen2's full and sliding layers) or past a sliding window
# (Mixtral), each pattern's mask made from the batch's `attention_mask`; the encoders' padded
# batches (BERT, RoBERTa, XLM-RoBERTa, DistilBERT: the cases of cases_padded.jsonl) with eager
# attention, whose additive bidirectional mask every layer adds to its scores.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh padded_eager causal-lm --jobs 2 "$@"
