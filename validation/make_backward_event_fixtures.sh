#!/usr/bin/env bash
# Measures float32 Llama-family training steps with ../shared/truth's --trace and keeps, per case
# and phase, the allocation and free sizes in order (fixtures/truth/events/backward.jsonl); the CLI
# test replays each sequence. Qwen2-small and SmolLM2-135M cut to 2 layers, batch 4 x 1024, AdamW:
# - `it1.backward`, every event: under float32, SDPA runs the mem-efficient kernel, whose node
#   releases its saved tensors sorted by name, and q's and k's gradients come back through rotary
#   in a layout `ViewBackward0` copies;
# - `it1.step` (SmolLM2), every event: AdamW's state in `parameters()` order (a decoder layer's
#   attention, MLP, then its norms), and the foreach step's `exp_avg_sq_sqrt` list freed last
#   tensor first;
# - `it1.backward` with gradient checkpointing (SmolLM2, `"large": true`): the events of the large
#   pool (over 1 MiB), each run of frees sorted by size (frees in a row commute): what decides the
#   large pool's layout. The checkpoint frame, and the layer input it keeps, goes when the layer's
#   first op's node has run, before its gradient is added to the residual's.
# - `it1.backward` under AMP bf16 (SmolLM2, `"large": true`): cuDNN attention; q's and k's
#   gradients still come back through rotary heads-first (`ViewBackward0` copies them), and each
#   RMSNorm's `weight * h` makes h's gradient before the weight's full-size product.
# - `it1.backward` under AMP bf16 (Mistral-small, untied `lm_head`), every event: a bias-free
#   Linear's `MmBackward0` releases its weight's bf16 copy (mat2) before its input's (self).
# - `it1.backward` under AMP bf16 past a sliding window (Mistral-small with a 1024-token window at
#   1500 tokens, every event; Gemma-3-4B's text model at its 1024-token window, the large pool):
#   SDPA gets a mask, so repeat_kv expands k and v to every head, and v's gradient, summed back
#   heads-first by ExpandBackward0, is copied by its `ViewBackward0` like q's and k's.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-$HOME/.venvs/truth}
mkdir -p .truth/raw
out=fixtures/truth/events/backward.jsonl
: > "$out"
# config, checkpoint (0/1), phase, large (0/1), amp (fp32 / bf16), sequence length (1024 if absent)
while read -r cfg ckpt phase large amp seq; do
  seq=${seq:-1024}
  flag=() suffix=""
  if [ "$ckpt" = 1 ]; then flag=(--checkpoint); suffix=".ckpt"; fi
  if [ "$amp" != fp32 ]; then suffix="$suffix.$amp"; fi
  if [ "$seq" != 1024 ]; then suffix="$suffix.s$seq"; fi
  trace=".truth/raw/$cfg$suffix.backward.trace"
  if [ ! -s "$trace" ]; then
    "$VENV/bin/python" ../shared/truth/measure.py --model "hf:fixtures/hf/configs/$cfg.json" \
        --task causal-lm --batch 4 --seq "$seq" --amp "$amp" --optim adamw "${flag[@]}" \
        --trace "$trace" --json > ".truth/raw/$cfg$suffix.backward.json"
  fi
  python3 - "$cfg" "$ckpt" "$phase" "$large" "$trace" "$amp" "$seq" >> "$out" <<'PY'
import json, sys
cfg, ckpt, want, large, trace = sys.argv[1], sys.argv[2] == "1", sys.argv[3], sys.argv[4] == "1", sys.argv[5]
seq = sys.argv[7]
precision = {"fp32": "fp32", "bf16": "amp-bf16", "fp16": "amp-fp16"}[sys.argv[6]]
phase, events = None, []
for line in open(trace):
    e = json.loads(line)
    if e["ev"] == "phase":
        phase = e["phase"]
    elif phase == want and e["ev"] in ("alloc", "free") and e["bytes"] > (1 << 20 if large else 0):
        events.append([e["ev"], e["bytes"]])
args = ["--task", "causal-lm", "--batch-size", "4", "--seq-len", seq, "--precision", precision, "--optimizer", "adamw"]
if ckpt:
    args.append("--gradient-checkpointing")
case = {"config": f"fixtures/hf/configs/{cfg}.json", "args": args, "phase": want, "events": events}
if large:
    case["large"] = True
print(json.dumps(case, separators=(",", ":")))
PY
done <<'CASES'
qwen2_small_2l 0 it1.backward 0 fp32
smollm2_135m_2l 0 it1.backward 0 fp32
smollm2_135m_2l 0 it1.step 0 fp32
smollm2_135m_2l 1 it1.backward 1 fp32
smollm2_135m_2l 0 it1.backward 1 bf16
mistral_small_2l 0 it1.backward 0 bf16
mistral_small_2l_sw1024 0 it1.backward 0 bf16 1500
gemma3_4b_2l 0 it1.backward 1 bf16
CASES
wc -c "$out"
