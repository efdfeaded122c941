#!/usr/bin/env bash
# Measures the 30 random configs of validation/cases_random_more.jsonl (written by
# `validation/random_configs.py 1123 --truth 30 --write-cases random_more`, drawn as
# make_random_fixtures.sh's; fixtures/hf/random/s1123_*) with ../shared/truth and writes
# fixtures/truth/hf_random_more.jsonl.
PREFIX= exec "$(dirname "$0")/make_py_fixtures.sh" random_more causal-lm --jobs 2 "$@"
