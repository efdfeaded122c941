#!/usr/bin/env python3
"""How many truth fixture cases a vramscope binary estimates byte-exactly: every phase's
allocated-after, peak allocated and peak reserved equal to the truth record's (the tests' checks
are tolerances; this counts the cases with no difference at all). Prints each inexact case with its
first differences, then the count.

    python3 validation/exact_phases.py [BINARY] [--cases-at REV] [--quiet]

BINARY defaults to target/release/vramscope. A case the binary cannot run (an older binary without
a flag a fixture uses) is listed as an error and not counted. `--cases-at REV` counts only the
cases the fixtures had at git revision REV, to compare two binaries on the same cases.
Only the Python standard library is needed.
"""
import argparse
import glob
import json
import subprocess
import sys

sys.path.insert(0, "validation")
from compare import args_for  # noqa: E402

KEYS = (("after_alloc", "allocated_after_bytes"), ("peak_alloc", "peak_allocated_bytes"),
        ("peak_reserved", "peak_reserved_bytes"))


def differences(binary, case):
    """The phase differences of one case (None when the binary fails on it)."""
    p = subprocess.run([binary, "estimate", *args_for(case)], capture_output=True, text=True)
    if p.returncode:
        return None
    ours = {ph["name"]: ph for ph in json.loads(p.stdout)["phases"]}
    out = []
    for ph in case["phases"]:
        o = ours.get(ph["phase"])
        if o is None:
            continue
        for tk, ok in KEYS:
            if o[ok] != ph[tk]:
                out.append(f"{ph['phase']}.{tk}:{o[ok] - ph[tk]:+}")
    return out


def cases_at(rev):
    """The names of the truth cases committed at `rev`."""
    files = subprocess.run(["git", "ls-tree", "--name-only", rev, "fixtures/truth/"],
                           capture_output=True, text=True, check=True).stdout.split()
    names = set()
    for f in files:
        if f.endswith(".jsonl"):
            text = subprocess.run(["git", "show", f"{rev}:{f}"], capture_output=True, text=True,
                                  check=True).stdout
            names |= {json.loads(l)["name"] for l in text.splitlines() if l.strip()}
    return names


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("binary", nargs="?", default="target/release/vramscope")
    ap.add_argument("--cases-at", metavar="REV")
    ap.add_argument("--quiet", action="store_true")
    a = ap.parse_args()
    only = cases_at(a.cases_at) if a.cases_at else None
    total = exact = errors = 0
    for path in sorted(glob.glob("fixtures/truth/*.jsonl")):
        for line in open(path):
            case = json.loads(line)
            if only is not None and case["name"] not in only:
                continue
            d = differences(a.binary, case)
            if d is None:
                errors += 1
                print(f"{path}: {case['name']}: the binary failed")
                continue
            total += 1
            exact += not d
            if d and not a.quiet:
                print(f"{path}: {case['name']}: {' '.join(d[:4])}")
    print(f"{exact} of {total} cases byte-exact in every phase ({errors} not run)")


if __name__ == "__main__":
    main()
