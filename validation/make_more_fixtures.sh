#!/usr/bin/env bash
# Measures the truth cases that ../shared/truth/measure.py cannot express directly and writes
# fixtures/truth/torchvision_more.jsonl:
#  - Adagrad and RMSprop steps (validation/measure_more_optimizers.py patches measure.make_optimizer);
#  - checkpoint_sequential(model.features, N) (validation/checkpoint_sequential_models.py), which
#    vramscope spells `--checkpoint features:N`, and checkpointing below the top level (`nested`).
# Needs the truth venv (VENV, default ~/.venvs/truth). Run from the repository root.
set -euo pipefail
VENV=${VENV:-$HOME/.venvs/truth}
PY=$VENV/bin/python
TRUTH=${TRUTH:-../shared/truth}
[ -d "$TRUTH" ] || TRUTH=/work/shared/truth
mkdir -p .truth/raw
D=$($PY "$TRUTH/measure.py" --build-shim)
LD_PRELOAD=$D/libfakecudart.so LD_LIBRARY_PATH=$D TRUTH_SHIM_ACTIVE=1 PYTHONPATH=$TRUTH \
    $PY validation/measure_more_optimizers.py resnet18:8:adagrad resnet18:8:rmsprop mobilenet_v3_small:16:adagrad \
    > .truth/raw/more_optimizers.jsonl
: > .truth/raw/checkpoint_sequential.jsonl
# measure FACTORY MODEL BATCH KWARGS CHECKPOINT NAME: one checkpoint_sequential_models.py case,
# recorded as the torchvision case vramscope runs with `--checkpoint CHECKPOINT`
measure() {
    VENV=$VENV python3 "$TRUTH/measure.py" --model "py:$PWD/validation/checkpoint_sequential_models.py:$1" \
        --batch "$3" --optim sgdm --model-kwargs "$4" --json 2>/dev/null \
        | python3 -c "import json,sys; r=json.load(sys.stdin); c=r['case']; c['model']='torchvision:$2'; c['checkpoint']='$5'; c['name']='$6'; print(json.dumps(r))" \
        >> .truth/raw/checkpoint_sequential.jsonl
}
for spec in "vgg11_bn 16 3" "mobilenet_v2 32 4"; do
    set -- $spec
    measure "$1" "$1" "$2" "{\"segments\": $3}" "features:$3" "$1_b$2_fp32_sgdm_features$3"
done
# checkpointing below the top level, as `vramscope tricks` offers it: every block of ViT-B/16
# (its 12 encoder layers one by one) and of ConvNeXt-T (each stage's CNBlocks), and
# checkpoint_sequential over ViT's encoder.layers (`--checkpoint encoder.layers:4`)
VIT_BLOCKS="encoder.dropout,$(seq -s, -f 'encoder.layers.encoder_layer_%g' 0 11),encoder.ln,heads.head"
CNX_BLOCKS="features.0,features.1.0,features.1.1,features.1.2,features.2,features.3.0,features.3.1,features.3.2,features.4,$(seq -s, -f 'features.5.%g' 0 8),features.6,features.7.0,features.7.1,features.7.2,classifier.0,classifier.1,classifier.2"
for spec in "vit_b_16 8 modules $VIT_BLOCKS every_block" "vit_b_16 8 sequential encoder.layers:4 encoder_layers4" \
            "convnext_tiny 8 modules $CNX_BLOCKS every_block"; do
    set -- $spec
    measure nested "$1" "$2" "{\"model\": \"$1\", \"$3\": \"$4\"}" "$4" "$1_b$2_fp32_sgdm_$5"
done
python3 validation/compact_results.py .truth/raw/more_optimizers.jsonl .truth/raw/checkpoint_sequential.jsonl \
    --out fixtures/truth/torchvision_more.jsonl
