#!/usr/bin/env bash
# Measures the optimizers measure.py does not ship through validation/measure_more_optimizers.py,
# which patches measure.make_optimizer, and writes fixtures/truth/NAME.jsonl (~2 min each):
#   validation/make_fused_optimizer_fixtures.sh                 # fused_optimizers
#   validation/make_fused_optimizer_fixtures.sh adafactor
# fused_optimizers (validation/cases_fused_optimizers.jsonl): Adam / AdamW with fused=True,
# torchvision and Hugging Face models in fp32, AMP bf16, AMP fp16 with GradScaler, pure bf16,
# checkpointing; vramscope spells them adam-fused / adamw-fused (the cases' adam_fused /
# adamw_fused are accepted too). adafactor (validation/cases_adafactor.jsonl): torch.optim.Adafactor
# on the same kinds of models and steps. Needs the truth venv (VENV, default ~/.venvs/truth).
set -euo pipefail
cd "$(dirname "$0")/.."
name=${1:-fused_optimizers}
VENV=${VENV:-$HOME/.venvs/truth}
PY=$VENV/bin/python
mkdir -p .truth/raw
$PY validation/measure_more_optimizers.py --cases "validation/cases_$name.jsonl" \
    > ".truth/raw/$name.jsonl"
python3 validation/compact_results.py ".truth/raw/$name.jsonl" --prefix '' \
    --order "validation/cases_$name.jsonl" --out ".truth/raw/${name}_compact.jsonl"
NAME=$name python3 - <<'PY'
import json
import os
name = os.environ["NAME"]
with open(f"fixtures/truth/{name}.jsonl", "w") as out:
    for line in open(f".truth/raw/{name}_compact.jsonl"):
        r = json.loads(line)
        for prefix, strip in (("torchvision:", "torchvision:"), ("hf:../", "hf:../")):
            if r["model"].startswith(prefix):
                r["model"] = r["model"][len(strip):]
        out.write(json.dumps(r, separators=(",", ":")) + "\n")
PY
wc -l "fixtures/truth/$name.jsonl"
