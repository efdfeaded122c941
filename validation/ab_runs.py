#!/usr/bin/env python3
"""Whole-process A/B timing: runs each command N times, interleaved (A B, then B A, ...), so
that a virtual machine's drifting speed hits every variant alike; prints min / p25 / median wall
time per command. Each run is a posix_spawn with stdout and stderr on /dev/null, timed from the
spawn to the wait, so the numbers include process creation as a shell would pay it.

    python3 validation/ab_runs.py 300 "/bin/true" \
        "target/release/vramscope estimate llama-3-70b --seq-len 4096 -b 1 --precision amp-bf16 --json" \
        "NAME=VALUE /path/to/other/vramscope estimate ..."

Leading NAME=VALUE words set environment variables for that command only.
"""
import os
import shlex
import shutil
import statistics
import sys
import time


def parse(command):
    words = shlex.split(command)
    env = dict(os.environ)
    while words and "=" in words[0] and not words[0].startswith(("/", ".")):
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    if not words:
        sys.exit(f"ab_runs.py: {command!r}: no program to run")
    program = shutil.which(words[0]) or words[0]
    if not os.access(program, os.X_OK):
        sys.exit(f"ab_runs.py: {words[0]!r}: not an executable program")
    return [program, *words[1:]], env


def main():
    if len(sys.argv) < 3 or not sys.argv[1].isdigit():
        sys.exit(__doc__)
    n = int(sys.argv[1])
    commands = [parse(c) for c in sys.argv[2:]]
    null = os.open(os.devnull, os.O_WRONLY)
    to_null = [(os.POSIX_SPAWN_DUP2, null, 1), (os.POSIX_SPAWN_DUP2, null, 2)]
    times = [[] for _ in commands]
    for i in range(n):
        order = range(len(commands)) if i % 2 == 0 else reversed(range(len(commands)))
        for j in order:
            argv, env = commands[j]
            start = time.perf_counter()
            pid = os.posix_spawn(argv[0], argv, env, file_actions=to_null)
            _, status = os.waitpid(pid, 0)
            times[j].append((time.perf_counter() - start) * 1e3)
            if status != 0:
                sys.exit(f"ab_runs.py: {sys.argv[2 + j]!r} failed (wait status {status})")
    for command, ts in zip(sys.argv[2:], times):
        ts.sort()
        print(f"min {ts[0]:.2f}  p25 {ts[len(ts) // 4]:.2f}  median {statistics.median(ts):.2f} ms  {command}")


if __name__ == "__main__":
    main()
