#!/usr/bin/env python3
"""Where a cold `vramscope estimate` process spends its time, step by step (docs/performance.md,
twenty-sixth session): builds vramscope from HEAD in a temporary worktree and target folder
(the checkout is left alone) with a wall-clock stamp printed on stderr at each step of `main` and
`estimate::run` (and where the simulator hands the allocator model's thread its last
message), spawns it N times as a shell would, and prints each step's median and minimum,
from the spawn to the parent's wait:

    python3 validation/cold_process_steps.py [N] [-- ESTIMATE ARGS...]
    python3 validation/cold_process_steps.py 200 -- llama-3-70b --seq-len 4096 -b 1 --precision amp-bf16 --json

The stamps are the only change; each costs an environment lookup and, with TMARK set, one line
on stderr. About a minute for the build.
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DEFAULT = ["llama-3-70b", "--seq-len", "4096", "-b", "1", "--precision", "amp-bf16", "--json"]

# (file, text found once, text it becomes): a stamp after each step
PATCH = [
    ("crates/vramscope-cli/src/main.rs", "fn command_main() -> u8 {\n",
     "pub(crate) fn tmark(what: &str) {\n"
     "    if std::env::var_os(\"TMARK\").is_some() {\n"
     "        let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();\n"
     "        eprintln!(\"{what} {}\", t.as_nanos());\n"
     "    }\n"
     "}\n"
     "fn command_main() -> u8 {\n    tmark(\"main\");\n"),
    ("crates/vramscope-cli/src/main.rs", "    let cli = Cli::parse();",
     "    tmark(\"tune\");\n    let cli = Cli::parse();\n    tmark(\"parse\");"),
    ("crates/vramscope-cli/src/estimate.rs",
     "    let loaded = model::load(&a.model, a.model.batch_size, &cfg)?;",
     "    let loaded = model::load(&a.model, a.model.batch_size, &cfg)?;\n    crate::tmark(\"graph\");"),
    ("crates/vramscope-cli/src/estimate.rs",
     "    let sim = simulate(&loaded.graph, &cfg)?;\n",
     "    let sim = simulate(&loaded.graph, &cfg)?;\n    crate::tmark(\"sim\");\n"),
    ("crates/vramscope-cli/src/estimate.rs", "    if a.json {\n        output::report_json(&report)?;",
     "    crate::tmark(\"report\");\n    if a.json {\n        output::report_json(&report)?;"),
    ("crates/vramscope-cli/src/estimate.rs",
     "    std::mem::forget((loaded, sim, report));\n    Ok(())",
     "    std::mem::forget((loaded, sim, report));\n    crate::tmark(\"out\");\n    Ok(())"),
    # the simulator's last message sent: what follows is the wait for the allocator model's
    # thread to apply the rest (for an estimate that simulates twice, the second run's)
    ("crates/vramscope-core/src/sim/memory.rs",
     "    pub(super) fn finish(&mut self) -> MemoryModel {\n",
     "    pub(super) fn finish(&mut self) -> MemoryModel {\n"
     "        if std::env::var_os(\"TMARK\").is_some() {\n"
     "            let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();\n"
     "            eprintln!(\"finish {}\", t.as_nanos());\n"
     "        }\n"),
]
NAMES = {"main": "spawn to main", "tune": "heap tuning", "parse": "argument parsing",
         "graph": "graph", "finish": "simulation, to its last message",
         "sim": "then the allocator thread catching up, the result",
         "report": "report", "out": "output", "exit": "return from main to the wait"}


def build(work):
    src = os.path.join(work, "src")
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", src, "HEAD"], check=True,
                   capture_output=True)
    for path, old, new in PATCH:
        p = os.path.join(src, path)
        text = open(p).read()
        if text.count(old) != 1:
            sys.exit(f"cold_process_steps.py: {path}: the text to stamp after is not there once: {old!r}")
        open(p, "w").write(text.replace(old, new))
    env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(work, "target"))
    subprocess.run(["cargo", "build", "-q", "--release", "-p", "vramscope-cli"], cwd=src, env=env,
                   check=True)
    return os.path.join(work, "target", "release", "vramscope")


def run_once(binary, args):
    r, w = os.pipe()
    null = os.open(os.devnull, os.O_WRONLY)
    env = dict(os.environ, TMARK="1")
    start = time.time_ns()
    pid = os.posix_spawn(binary, [binary, "estimate", *args], env,
                         file_actions=[(os.POSIX_SPAWN_DUP2, null, 1), (os.POSIX_SPAWN_DUP2, w, 2)])
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.waitpid(pid, 0)
    end = time.time_ns()
    os.close(r)
    os.close(null)
    steps, prev = {}, start
    for line in data.decode().splitlines():
        words = line.split()
        if len(words) == 2 and words[1].isdigit():
            steps[words[0]] = (int(words[1]) - prev) / 1e6
            prev = int(words[1])
    steps["exit"] = (end - prev) / 1e6
    steps["total"] = (end - start) / 1e6
    return steps


def main():
    argv = sys.argv[1:]
    n = int(argv[0]) if argv and argv[0].isdigit() else 200
    args = argv[argv.index("--") + 1:] if "--" in argv else DEFAULT
    work = tempfile.mkdtemp(prefix="vramscope_cold_steps_")
    try:
        binary = build(work)
        rows = [run_once(binary, args) for _ in range(n)]
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", os.path.join(work, "src")],
                       capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    print(f"vramscope estimate {' '.join(args)}: {n} processes, ms from the spawn to the wait")
    for key in rows[0]:
        values = sorted(r[key] for r in rows)
        print(f"  {NAMES.get(key, key):50} median {statistics.median(values):7.3f}  min {values[0]:7.3f}")


if __name__ == "__main__":
    main()
