#!/usr/bin/env python3
"""Turns compact truth records of `py:` cases into fixture lines vramscope's tests run: each case's
`vramscope` entry (in the case list) gives the config vramscope reads (`config`), its flags
(`args`, stored as `extra_args`) and optionally its `task` (vramscope's --task for that case,
instead of the one TASK below) and its `mode` (`generate`: the record's `seq` is the
prompt, passed as --prompt-len by `args`, so `seq` is dropped). A case without a `vramscope`
entry (an `hf:` case) is written as compact_results.py made it.

Usage: python3 validation/vramscope_fixture.py CASES.jsonl COMPACT.jsonl OUT.jsonl [--task TASK]
(TASK: vramscope's --task, `causal-lm` by default, `seq2seq-lm` for T5)
"""
import argparse
import json


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases")
    ap.add_argument("compact")
    ap.add_argument("out")
    ap.add_argument("--task", default="causal-lm")
    args = ap.parse_args()
    cases = {c["name"]: c for c in map(json.loads, open(args.cases))}
    with open(args.out, "w") as out:
        for line in open(args.compact):
            r = json.loads(line)
            v = cases[r["name"]].get("vramscope")
            if v is None:
                # an `hf:` case: vramscope reads the config the record names
                r["model"] = r["model"].removeprefix("hf:")
                out.write(json.dumps(r, separators=(",", ":")) + "\n")
                continue
            r["model"], r["extra_args"], r["task"] = v["config"], v["args"], v.get("task", args.task)
            if v.get("mode"):
                r["mode"] = v["mode"]
            if r.get("mode") == "generate":
                r["seq"] = None
            out.write(json.dumps(r, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    main()
