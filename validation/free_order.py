#!/usr/bin/env python3
"""Which tensor each free releases, truth against vramscope: finds the case's spec in
validation/cases_*.jsonl (or ../shared/truth/dev_cases.jsonl), traces it with measure.py and with
`vramscope estimate --trace`, and lists the frees that release a different allocation (by its
index in the trace). Two traces with the same (alloc|free, bytes) sequence can still keep
different blocks alive (which of two equal-sized tensors dies first), and that moves the caching
allocator's later choices: the peak reserved of a case then differs by a segment although every
event agrees in size (diff_trace.py compares sizes only).

    ~/.venvs/truth/bin/python validation/free_order.py NAME [NAME...] [--max N]

Traces go to .truth/traces/ (git-ignored). A fixture record (fixtures/truth/*.jsonl) gives the
vramscope flags (compare.py's args_for).
"""
import argparse
import glob
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, HERE)
from compare import args_for  # noqa: E402

TRUTH = os.path.join(ROOT, "..", "shared", "truth")
BIN = os.path.join(ROOT, "target", "release", "vramscope")
OUT = os.path.join(ROOT, ".truth", "traces")


def find(name, pattern):
    for path in sorted(glob.glob(pattern)):
        for line in open(path):
            line = line.strip()
            if line and not line.startswith(("#", "//")):
                rec = json.loads(line)
                if rec.get("name") == name:
                    return path, rec
    return None, None


def load(path):
    """(kind, bytes, index of the freed allocation, phase, event) per nonzero alloc/free."""
    phase, out, index = None, [], {}
    for line in open(path):
        e = json.loads(line)
        if e["ev"] == "phase":
            phase = e["phase"]
        elif e["ev"] in ("alloc", "free") and e["bytes"]:
            if e["ev"] == "alloc":
                index[e["sid"]] = len(out)
                out.append(("A", e["bytes"], None, phase, e))
            else:
                out.append(("F", e["bytes"], index.pop(e["sid"], None), phase, e))
    return out


def where(e):
    return " ".join(str(e.get(k)) for k in ("op", "node", "module", "shape") if e.get(k) is not None)


def compare(name, most):
    spec_file, _ = find(name, os.path.join(HERE, "cases_*.jsonl"))
    if spec_file is None:
        spec_file, _ = find(name, os.path.join(TRUTH, "dev_cases.jsonl"))
    _, record = find(name, os.path.join(ROOT, "fixtures", "truth", "*.jsonl"))
    if spec_file is None or record is None:
        print(f"{name}: no case spec or fixture record found")
        return
    os.makedirs(OUT, exist_ok=True)
    truth_trace = os.path.join(OUT, f"{name}.trace.jsonl")
    ours_trace = os.path.join(OUT, f"{name}.ours.trace.jsonl")
    if not os.path.exists(truth_trace):
        subprocess.run([sys.executable, os.path.join(TRUTH, "measure.py"), "--spec", spec_file,
                        "--name", name, "--base-dir", os.path.dirname(spec_file), "--json", "--trace", truth_trace],
                       check=True, capture_output=True, cwd=ROOT)
    subprocess.run([BIN, "estimate", *args_for(record), "--trace", ours_trace], check=True,
                   capture_output=True, cwd=ROOT)
    t, o = load(truth_trace), load(ours_trace)
    phases = list(dict.fromkeys(x[3] for x in t))

    def ranks(events):
        """Each event's (phase, rank among the phase's events)."""
        seen, out = {}, []
        for x in events:
            out.append((x[3], seen.get(x[3], 0)))
            seen[x[3]] = seen.get(x[3], 0) + 1
        return out

    rt, ro = ranks(t), ranks(o)
    aligned = {ph for ph in phases
               if [x[:2] for x in t if x[3] == ph] == [y[:2] for y in o if y[3] == ph]}
    for ph in phases:
        if ph not in aligned:
            print(f"{name}: {ph}: the events differ in kind or size (diff_trace.py shows where)")
    shown = 0
    tp = {ph: [i for i, x in enumerate(t) if x[3] == ph] for ph in aligned}
    op = {ph: [i for i, y in enumerate(o) if y[3] == ph] for ph in aligned}
    for ph in phases:
        if ph not in aligned:
            continue
        for n, (i, j) in enumerate(zip(tp[ph], op[ph])):
            x, y = t[i], o[j]
            if x[0] != "F" or x[2] is None or y[2] is None:
                continue
            ft, fo = rt[x[2]], ro[y[2]]
            # an allocation of a phase whose events differ cannot be matched
            if ft[0] not in aligned or fo[0] not in aligned or ft == fo:
                continue
            print(f"{name}: {ph} event {n} ({x[1]} B) frees {ft} [{where(t[x[2]][4])}] in truth, "
                  f"{fo} [{where(o[y[2]][4])}] in ours")
            shown += 1
            if shown >= most:
                return
    if not shown:
        print(f"{name}: every free releases the same allocation where the phases agree")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("names", nargs="+")
    ap.add_argument("--max", type=int, default=6, help="mismatches shown per case")
    o = ap.parse_args()
    for name in o.names:
        try:
            compare(name, o.max)
        except subprocess.CalledProcessError as e:
            print(f"{name}: {e.cmd[1] if len(e.cmd) > 1 else e.cmd} failed: {e.stderr.decode()[-300:]}")


if __name__ == "__main__":
    main()
