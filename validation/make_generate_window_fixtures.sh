#!/usr/bin/env bash
# Measures generations that run past a sliding window (validation/cases_generate_window.jsonl:
# Mistral, Phi-3, Gemma3 and Mixtral cut to 2 layers with a 64-position window, a prefill longer than the
# window and decode steps crossing it; Mistral-7B's 4096 and Gemma-3-1B's 512 windows; and
# Mistral-7B, Gemma-3-1B and Phi-3-mini at full depth; Mixtral trained past its window) with
# ../shared/truth and writes
# fixtures/truth/hf_generate_window.jsonl. Past the window transformers' mask code materializes a
# sliding-window mask each forward, the DynamicSlidingWindowLayer keeps a view of its last
# `w - 1` positions, and SDPA runs with the mask (pack_gqa for one query).
PREFIX= exec "$(dirname "$0")/make_py_fixtures.sh" generate_window causal-lm --jobs 2 "$@"
