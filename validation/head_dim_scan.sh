#!/usr/bin/env bash
# A one-layer Llama (2 heads) at each head_dim below, batch 2 x 64 tokens, through ../shared/truth
# and vramscope: prints both peaks (allocated, reserved) and the SDPA kernels the truth ran.
# With half precision and a head_dim that is not a multiple of 8, PyTorch pads q, k and v to the
# next multiple of 8 and runs flash attention on the copies (`constant_pad_nd`, then a slice of
# the padded output); in float32 one that is not a multiple of 4 runs the math fallback; past 256
# half precision runs mem-efficient attention. vramscope models all three since the thirtieth
# session (they were -0.8% to -2.6%, -6.8% and 0% before; fixtures/truth/hf_head_dims.jsonl).
#   DROP=0.0 bash validation/head_dim_scan.sh [HEAD_DIM...]
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-$HOME/.venvs/truth}
BIN=${BIN:-target/release/vramscope}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
dims=${*:-4 6 12 20 36 72 80 96 100 136 160 192 256 264 320}
for hd in $dims; do
  python3 - "$hd" "${DROP:-0.0}" > "$tmp/hd.json" <<'PY'
import json, sys
hd, drop = int(sys.argv[1]), float(sys.argv[2])
print(json.dumps({"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 2 * hd,
                  "intermediate_size": 64, "num_attention_heads": 2, "num_hidden_layers": 1,
                  "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 512,
                  "attention_dropout": drop}))
PY
  for spec in "train bf16" "train fp32" "infer bf16"; do
    set -- $spec
    truth=$("$VENV/bin/python" ../shared/truth/measure.py --model "hf:$tmp/hd.json" --batch 2 --seq 64 \
        --mode "$1" --amp "$2" --param-dtype fp32 --optim adamw --json --trace "$tmp/t.jsonl" 2>/dev/null \
      | tail -1 | python3 -c "import json,sys; p=json.load(sys.stdin)['overall']['peak']; print(p['alloc'], p['reserved'])")
    precision=amp-$2; [ "$2" = fp32 ] && precision=fp32
    ours=$("$BIN" estimate "$tmp/hd.json" --seq-len 64 -b 2 --mode "$1" --precision "$precision" \
        --optimizer adamw --json 2>/dev/null \
      | python3 -c "import json,sys; p=json.load(sys.stdin)['peak']; print(p['allocated_bytes'], p['reserved_bytes'])")
    kernels=$(grep -o '_scaled_dot_product_[a-z]*_attention' "$tmp/t.jsonl" | sort -u | tr '\n' ' ')
    [ "$truth" = "$ours" ] && verdict=same || verdict=DIFFERENT
    echo "head_dim $hd $spec: $verdict truth $truth vramscope $ours ($kernels)"
  done
done
