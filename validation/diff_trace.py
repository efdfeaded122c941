#!/usr/bin/env python3
"""Diff two allocation traces (truth's --trace and vramscope's --trace) phase by phase.

Usage: python3 validation/diff_trace.py TRUTH.trace.jsonl OURS.trace.jsonl [PHASE] [--context N]
Shows the first point inside each phase (or PHASE) where the sequences of (alloc|free, bytes) differ.
"""
import json, sys

def load(p):
    ph, out = None, {}
    for line in open(p):
        e = json.loads(line)
        if e["ev"] == "phase":
            ph = e["phase"]; out.setdefault(ph, []); continue
        if e["ev"] in ("alloc", "free") and e["bytes"] > 0:
            out.setdefault(ph, []).append((e["ev"], e["bytes"], e.get("op") or "", e.get("module") or "", e.get("node") or "", e.get("shape")))
    return out

a, b = load(sys.argv[1]), load(sys.argv[2])
only = sys.argv[3] if len(sys.argv) > 3 and not sys.argv[3].startswith("--") else None
ctx = 8
for ph in a:
    if only and ph != only:
        continue
    x, y = a.get(ph, []), b.get(ph, [])
    n = next((i for i, (p, q) in enumerate(zip(x, y)) if p[:2] != q[:2]), None)
    if n is None and len(x) == len(y):
        print(f"{ph}: identical ({len(x)} events)"); continue
    n = n if n is not None else min(len(x), len(y))
    print(f"{ph}: differs at event {n} (truth {len(x)} events, ours {len(y)})")
    for i in range(max(0, n - 3), n + ctx):
        l = x[i] if i < len(x) else None
        r = y[i] if i < len(y) else None
        print(f"   {i:5d} T {str(l)[:110]:110s}\n         O {str(r)[:110]}")
