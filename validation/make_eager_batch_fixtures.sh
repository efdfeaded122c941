#!/usr/bin/env bash
# Measures validation/cases_eager_batch.jsonl with ../shared/truth and writes
# fixtures/truth/hf_eager_batch.jsonl: eager attention's k gradient (bmm's transposed operand)
# at batches of one and more. It comes back `[B, H, D, S]`: no copy for one sequence, a copy by
# the projection's `UnsafeViewBackward0` from two on, which OPT (k_proj and v_proj before the
# views) makes after v_proj's backward. BERT, DistilBERT, RoBERTa and T5 at batch 1; OPT at
# batches 1 and 4.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh eager_batch masked-lm --jobs 2 "$@"
