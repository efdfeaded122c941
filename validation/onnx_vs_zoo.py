#!/usr/bin/env python3
"""The ONNX front-end against the built-in zoo and measured truth, per case.

Usage (repo root, after `cargo build --release`):
    python3 validation/onnx_vs_zoo.py [--bin target/release/vramscope] [--markdown FILE]

* every case of fixtures/truth/torchvision_*.jsonl whose model has a committed export
  (fixtures/onnx/NAME.onnx: 224x224, 1000 classes, dynamic batch) is estimated twice, from the zoo
  name and from the .onnx file;
* every case of fixtures/truth/onnx_models.jsonl (validation/onnx_models.py's models, no zoo
  counterpart) is estimated from its export;
* plus, per export, train fp32 AdamW / AMP bf16 AdamW / inference at batch 16 against the zoo
  (no truth).
Prints truth, zoo and ONNX peak allocated bytes and the errors. Only the standard library.
"""
import argparse
import glob
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import args_for  # noqa: E402

EXPORTS = ["resnet18", "resnet50", "mobilenet_v3_small", "squeezenet1_1", "densenet121", "vit_b_16"]


def peak(binary, args):
    p = subprocess.run([binary, "estimate", *args], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"vramscope {' '.join(args)}: {p.stderr.strip()}")
    return json.loads(p.stdout)["peak"]["allocated_bytes"]


def err(a, b):
    return f"{100.0 * (a - b) / b:+.3f}%" if a is not None and b else ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/vramscope")
    ap.add_argument("--markdown")
    o = ap.parse_args()
    rows = []
    for f in sorted(glob.glob("fixtures/truth/torchvision_*.jsonl")):
        for line in open(f):
            c = json.loads(line)
            if c["model"] not in EXPORTS or (c.get("image") or 224) != 224 or (c.get("num_classes") or 1000) != 1000:
                continue
            zoo = peak(o.bin, args_for(c))
            onnx_case = dict(c, model=f"fixtures/onnx/{c['model']}.onnx")
            onx = peak(o.bin, args_for(onnx_case))
            rows.append((c["name"], c["peak_alloc"], zoo, onx))
    for line in open("fixtures/truth/onnx_models.jsonl"):
        c = json.loads(line)
        rows.append((c["name"], c["peak_alloc"], None, peak(o.bin, args_for(c))))
    for name in EXPORTS:
        for label, extra in [("fp32_adamw", ["--optimizer", "adamw"]),
                             ("bf16_adamw", ["--optimizer", "adamw", "--precision", "amp-bf16"]),
                             ("fp32_infer", ["--mode", "infer"])]:
            base = ["--batch-size", "16", "--json", *extra]
            rows.append((f"{name}_b16_{label} (no truth)", None, peak(o.bin, [name, *base]),
                         peak(o.bin, [f"fixtures/onnx/{name}.onnx", *base])))
    head = "| case | truth | zoo | onnx | onnx vs zoo | onnx vs truth |"
    lines = [head, "|---|---:|---:|---:|---:|---:|"]
    for name, t, z, x in rows:
        lines.append(f"| {name} | {t or ''} | {z or ''} | {x} | {err(x, z)} | {err(x, t)} |")
    print("\n".join(lines))
    if o.markdown:
        with open(o.markdown, "a") as fh:
            fh.write("\n" + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
