#!/usr/bin/env python3
"""Write fixtures/torchvision_reference.json: structural reference data for torchvision models.

Run with the truth venv (no GPU needed):
    ~/.venvs/truth/bin/python validation/torchvision_reference.py [--out fixtures/torchvision_reference.json]
                                                                  [--models resnet18,vit_b_16]

Generated with torch 2.15.0+cu132 / torchvision 0.29.2+cu132. Models are built with weights=None in
fp32 on the meta device (CPU when the constructor needs tensor values, e.g. RegNet), in train mode.

Top level: an object keyed by model name. Each value:
  "parameters":    sum of p.numel() over model.parameters()
  "buffer_numel":  sum of b.numel() over model.buffers()
  "buffer_bytes":  sum of numel * element_size (fp32 build; BatchNorm num_batches_tracked is int64)
  "modules":       [[path, class_name, direct_param_numel], ...] for every model.named_modules()
                   entry in order (root path ""); direct = named_parameters(recurse=False)
  "param_names":   [[name, shape], ...] from named_parameters() in order
  "buffer_names":  [[name, shape, dtype], ...] from named_buffers() in order (dtype e.g. "float32", "int64")
  "build":         "meta" or "cpu" (where the model was constructed)
  "input_shape":   the forward input [2, 3, H, H] (H = 224, the default of every model here)
  "forward":       "meta" or "cpu" (where the forward ran), or null if it failed
  "leaf_output_shapes": [[path, class_name, output_shape], ...] in call order for one train-mode forward
                   at batch 2. Recorded at each module call that ran no child module during the call:
                   true leaves (no children), and modules whose children are not called because the
                   forward uses their weights functionally (nn.MultiheadAttention in ViT, Swin's
                   ShiftedWindowAttention). A module called twice (e.g. the ReLU of a BasicBlock)
                   appears twice. output_shape is a list of ints for a tensor, a list of such (or null)
                   for a tuple/list output, and null for None.
Models listed in DROP_LEAVES_IF_NEEDED lose leaf_output_shapes only if the file would exceed MAX_BYTES.
"""
import argparse
import json
import os
import sys
import time

import torch
import torchvision

MODELS = """resnet18 resnet34 resnet50 resnet101 resnet152 wide_resnet50_2 resnext50_32x4d
vgg11 vgg13 vgg16 vgg19 vgg11_bn vgg13_bn vgg16_bn vgg19_bn alexnet squeezenet1_0 squeezenet1_1
mobilenet_v2 mobilenet_v3_small mobilenet_v3_large densenet121 densenet161 densenet169 densenet201
efficientnet_b0 efficientnet_b1 efficientnet_b2 efficientnet_b3 efficientnet_b4 efficientnet_b5
efficientnet_b6 efficientnet_b7 convnext_tiny convnext_small convnext_base regnet_y_400mf
shufflenet_v2_x1_0 vit_b_16 vit_b_32 vit_l_16 swin_t""".split()

BATCH = 2
IMAGE = 224  # the default image size of every model above (vit_*: image_size=224, swin_t: 224)
MAX_BYTES = 8_000_000
# largest first: dropped (leaf_output_shapes only) one by one while the file is over MAX_BYTES
DROP_LEAVES_IF_NEEDED = ["efficientnet_b7", "efficientnet_b6", "densenet201", "densenet161",
                         "efficientnet_b5", "densenet169", "resnet152", "vit_l_16"]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def shape_of(o):
    if isinstance(o, torch.Tensor):
        return list(o.shape)
    if isinstance(o, (tuple, list)):
        return [shape_of(x) for x in o]
    if o is None:
        return None
    return repr(type(o).__name__)


def build(name, device):
    builder = getattr(torchvision.models, name)
    torch.manual_seed(0)
    with torch.device(device):
        m = builder(weights=None)
    return m


def structure(m):
    params = list(m.parameters())
    bufs = list(m.buffers())
    return {
        "parameters": sum(p.numel() for p in params),
        "buffer_numel": sum(b.numel() for b in bufs),
        "buffer_bytes": sum(b.numel() * b.element_size() for b in bufs),
        "modules": [[path, type(mod).__name__, sum(p.numel() for p in mod.parameters(recurse=False))]
                    for path, mod in m.named_modules()],
        "param_names": [[n, list(p.shape)] for n, p in m.named_parameters()],
        "buffer_names": [[n, list(b.shape), str(b.dtype).replace("torch.", "")] for n, b in m.named_buffers()],
    }


def leaf_calls(m, device):
    names = {mod: path for path, mod in m.named_modules()}
    stack, calls, handles = [], [], []

    def pre(mod, args):
        if stack:
            stack[-1][1] = True  # parent ran a child
        stack.append([mod, False])

    def post(mod, args, out):
        _, ran_child = stack.pop()
        if not ran_child:
            calls.append([names[mod], type(mod).__name__, shape_of(out)])

    for mod in names:
        handles.append(mod.register_forward_pre_hook(pre))
        handles.append(mod.register_forward_hook(post))
    try:
        m.train()
        x = torch.randn(BATCH, 3, IMAGE, IMAGE, device=device)
        with torch.no_grad():
            m(x)
    finally:
        for h in handles:
            h.remove()
    return calls


def one(name):
    t = time.time()
    try:
        m, where = build(name, "meta"), "meta"
    except Exception as e:  # constructor needs values (RegNet)
        print(f"  {name}: meta build failed ({type(e).__name__}: {str(e)[:80]}); building on CPU", file=sys.stderr)
        m, where = build(name, "cpu"), "cpu"
    rec = structure(m)
    rec["build"] = where
    rec["input_shape"] = [BATCH, 3, IMAGE, IMAGE]
    rec["forward"] = None
    rec["leaf_output_shapes"] = None
    fwd_err = None
    if where == "meta":
        try:
            rec["leaf_output_shapes"] = leaf_calls(m, "meta")
            rec["forward"] = "meta"
        except Exception as e:
            fwd_err = e
            print(f"  {name}: meta forward failed ({type(e).__name__}: {str(e)[:80]}); CPU", file=sys.stderr)
    if rec["forward"] is None:
        if where == "meta":
            m = build(name, "cpu")
            cpu_struct = structure(m)
            assert cpu_struct == structure_only(rec), f"{name}: meta and CPU builds differ"
        rec["leaf_output_shapes"] = leaf_calls(m, "cpu")
        rec["forward"] = "cpu"
    print(f"{name:22s} params {rec['parameters']:>11,d}  modules {len(rec['modules']):4d}  "
          f"leaf calls {len(rec['leaf_output_shapes']):4d}  build {where} forward {rec['forward']}  "
          f"{time.time() - t:5.1f}s", file=sys.stderr)
    return rec


def structure_only(rec):
    return {k: rec[k] for k in ("parameters", "buffer_numel", "buffer_bytes", "modules", "param_names", "buffer_names")}


def dump(obj):
    # one model per line: still compact, but diff- and grep-friendly
    parts = [json.dumps(k) + ":" + json.dumps(v, separators=(",", ":")) for k, v in obj.items()]
    return "{\n" + ",\n".join(parts) + "\n}\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(ROOT, "fixtures", "torchvision_reference.json"))
    ap.add_argument("--models", help="comma-separated subset (default: all)")
    args = ap.parse_args()
    print(f"torch {torch.__version__} torchvision {torchvision.__version__}", file=sys.stderr)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    models = args.models.split(",") if args.models else MODELS
    out = {}
    for name in models:
        out[name] = one(name)
    text = dump(out)
    for name in DROP_LEAVES_IF_NEEDED:
        if len(text) <= MAX_BYTES:
            break
        if name in out and out[name]["leaf_output_shapes"] is not None:
            print(f"  dropping leaf_output_shapes of {name} (file {len(text):,d} B)", file=sys.stderr)
            out[name]["leaf_output_shapes"] = None
            text = dump(out)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(text)
    print(f"wrote {args.out}: {len(out)} models, {len(text):,d} bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
