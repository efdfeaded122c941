#!/usr/bin/env bash
# Measures the 12 random configs of validation/cases_random_optimizers.jsonl (written by
# `validation/random_configs.py 2600 --truth 12 --optimizers --write-cases random_optimizers`;
# fixtures/hf/random/s2600_*): training steps under Adam, Adagrad, RMSprop, torch's Adafactor and
# fused Adam / AdamW, in fp32, AMP or bf16 parameters, some checkpointed, through
# validation/measure_more_optimizers.py (measure.py ships SGD and Adam/AdamW only), and writes
# fixtures/truth/hf_random_optimizers.jsonl (~2 min). Needs the truth venv (VENV, default
# ~/.venvs/truth).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-$HOME/.venvs/truth}
PY=$VENV/bin/python
mkdir -p .truth/raw
$PY validation/measure_more_optimizers.py --cases validation/cases_random_optimizers.jsonl --base-dir . \
    > .truth/raw/random_optimizers_results.jsonl
MEASURE=0 PREFIX= exec validation/make_py_fixtures.sh random_optimizers causal-lm
