#!/usr/bin/env python3
"""The field's rules of thumb next to vramscope and the truth, for docs/accuracy.md.

For every case of a compact truth fixture (fixtures/truth/*.jsonl) this prints, in MiB and as error
against the truth's peak allocated:
  * vramscope's `estimate --json` peak;
  * the classic formula: params x n x 4 B (n = 2 SGD, 3 momentum, 4 Adam/AdamW/Adagrad/RMSprop;
    1 for inference) + batch x sum of layer outputs x 4 B x 2 (train; x 1 for inference) + input
    bytes — the layer outputs are vramscope's per-layer table (torchinfo's "forward/backward pass");
  * torchinfo's "Estimated Total Size" (`torchinfo.summary(model, input_size)`), when torchinfo and
    torchvision are importable (run this with the truth venv's python to get that column).

Usage: python3 validation/baselines.py fixtures/truth/torchvision_dev.jsonl [--markdown FILE]
"""
import argparse
import json
import statistics
import subprocess

OPTIM = {"sgd": "sgd", "sgdm": "sgd-momentum", "adam": "adam", "adamw": "adamw", "adagrad": "adagrad", "rmsprop": "rmsprop"}
AMP = {"fp32": "fp32", "bf16": "amp-bf16", "fp16": "amp-fp16"}
MULT = {"sgd": 2, "sgdm": 3, "adam": 4, "adamw": 4, "adagrad": 3, "rmsprop": 3}


def vramscope(case, binary):
    a = [binary, "estimate", case["model"], "--batch-size", str(case["batch"]), "--json",
         "--input", f"3x{case.get('image') or 224}x{case.get('image') or 224}",
         "--num-classes", str(case.get("num_classes") or 1000), "--mode", case.get("mode") or "train",
         "--precision", AMP[case.get("amp") or "fp32"]]
    if (case.get("mode") or "train") == "train":
        a += ["--optimizer", OPTIM[case.get("optim") or "adam"]]
    if case.get("checkpoint"):
        a += ["--checkpoint", case["checkpoint"]]
    return json.loads(subprocess.run(a, capture_output=True, text=True, check=True).stdout)


def classic(case, est):
    train = (case.get("mode") or "train") == "train"
    n = MULT[case.get("optim") or "adam"] if train else 1
    outputs = sum(_numel(l["output_shape"]) for l in est["layers"])  # batch included
    h = case.get("image") or 224
    return est["model"]["parameters"] * n * 4 + outputs * 4 * (2 if train else 1) + case["batch"] * 3 * h * h * 4


def _numel(s):
    p = 1
    for d in s:
        p *= d
    return p


def torchinfo_total(case):
    try:
        import torch
        import torchinfo
        import torchvision
    except ImportError:
        return None
    h = case.get("image") or 224
    kw = {"weights": None, "num_classes": case.get("num_classes") or 1000}
    if case["model"].startswith("vit_") and h != 224:
        kw["image_size"] = h
    model = torchvision.models.get_model(case["model"], **kw)
    with torch.no_grad():
        s = torchinfo.summary(model, input_size=(case["batch"], 3, h, h), verbose=0, device="cpu")
    return (s.total_input + s.total_output_bytes + s.total_param_bytes)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fixtures", nargs="+")
    ap.add_argument("--bin", default="target/release/vramscope")
    ap.add_argument("--markdown")
    o = ap.parse_args()
    rows = []
    for f in o.fixtures:
        for line in open(f):
            c = json.loads(line)
            est = vramscope(c, o.bin)
            t = c["peak_alloc"]
            ti = torchinfo_total(c)
            rows.append((c["name"], t, est["peak"]["allocated_bytes"], classic(c, est), ti))
            r = rows[-1]
            print(f"{r[0]:45s} truth {t/2**20:9.1f}  vramscope {r[2]/2**20:9.1f} ({(r[2]-t)/t*100:+.1f}%)  "
                  f"formula {r[3]/2**20:9.1f} ({(r[3]-t)/t*100:+.1f}%)  "
                  + (f"torchinfo {ti/2**20:9.1f} ({(ti-t)/t*100:+.1f}%)" if ti else "torchinfo -"), flush=True)
    def summary(k):
        errs = [abs(r[k] - r[1]) / r[1] * 100 for r in rows if r[k]]
        return f"median |error| {statistics.median(errs):.1f}%, worst {max(errs):.1f}%" if errs else "-"
    print(f"vramscope: {summary(2)}; classic formula: {summary(3)}; torchinfo: {summary(4)}")
    if o.markdown:
        with open(o.markdown, "a") as md:
            md.write("\n## Against the field's rules of thumb\n\n")
            md.write("Peak allocated (MiB) and error against the truth. The classic formula and torchinfo's "
                     "\"Estimated Total Size\" are defined in `validation/baselines.py`.\n\n")
            md.write("| case | truth | vramscope | classic formula | torchinfo |\n|---|---:|---:|---:|---:|\n")
            for name, t, v, cl, ti in rows:
                tis = f"{ti/2**20:.1f} ({(ti-t)/t*100:+.0f}%)" if ti else "-"
                md.write(f"| {name} | {t/2**20:.1f} | {v/2**20:.1f} ({(v-t)/t*100:+.1f}%) | {cl/2**20:.1f} ({(cl-t)/t*100:+.0f}%) | {tis} |\n")
            md.write(f"\nvramscope: {summary(2)}; classic formula: {summary(3)}; torchinfo: {summary(4)}.\n")


if __name__ == "__main__":
    main()
