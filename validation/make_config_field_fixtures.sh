#!/usr/bin/env bash
# Measures validation/cases_config_fields.jsonl with ../shared/truth and writes
# fixtures/truth/hf_config_fields.jsonl: config fields that change the modules and were refused
# before: OPT with `layer_norm_elementwise_affine: false` (LayerNorms without weight and bias),
# pre- and post-norm, in training (AMP bf16 / fp16, fp32 with checkpointing) and inference; and
# T5 / UMT5 configs whose saved `dense_act_fn` and `is_gated_act` differ from what
# `feed_forward_proj` says (transformers sets the saved values after deriving them, so they win);
# QLoRA on an OPT whose last parameter is a bias (get_keys_to_not_convert names no module then);
# LoRA on an OPT whose `linear` activation chains fc1's adapted output into fc2.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX= exec validation/make_py_fixtures.sh config_fields causal-lm --jobs 2 "$@"
