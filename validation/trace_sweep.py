#!/usr/bin/env python3
"""Event-level accuracy: for the truth cases of `validation/cases_*.jsonl` that have a committed
fixture (`fixtures/truth/*.jsonl`, which gives vramscope's flags), compares each phase's
allocations and frees, size by size and in order, between ../shared/truth's `--trace` and
`vramscope estimate --trace`, for one or more vramscope binaries, and counts the cases whose every
phase is identical. Frees in a row commute (the caching allocator's state after them is the
same, whatever their order), so each run of frees is compared as a sorted list; the teardown is
not compared.

    python3 validation/trace_sweep.py [--match REGEX] [--every K] [--traces DIR] BIN [BIN ...]

Truth traces are measured once (with the truth venv, `$VENV` or ~/.venvs/truth) and kept under
DIR (default .truth/traces/, ignored by git), so a second run compares binaries in minutes. One
line per case: its name and, per binary, `exact` or the phases that differ; `--every 4` takes
every fourth case (a sample of every fixture file).
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
sys.path.insert(0, HERE)
from compare import args_for  # noqa: E402

VENV = os.environ.get("VENV", os.path.expanduser("~/.venvs/truth"))
RUN_CASES = os.path.join(ROOT, "..", "shared", "truth", "run_cases.py")


def events(path):
    """Each phase's (alloc | free, bytes) list, every run of frees sorted."""
    phase, out = None, {}
    for line in open(path):
        e = json.loads(line)
        if e["ev"] == "phase":
            phase = e["phase"]
            out.setdefault(phase, [])
        elif e["ev"] in ("alloc", "free") and e["bytes"] > 0:
            out.setdefault(phase, []).append((e["ev"], e["bytes"]))
    for phase, evs in out.items():
        res, run = [], []
        for e in evs:
            if e[0] == "free":
                run.append(e)
                continue
            res += sorted(run)
            run = []
            res.append(e)
        out[phase] = res + sorted(run)
    out.pop("teardown", None)
    return out


def truth_trace(cases_file, name, folder):
    """The truth trace of case `name` (measured into `folder` once)."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, "truth.jsonl")
    if not os.path.exists(path):
        subprocess.run([os.path.join(VENV, "bin", "python"), RUN_CASES, os.path.abspath(cases_file),
                        "--only", name, "--trace-dir", folder, "--out", os.path.join(folder, "result.jsonl"),
                        "--jobs", "1"], capture_output=True)
        made = [p for p in glob.glob(os.path.join(folder, "*.trace.jsonl"))]
        if not made:
            return None
        os.replace(made[0], path)
    return path


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bins", nargs="+", metavar="BIN")
    ap.add_argument("--match", default="", help="only the case lines this regular expression finds")
    ap.add_argument("--every", type=int, default=1, metavar="K", help="every K-th case")
    ap.add_argument("--traces", default=os.path.join(ROOT, ".truth", "traces"), metavar="DIR")
    a = ap.parse_args()
    fixtures = {}
    for f in glob.glob(os.path.join(ROOT, "fixtures", "truth", "*.jsonl")):
        for line in open(f):
            if line.strip():
                d = json.loads(line)
                fixtures[d["name"]] = d
    cases = []
    for f in sorted(glob.glob(os.path.join(HERE, "cases_*.jsonl"))):
        for line in open(f):
            if line.strip() and re.search(a.match, line):
                case = json.loads(line)
                if case["name"] in fixtures:
                    cases.append((f, case))
    cases = cases[::a.every]

    def one(item):
        f, case = item
        name = case["name"]
        folder = os.path.join(a.traces, name)
        truth = truth_trace(f, name, folder)
        if truth is None:
            return name, None
        t = events(truth)
        res = []
        for i, b in enumerate(a.bins):
            ours = os.path.join(folder, f"ours_{i}.jsonl")
            p = subprocess.run([b, "estimate", *args_for(fixtures[name]), "--trace", ours],
                               capture_output=True, text=True, cwd=ROOT)
            if p.returncode:
                res.append("error")
                continue
            o = events(ours)
            bad = [ph for ph in t if t[ph] != o.get(ph, [])]
            res.append(",".join(bad) if bad else "exact")
        return name, res

    exact = [0] * len(a.bins)
    measured = 0
    with ThreadPoolExecutor(2) as ex:
        for name, res in ex.map(one, cases):
            if res is None:
                print(f"{name}: truth failed", flush=True)
                continue
            measured += 1
            print(name, " ".join(res), flush=True)
            for i, r in enumerate(res):
                exact[i] += r == "exact"
    for b, n in zip(a.bins, exact):
        print(f"{b}: {n} of {measured} cases identical to truth in every phase")


if __name__ == "__main__":
    main()
