#!/usr/bin/env bash
# Measures the encoders' per-token heads (validation/cases_encoder_heads.jsonl: BERT base and
# large, RoBERTa base and DistilBERT as {X}ForTokenClassification, the loss through
# model.loss_function outside the forward, and {X}ForQuestionAnswering, the loss computed by the
# forward from start/end positions, and the bare {X}Model in inference, all-MiniLM-L6-v2's
# BertModel among them; validation/encoder_head_models.py builds them) with
# ../shared/truth and writes fixtures/truth/hf_encoder_heads.jsonl.
PREFIX= exec "$(dirname "$0")/make_py_fixtures.sh" encoder_heads masked-lm --jobs 2 "$@"
