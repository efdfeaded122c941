#!/usr/bin/env python3
"""Which truth-fixture errors a change moved: compares two docs/accuracy.json (written by
validation/accuracy.sh), given as files or as git revisions, case by case, on the peak allocated
error, the peak reserved error and the worst phase error (all in percent), and prints every value
that moved closer to truth (BETTER) or away from it (WORSE), then the counts.

    python3 validation/accuracy_diff.py b0f53be HEAD
    python3 validation/accuracy_diff.py old_accuracy.json docs/accuracy.json
"""
import json, os, subprocess, sys


def load(where):
    if os.path.exists(where):
        return json.load(open(where))
    text = subprocess.run(["git", "show", f"{where}:docs/accuracy.json"], check=True,
                          capture_output=True, text=True).stdout
    return json.loads(text)


def values(row):
    return {"peak": row["err"], "reserved": row["rerr"], "worst phase": row["worst_phase"][0]}


before, after = load(sys.argv[1]), load(sys.argv[2])
better = worse = new = 0
for fixture, rows in after.items():
    old = {r["case"]: r for r in before.get(fixture, [])}
    for r in rows:
        if r["case"] not in old:
            new += 1
            continue
        was, now = values(old[r["case"]]), values(r)
        for key in now:
            if abs(abs(was[key]) - abs(now[key])) > 1e-9:
                tag = "BETTER" if abs(now[key]) < abs(was[key]) else "WORSE"
                better += tag == "BETTER"
                worse += tag == "WORSE"
                print(f"{tag:6} {fixture}: {r['case']} {key} {was[key]:+.3f}% -> {now[key]:+.3f}%")
print(f"{better} closer to truth, {worse} further, {new} new cases")
