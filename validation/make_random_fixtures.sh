#!/usr/bin/env bash
# Measures the random configs of validation/cases_random.jsonl (written by
# `validation/random_configs.py 11 --truth 60 --write-cases random`: 60 configs drawn from the
# built-in ones of every family measure.py's hf: route builds, their sizes, head layouts, kv heads,
# head_dim, biases, tying, experts and head drawn at random, each at a random batch, sequence
# length, mode, precision, optimizer and checkpointing; fixtures/hf/random/) with
# ../shared/truth and writes fixtures/truth/hf_random.jsonl.
PREFIX= exec "$(dirname "$0")/make_py_fixtures.sh" random causal-lm --jobs 2 "$@"
