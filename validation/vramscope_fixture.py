#!/usr/bin/env python3
"""Turns compact truth records of `py:` cases into fixture lines vramscope's tests run: each case's
`vramscope` entry (in the case list) gives the config vramscope reads (`config`), its flags
(`args`, stored as `extra_args`) and optionally its `mode` (`generate`: the record's `seq` is the
prompt, passed as --prompt-len by `args`, so `seq` is dropped).

Usage: python3 validation/vramscope_fixture.py CASES.jsonl COMPACT.jsonl OUT.jsonl
"""
import json
import sys


def main():
    cases_path, compact_path, out_path = sys.argv[1:4]
    cases = {c["name"]: c for c in map(json.loads, open(cases_path))}
    with open(out_path, "w") as out:
        for line in open(compact_path):
            r = json.loads(line)
            v = cases[r["name"]]["vramscope"]
            r["model"], r["extra_args"], r["task"] = v["config"], v["args"], "causal-lm"
            if v.get("mode"):
                r["mode"] = v["mode"]
            if r["mode"] == "generate":
                r["seq"] = None
            out.write(json.dumps(r, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
