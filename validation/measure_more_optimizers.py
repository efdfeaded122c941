"""Measure optimizers ../shared/truth's measure.py does not ship (it has SGD, SGD momentum, Adam and
AdamW with foreach=True): Adagrad and RMSprop (PyTorch's defaults with foreach=True, as vramscope's
`--optimizer adagrad|rmsprop`), and Adam / AdamW with fused=True (`adam_fused`, `adamw_fused`:
vramscope's `--optimizer adam-fused|adamw-fused`, Hugging Face Trainer's default `adamw_torch_fused`),
and `torch.optim.Adafactor` (its defaults, the single-tensor loop: vramscope's `--optimizer
adafactor`; its `.item()` reads get 1.0 under fake tensors, see `item` below).

Run with the truth venv; the script re-runs itself with the truth tool's fake-CUDA shim preloaded
(../shared/truth/README.md, "Using the pieces from Python"; `TRUTH` names another truth folder):

    PY=~/.venvs/truth/bin/python
    $PY validation/measure_more_optimizers.py resnet18:8:adagrad resnet18:8:rmsprop > out.jsonl
    $PY validation/measure_more_optimizers.py --cases validation/cases_fused_optimizers.jsonl > out.jsonl

measure.py's loop emulates `scaler.step(opt)` as `scaler.unscale_(opt); opt.step()` (a real
`scaler.step` syncs on `found_inf.item()`, which fake tensors cannot). A fused optimizer takes the
other branch of `scaler.step` (`_step_supports_amp_scaling`: no `unscale_`, the scale and the inf
flag handed to the kernel), which has no such sync: here `unscale_` on a fused optimizer defers to
the real `scaler.step(opt)` instead, which the loop's `opt.step()` then runs.

Each argument is MODEL:BATCH:OPTIMIZER (a torchvision model, fp32); `--cases FILE [--base-dir
DIR]` measures every case of a case list instead (any model measure.py builds, paths relative to
the file's folder or DIR, with one of the optimizers above as `optim`). Each line printed is the same record `measure.py --json`
gives.
"""
import json
import os
import subprocess
import sys

if os.environ.get("TRUTH_SHIM_ACTIVE") != "1":
    # the fake CUDA runtime has to be preloaded before the interpreter starts: build it, run again
    TRUTH = os.environ.get("TRUTH") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                    "shared", "truth")
    SHIM = subprocess.run([sys.executable, os.path.join(TRUTH, "measure.py"), "--build-shim"],
                          capture_output=True, text=True, check=True).stdout.strip()
    os.execve(sys.executable, [sys.executable, *sys.argv],
              {**os.environ, "LD_PRELOAD": os.path.join(SHIM, "libfakecudart.so"), "LD_LIBRARY_PATH": SHIM,
               "TRUTH_SHIM_ACTIVE": "1", "PYTHONPATH": os.path.abspath(TRUTH)})

import torch  # noqa: E402
import measure  # noqa: E402

_orig = measure.make_optimizer


def make_optimizer(name, params):
    if name == "adagrad":
        return torch.optim.Adagrad(params, lr=0.01, foreach=True)
    if name == "rmsprop":
        return torch.optim.RMSprop(params, lr=0.01, foreach=True)
    if name == "adam_fused":
        return torch.optim.Adam(params, lr=1e-3, fused=True)
    if name == "adamw_fused":
        return torch.optim.AdamW(params, lr=1e-3, weight_decay=0.01, fused=True)
    if name == "adafactor":
        return torch.optim.Adafactor(params, lr=1e-2)
    return _orig(name, params)


measure.make_optimizer = make_optimizer

_item = torch.Tensor.item


def item(self):
    """`Tensor.item()`, 1.0 for a fake tensor. Adafactor reads its step count and each
    parameter's norm with `.item()` (a host value FakeTensorMode cannot give); the value decides
    the step size only, never an allocation."""
    try:
        return _item(self)
    except torch._subclasses.fake_tensor.DataDependentOutputException:
        return 1.0


torch.Tensor.item = item

_unscale = torch.amp.grad_scaler.GradScaler.unscale_


def unscale_(self, optimizer):
    """`scaler.unscale_(opt)`, but for a fused optimizer: the next `opt.step()` is `scaler.step(opt)`."""
    if not getattr(optimizer, "_step_supports_amp_scaling", False):
        return _unscale(self, optimizer)
    own_step = optimizer.step

    def step(*args, **kwargs):
        optimizer.step = own_step  # what scaler.step calls
        return self.step(optimizer, *args, **kwargs)

    optimizer.step = step


torch.amp.grad_scaler.GradScaler.unscale_ = unscale_


def run(spec, base_dir=None, trace_dir=None):
    """Measures one case spec whose `optim` measure.py's own check would refuse (with `trace_dir`,
    its event trace goes to TRACE_DIR/NAME.trace.jsonl)."""
    optim = spec["optim"]
    case = measure.normalize_case({**spec, "optim": "adam"})
    case["optim"] = optim
    trace = os.path.join(trace_dir, f"{case['name']}.trace.jsonl") if trace_dir else None
    return measure.run_case(case, base_dir, trace_path=trace)


args = sys.argv[1:]
# `--trace-dir DIR`: each case's event trace as DIR/NAME.trace.jsonl (for validation/diff_trace.py)
trace_dir = None
if "--trace-dir" in args:
    at = args.index("--trace-dir")
    trace_dir = args[at + 1]
    os.makedirs(trace_dir, exist_ok=True)
    del args[at:at + 2]
if args[:1] == ["--cases"]:
    path = args[1]
    # `--base-dir DIR`: the folder the cases' paths are relative to (default: the file's)
    base = args[3] if args[2:3] == ["--base-dir"] else os.path.dirname(os.path.abspath(path))
    for line in open(path):
        if line.strip():
            print(json.dumps(run(json.loads(line), base, trace_dir)), flush=True)
else:
    for spec in args:
        model, batch, optim = spec.split(":")
        rec = run({"model": f"torchvision:{model}", "batch": int(batch), "optim": optim,
                   "name": f"{model}_b{batch}_fp32_{optim}"}, trace_dir=trace_dir)
        print(json.dumps(rec), flush=True)
