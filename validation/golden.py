#!/usr/bin/env python3
"""Byte-identity check for engine refactors: runs `vramscope estimate --json` for every committed
truth fixture case (the commands compare.py builds) plus a few extra commands, and writes every
output, one JSON document per line, to OUT. Diff two OUT files made before and after a change:
no difference means every estimate (peaks, phases, breakdowns, live tensors, layers) is unchanged.

    python3 validation/golden.py /tmp/before.jsonl && ... && python3 validation/golden.py /tmp/after.jsonl
    python3 validation/golden.py /tmp/before.jsonl --bin /path/to/an/older/vramscope
    python3 validation/golden.py --compare /tmp/before.jsonl /tmp/after.jsonl

`--compare` matches the two files' outputs by command (a fixture added in between shifts the
lines) and prints each command whose output changed, with its peaks and the JSON keys that differ.
    cmp /tmp/before.jsonl /tmp/after.jsonl
"""
import glob, json, subprocess, sys
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, "validation")
from compare import args_for  # noqa: E402

EXTRA = [
    ["estimate", "llama-3-70b", "--seq-len", "4096", "--precision", "amp-bf16"],
    ["estimate", "llama-3-8b", "--seq-len", "2048", "--precision", "amp-bf16", "--gradient-checkpointing"],
    ["estimate", "llama-3-8b", "--mode", "generate", "--prompt-len", "512", "--new-tokens", "256"],
    ["estimate", "gpt2", "--batch-size", "8", "--seq-len", "1024", "--lora", "8"],
    ["estimate", "mixtral-8x7b", "--seq-len", "512", "--precision", "amp-bf16", "--qlora", "16"],
    ["estimate", "vit_b_16", "--batch-size", "32"],
    ["estimate", "resnet50", "--batch-size", "64", "--precision", "amp-fp16"],
]
EXTRA = [[*c, "--json"] for c in EXTRA]
BIN = sys.argv[sys.argv.index("--bin") + 1] if "--bin" in sys.argv else "target/release/vramscope"


def run(cmd):
    p = subprocess.run([BIN, *cmd], capture_output=True, text=True)
    return json.dumps({"cmd": cmd, "rc": p.returncode, "out": p.stdout, "err": p.stderr})


def compare(before, after):
    load = lambda p: {tuple(d["cmd"]): d for d in map(json.loads, open(p))}  # noqa: E731
    a, b = load(before), load(after)
    changed = 0
    for cmd, x in a.items():
        y = b.get(cmd)
        if y is None or x == y:
            continue
        changed += 1
        line = " ".join(cmd[1:])
        try:
            ox, oy = json.loads(x["out"]), json.loads(y["out"])
        except ValueError:
            print(f"{line}: exit {x['rc']} -> {y['rc']}")
            continue
        peaks = [f"{k} {ox['peak'][k]} -> {oy['peak'][k]}" for k in ("allocated_bytes", "reserved_bytes")
                 if ox["peak"][k] != oy["peak"][k]]
        keys = [k for k in ox if ox[k] != oy.get(k)]
        print(f"{line}: {', '.join(peaks) or 'peaks unchanged'}; differs in {', '.join(keys)}")
    print(f"{changed} of {len(a)} outputs changed; {len(b.keys() - a.keys())} commands only in {after}, "
          f"{len(a.keys() - b.keys())} only in {before}")


def main():
    if sys.argv[1] == "--compare":
        return compare(sys.argv[2], sys.argv[3])
    cmds = []
    for f in sorted(glob.glob("fixtures/truth/*.jsonl")):
        for line in open(f):
            if line.strip():
                cmds.append(["estimate", *args_for(json.loads(line))])
    cmds += EXTRA
    with ThreadPoolExecutor(2) as ex:
        lines = list(ex.map(run, cmds))
    open(sys.argv[1], "w").write("\n".join(lines) + "\n")
    print(f"{len(lines)} commands -> {sys.argv[1]}")


if __name__ == "__main__":
    main()
