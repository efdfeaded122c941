#!/usr/bin/env bash
# Measures validation/cases_head_dims_more.jsonl with ../shared/truth and writes
# fixtures/truth/hf_head_dims_more.jsonl: the head-dim configs of make_head_dims_fixtures.sh in
# `model.generate` (decode steps through padded flash attention, the math fallback, and one query
# over GQA heads past a head dim of 256) and on padded batches (a mask rules flash attention out:
# half precision with a head dim that is not a multiple of 8 runs the math fallback).
exec "$(dirname "$0")/make_py_fixtures.sh" head_dims_more causal-lm --jobs 2 "$@"
