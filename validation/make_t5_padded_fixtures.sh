#!/usr/bin/env bash
# Measures validation/cases_t5_padded.jsonl with ../shared/truth and writes
# fixtures/truth/hf_t5_padded.jsonl: T5, FLAN-T5, mT5 and UMT5 trained (or evaluated) on padded
# batches as DataCollatorForSeq2Seq makes them (validation/t5_models.py:t5 with `pad`: input_ids,
# the attention_mask, labels), SDPA and eager: the encoder's padded self-attention mask and the decoder's
# cross-attention one folded into every layer's position-bias mask (`[B, H, L, S]`); AMP bf16 /
# fp16, pure bf16, checkpointing, inference, and T5EncoderModel's padded features.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh t5_padded seq2seq-lm --jobs 2 "$@"
