#!/usr/bin/env bash
# Measures truth cases on two more real checkpoints' configs at full depth
# (validation/cases_unseen_small.jsonl: Gemma-3-270M, whose 4 heads of 256 make q wider than
# its hidden 640, with a sliding window of 512 and a 262,144-token vocabulary, and Qwen3-0.6B,
# from their config.json in fixtures/hf/unseen/) with ../shared/truth and writes
# fixtures/truth/hf_unseen_small.jsonl.
PREFIX= exec "$(dirname "$0")/make_py_fixtures.sh" unseen_small causal-lm --jobs 2 "$@"
