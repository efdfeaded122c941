#!/usr/bin/env python3
"""Side-by-side timing: vramscope vs the FakeTensor tracker of ../shared/truth (the same technique as
torch's MemTracker in fake mode: every aten op dispatched on fake CUDA tensors) vs torchinfo, on the
same cases. Run with the truth venv's python from the repository root:

    ~/.venvs/truth/bin/python validation/speed_compare.py [--bin target/release/vramscope]

Prints a Markdown table (seconds and ratios) for docs/performance.md. With `--process-only` (any
python3, no venv needed) it only times whole `vramscope estimate --json` processes and reports their
maximum resident memory.
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

TRUTH = os.environ.get("TRUTH", "../shared/truth" if os.path.isdir("../shared/truth") else "/work/shared/truth")
CASES = [
    # (name, vramscope args, truth args, torchinfo (model, batch, image) or None)
    ("resnet50 b32 fp32 adam", ["resnet50", "-b", "32", "--optimizer", "adam"],
     ["--model", "torchvision:resnet50", "--batch", "32", "--optim", "adam"], ("resnet50", 32, 224)),
    ("vit_b_16 b32 amp-bf16 adamw", ["vit_b_16", "-b", "32", "--precision", "amp-bf16", "--optimizer", "adamw"],
     ["--model", "torchvision:vit_b_16", "--batch", "32", "--amp", "bf16", "--optim", "adamw"], ("vit_b_16", 32, 224)),
    ("densenet121 b32 fp32 sgdm", ["densenet121", "-b", "32", "--optimizer", "sgd-momentum"],
     ["--model", "torchvision:densenet121", "--batch", "32", "--optim", "sgdm"], ("densenet121", 32, 224)),
    ("gpt2-medium b4 s1024 amp-bf16 adamw", ["fixtures/hf/configs/gpt2_medium.json", "-b", "4", "--seq-len", "1024",
                                             "--precision", "amp-bf16", "--optimizer", "adamw"],
     ["--model", "hf:configs/gpt2_medium.json", "--batch", "4", "--seq", "1024", "--amp", "bf16", "--optim", "adamw"], None),
]


def timed(cmd, n):
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts)


def torchinfo_time(model, batch, image):
    import torch
    import torchinfo
    import torchvision
    m = torchvision.models.get_model(model, weights=None)
    t = time.perf_counter()
    with torch.no_grad():
        torchinfo.summary(m, input_size=(batch, 3, image, image), verbose=0, device="cpu")
    return time.perf_counter() - t


# whole-process cases of --process-only: the zoo, the issue-3 70B command, generations
PROCESS_CASES = [
    ["resnet50"],
    ["vit_l_16"],
    ["gpt2", "--seq-len", "1024", "-b", "8"],
    ["llama-3-70b", "--seq-len", "4096", "-b", "1", "--precision", "amp-bf16"],
    ["gpt2", "--mode", "generate", "--prompt-len", "128", "--new-tokens", "32", "-b", "4", "--precision", "bf16"],
    ["llama-3-8b", "--mode", "generate", "--prompt-len", "512", "--new-tokens", "256", "-b", "4", "--precision", "bf16"],
    ["llama-3-70b", "--mode", "generate", "--prompt-len", "2000", "--new-tokens", "2000", "-b", "1", "--precision", "bf16"],
]


def process_only(binary, runs=21):
    print(f"| estimate | process wall (median of {runs}) | user CPU per run | max resident memory |")
    print("|---|---:|---:|---:|")
    for args in PROCESS_CASES:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = timed([binary, "estimate", *args, "--json"], runs)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        user = (after.ru_utime - before.ru_utime) / runs
        rss = after.ru_maxrss
        rss_note = f"{rss / 1024:.1f} MiB" if rss > before.ru_maxrss or before.ru_maxrss == 0 else f"<= {rss / 1024:.1f} MiB"
        print(f"| {' '.join(args)} | {t * 1000:.1f} ms | {user * 1000:.1f} ms | {rss_note} |", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default="target/release/vramscope")
    ap.add_argument("--process-only", action="store_true")
    o = ap.parse_args()
    if o.process_only:
        process_only(o.bin)
        return
    print("| case | vramscope | truth tracker (process / tracing only) | torchinfo | tracker ÷ vramscope | torchinfo ÷ vramscope |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, vargs, targs, ti in CASES:
        v = timed([o.bin, "estimate", *vargs, "--json"], 7)
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, f"{TRUTH}/measure.py", *targs, "--json"], capture_output=True, text=True,
                           env={**os.environ, "VENV": os.path.dirname(os.path.dirname(sys.executable))})
        truth_proc = time.perf_counter() - t0
        rec = json.loads(p.stdout) if p.returncode == 0 else {}
        truth_inner = rec.get("truth_wall_s") or rec.get("wall_s")
        tinfo = torchinfo_time(*ti) if ti else None
        tr = f"{truth_proc:.1f} s / {truth_inner:.1f} s" if truth_inner else f"{truth_proc:.1f} s"
        print(f"| {name} | {v*1000:.1f} ms | {tr} | " + (f"{tinfo:.2f} s" if tinfo else "-") +
              f" | {truth_proc / v:,.0f}× | " + (f"{tinfo / v:,.0f}×" if tinfo else "-") + " |", flush=True)


if __name__ == "__main__":
    main()
