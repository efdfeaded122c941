#!/usr/bin/env bash
# Measures the eager-attention truth cases (validation/cases_eager.jsonl: HF models built with
# attn_implementation="eager", model `eager` in validation/generate_models.py; measure.py's hf:
# loader sets sdpa after --config-overrides, so the override cannot select eager there) with
# ../shared/truth and writes fixtures/truth/hf_eager.jsonl (compact format plus `model`, the
# config vramscope reads, and `extra_args`: --attn-implementation eager).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-$HOME/.venvs/truth}
mkdir -p .truth/raw
"$VENV/bin/python" ../shared/truth/run_cases.py validation/cases_eager.jsonl \
    --out .truth/raw/eager_results.jsonl --jobs 2
python3 validation/compact_results.py .truth/raw/eager_results.jsonl --prefix py: \
    --order validation/cases_eager.jsonl --out .truth/raw/eager_compact.jsonl
python3 validation/vramscope_fixture.py validation/cases_eager.jsonl .truth/raw/eager_compact.jsonl \
    fixtures/truth/hf_eager.jsonl
wc -l fixtures/truth/hf_eager.jsonl
