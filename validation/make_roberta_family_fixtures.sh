#!/usr/bin/env bash
# Measures RoBERTa's copies under other names (validation/cases_roberta_family.jsonl: XLM-RoBERTa
# base as XLMRobertaForMaskedLM / ForSequenceClassification / ForQuestionAnswering, BGE-M3's bare
# XLMRobertaModel at 8192 tokens, CamemBERT base as CamembertForMaskedLM / ForSequenceClassification
# / ForTokenClassification, all cut to 2 layers in fixtures/hf/configs/) with ../shared/truth and
# writes fixtures/truth/hf_roberta_family.jsonl. The heads measure.py's hf: route has no task for
# run through validation/encoder_head_models.py; each case's `vramscope` entry says what vramscope
# reads.
PREFIX= exec "$(dirname "$0")/make_py_fixtures.sh" roberta_family masked-lm --jobs 2 "$@"
