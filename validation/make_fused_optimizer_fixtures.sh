#!/usr/bin/env bash
# Measures Adam / AdamW with fused=True (validation/cases_fused_optimizers.jsonl: torchvision and
# Hugging Face models in fp32, AMP bf16, AMP fp16 with GradScaler, pure bf16, checkpointing) through
# validation/measure_more_optimizers.py, which patches measure.make_optimizer, and writes
# fixtures/truth/fused_optimizers.jsonl (~2 min). Needs the truth venv (VENV, default
# ~/.venvs/truth). vramscope spells the optimizers adam-fused / adamw-fused (the cases' adam_fused /
# adamw_fused are accepted too).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-$HOME/.venvs/truth}
PY=$VENV/bin/python
TRUTH=${TRUTH:-../shared/truth}
mkdir -p .truth/raw
D=$($PY "$TRUTH/measure.py" --build-shim)
LD_PRELOAD=$D/libfakecudart.so LD_LIBRARY_PATH=$D TRUTH_SHIM_ACTIVE=1 PYTHONPATH=$TRUTH \
    $PY validation/measure_more_optimizers.py --cases validation/cases_fused_optimizers.jsonl \
    > .truth/raw/fused_optimizers.jsonl
python3 validation/compact_results.py .truth/raw/fused_optimizers.jsonl --prefix '' \
    --order validation/cases_fused_optimizers.jsonl --out .truth/raw/fused_optimizers_compact.jsonl
python3 - <<'PY'
import json
with open("fixtures/truth/fused_optimizers.jsonl", "w") as out:
    for line in open(".truth/raw/fused_optimizers_compact.jsonl"):
        r = json.loads(line)
        for prefix, strip in (("torchvision:", "torchvision:"), ("hf:../", "hf:../")):
            if r["model"].startswith(prefix):
                r["model"] = r["model"][len(strip):]
        out.write(json.dumps(r, separators=(",", ":")) + "\n")
PY
wc -l fixtures/truth/fused_optimizers.jsonl
