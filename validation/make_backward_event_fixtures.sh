#!/usr/bin/env bash
# Measures two float32 Llama-family training steps with ../shared/truth's --trace and keeps, per
# case, the allocation and free sizes of `it1.backward` in order (fixtures/truth/events/backward.jsonl):
# Qwen2-small and SmolLM2-135M cut to 2 layers, batch 4 x 1024, AdamW. Under float32, SDPA runs the
# mem-efficient kernel, whose node releases its saved tensors sorted by name and whose q/k gradients
# come back through rotary in a layout `ViewBackward0` copies; the CLI test replays the sequence.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-$HOME/.venvs/truth}
mkdir -p .truth/raw
: > fixtures/truth/events/backward.jsonl
for cfg in qwen2_small_2l smollm2_135m_2l; do
  "$VENV/bin/python" ../shared/truth/measure.py --model "hf:fixtures/hf/configs/$cfg.json" \
      --task causal-lm --batch 4 --seq 1024 --amp fp32 --optim adamw \
      --trace ".truth/raw/$cfg.backward.trace" --json > ".truth/raw/$cfg.backward.json"
  python3 - "$cfg" >> fixtures/truth/events/backward.jsonl <<'PY'
import json, sys
cfg = sys.argv[1]
phase, events = None, []
for line in open(f".truth/raw/{cfg}.backward.trace"):
    e = json.loads(line)
    if e["ev"] == "phase":
        phase = e["phase"]
    elif phase == "it1.backward" and e["ev"] in ("alloc", "free") and e["bytes"] > 0:
        events.append([e["ev"], e["bytes"]])
args = ["--task", "causal-lm", "--batch-size", "4", "--seq-len", "1024", "--precision", "fp32", "--optimizer", "adamw"]
print(json.dumps({"config": f"fixtures/hf/configs/{cfg}.json", "args": args, "phase": "it1.backward", "events": events}, separators=(",", ":")))
PY
done
wc -c fixtures/truth/events/backward.jsonl
