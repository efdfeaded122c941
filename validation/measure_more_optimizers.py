"""Measure Adagrad and RMSprop steps with ../shared/truth's machinery (which ships SGD/Adam only).

Run with the truth venv and its fake-CUDA shim preloaded (see ../shared/truth/README.md,
"Using the pieces from Python"):

    PY=~/.venvs/truth/bin/python; D=$($PY ../shared/truth/measure.py --build-shim)
    LD_PRELOAD=$D/libfakecudart.so LD_LIBRARY_PATH=$D TRUTH_SHIM_ACTIVE=1 PYTHONPATH=../shared/truth \
        $PY validation/measure_more_optimizers.py resnet18:8:adagrad resnet18:8:rmsprop > out.jsonl

Each argument is MODEL:BATCH:OPTIMIZER; each line printed is the same record `measure.py --json` gives.
Optimizers use PyTorch's defaults with foreach=True, as vramscope's `--optimizer adagrad|rmsprop`.
"""
import json
import sys

import torch
import measure

_orig = measure.make_optimizer


def make_optimizer(name, params):
    if name == "adagrad":
        return torch.optim.Adagrad(params, lr=0.01, foreach=True)
    if name == "rmsprop":
        return torch.optim.RMSprop(params, lr=0.01, foreach=True)
    return _orig(name, params)


measure.make_optimizer = make_optimizer

for spec in sys.argv[1:]:
    model, batch, optim = spec.split(":")
    case = measure.normalize_case({"model": f"torchvision:{model}", "batch": int(batch), "optim": "adam"})
    case["optim"] = optim
    case["name"] = f"{model}_b{batch}_fp32_{optim}"
    rec = measure.run_case(case)
    print(json.dumps(rec), flush=True)
