#!/usr/bin/env python3
"""Sets every field of every built-in config (crates/vramscope-formats/data/hf/*.json) and every
fixture config (fixtures/hf/configs/*.json), and of their `text_config`, to a wrong or extreme
value (0, -1, 3, 2^32 - 1, 1e15, 2^63, 1.5, "x", null, [], {}) or removes it, and runs
`vramscope estimate` on each in training (`--seq-len 64`), generation (`--mode generate
--prompt-len 16 --new-tokens 4`), question answering (`--task qa`: the per-token heads) and the
bare model in inference (`--task feature-extraction --mode infer`) and a padded batch with eager
attention (`--padded --attn-implementation eager`). A run fails the sweep if it panics, is killed, exits with a code
other than 0, 1 or 2, fails without a message, or takes over 5 s. Prints each failure and the total.

    cargo build --release
    python3 validation/fuzz_configs.py [--bin target/release/vramscope] [--jobs 2]

The in-process version over fixtures/hf/configs is the test
`mutated_configs_build_or_name_the_file` (crates/vramscope-formats/tests/hf_config.rs).
"""
import argparse
import concurrent.futures as cf
import glob
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MUTATIONS = [0, -1, 3, 2**32 - 1, 10**15, 2**63, 1.5, "x", None, [], {}]
REMOVE = "__remove__"
MODES = [["--seq-len", "64"], ["--mode", "generate", "--prompt-len", "16", "--new-tokens", "4"],
         ["--seq-len", "64", "--task", "qa"],
         ["--seq-len", "64", "--task", "feature-extraction", "--mode", "infer"],
         ["--seq-len", "64", "--padded", "--attn-implementation", "eager"]]


def fields(config, prefix=()):
    for key, value in config.items():
        yield prefix + (key,)
        if key == "text_config" and isinstance(value, dict):
            yield from fields(value, prefix + (key,))


def mutated(path, field, mutation):
    config = json.load(open(path))
    holder = config
    for key in field[:-1]:
        holder = holder[key]
    if mutation == REMOVE:
        del holder[field[-1]]
    else:
        holder[field[-1]] = mutation
    return config


def run(job):
    binary, path, field, mutation = job
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(mutated(path, field, mutation), f)
        name = f.name
    failures = []
    try:
        for mode in MODES:
            what = (os.path.basename(path), ".".join(field), mutation, " ".join(mode))
            try:
                r = subprocess.run([binary, "estimate", name, *mode], capture_output=True, text=True,
                                   timeout=5, env=dict(os.environ, RUST_BACKTRACE="0"))
            except subprocess.TimeoutExpired:
                failures.append((*what, "time-out"))
                continue
            bad_exit = r.returncode not in (0, 1, 2) or (r.returncode != 0 and not r.stderr.strip())
            if bad_exit or "panicked" in r.stderr:
                failures.append((*what, r.returncode, r.stderr[:300]))
    finally:
        os.unlink(name)
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/vramscope"))
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    configs = sorted(glob.glob(os.path.join(ROOT, "crates/vramscope-formats/data/hf/*.json"))
                     + glob.glob(os.path.join(ROOT, "fixtures/hf/configs/*.json")))
    jobs = [(args.bin, c, f, m) for c in configs for f in fields(json.load(open(c)))
            for m in MUTATIONS + [REMOVE]]
    failed = 0
    with cf.ProcessPoolExecutor(args.jobs) as ex:
        for failures in ex.map(run, jobs, chunksize=20):
            for f in failures:
                failed += 1
                print(f, flush=True)
    print(f"{len(jobs)} mutations x {len(MODES)} modes: {failed} failures")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
