#!/usr/bin/env bash
# Measures truth cases on configs whose fields change the model transformers builds from the
# defaults the built-in configs use (validation/cases_config_variants.jsonl: BERT, RoBERTa and
# DistilBERT masked LMs cut to 2 layers with `tie_word_embeddings: false`, so the MLM decoder keeps
# its own weight and bias) with ../shared/truth and writes fixtures/truth/hf_config_variants.jsonl.
PREFIX= exec "$(dirname "$0")/make_py_fixtures.sh" config_variants masked-lm --jobs 2 "$@"
