#!/usr/bin/env python3
"""When the caching-allocator model should get a thread of its own (`MODEL_TIME_BEFORE_THREAD`
in crates/vramscope-core/src/sim/memory.rs; docs/performance.md, thirty-first session).

Builds HEAD in a temporary worktree (the checkout is left alone) with two changes: the budget
comes from $PROBE_BUDGET_US (0: the thread from the first batch, as before the change; a huge
value: never), and each finished simulation prints on stderr how long the model took applying
batches on the simulator's thread and how many batches each thread applied. Then, for each
command, it runs the three budgets interleaved (as validation/ab_runs.py does) and prints the
median wall time of each and the batch split of the thread-from-the-start runs.

    python3 validation/allocator_thread_probe.py [N]      # N runs per budget (default 100)
    python3 validation/allocator_thread_probe.py 30 -- estimate llama-3-8b --mode generate ...
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DEFAULT = [
    ["estimate", "llama-3-70b", "--seq-len", "4096", "-b", "1", "--precision", "amp-bf16", "--json"],
    ["estimate", "llama-3-8b", "--mode", "generate", "--prompt-len", "512", "--new-tokens", "256",
     "-b", "4", "--precision", "bf16", "--json"],
]
BUDGETS = {"thread from the start": "0", "2.5 ms budget (shipped)": None, "one thread": "1000000000"}
MEMORY = "crates/vramscope-core/src/sim/memory.rs"
# (text found once, text it becomes)
PATCH = [
    ("            ModelThread::Auto => feed.thread_after = Some((MODEL_TIME_BEFORE_THREAD, true)),",
     "            ModelThread::Auto => {\n"
     "                let budget = std::env::var(\"PROBE_BUDGET_US\").ok().and_then(|v| v.parse().ok())\n"
     "                    .map_or(MODEL_TIME_BEFORE_THREAD, Duration::from_micros);\n"
     "                feed.thread_after = Some((budget, true))\n"
     "            }"),
    ("const BATCH: usize = 2048;",
     "const BATCH: usize = 2048;\n"
     "static HERE_NS: AtomicUsize = AtomicUsize::new(0);\n"
     "static HERE_BATCHES: AtomicUsize = AtomicUsize::new(0);\n"
     "static THREAD_BATCHES: AtomicUsize = AtomicUsize::new(0);\n"
     "thread_local! { static ON_MODEL_THREAD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) }; }"),
    ("            let Some(mut batch) = next else { return };\n            model.apply(&batch);",
     "            let Some(mut batch) = next else { return };\n            model.apply(&batch);\n"
     "            if ON_MODEL_THREAD.with(|c| c.get()) { THREAD_BATCHES.fetch_add(1, Ordering::Relaxed); }\n"
     "            else { HERE_BATCHES.fetch_add(1, Ordering::Relaxed); }"),
    ("    fn work(&self) {\n", "    fn work(&self) {\n        ON_MODEL_THREAD.with(|c| c.set(true));\n"),
    ("                let Some((left, needs_two_cpus)) = self.thread_after else {\n"
     "                    model.apply(&self.batch);",
     "                let probe_start = Instant::now();\n"
     "                HERE_BATCHES.fetch_add(1, Ordering::Relaxed);\n"
     "                let Some((left, needs_two_cpus)) = self.thread_after else {\n"
     "                    model.apply(&self.batch);\n"
     "                    HERE_NS.fetch_add(probe_start.elapsed().as_nanos() as usize, Ordering::Relaxed);"),
    ("                model.apply(&self.batch);\n                self.batch.clear();\n"
     "                match left.checked_sub(start.elapsed()) {",
     "                model.apply(&self.batch);\n"
     "                HERE_NS.fetch_add(probe_start.elapsed().as_nanos() as usize, Ordering::Relaxed);\n"
     "                self.batch.clear();\n"
     "                match left.checked_sub(start.elapsed()) {"),
    ("    pub(super) fn finish(&mut self) -> MemoryModel {\n        self.flush();",
     "    pub(super) fn finish(&mut self) -> MemoryModel {\n        self.flush();\n"
     "        let model = self.finish_probed();\n"
     "        eprintln!(\"probe {} {} {}\", HERE_NS.load(Ordering::Relaxed) / 1000,\n"
     "                  HERE_BATCHES.load(Ordering::Relaxed), THREAD_BATCHES.load(Ordering::Relaxed));\n"
     "        model\n    }\n\n"
     "    fn finish_probed(&mut self) -> MemoryModel {"),
]


def build(work):
    src = os.path.join(work, "src")
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "--detach", src, "HEAD"], check=True,
                   capture_output=True)
    path = os.path.join(src, MEMORY)
    text = open(path).read()
    for old, new in PATCH:
        if text.count(old) != 1:
            sys.exit(f"allocator_thread_probe.py: {MEMORY}: a text to patch is not there once: {old!r}")
        text = text.replace(old, new)
    open(path, "w").write(text)
    env = dict(os.environ, CARGO_TARGET_DIR=os.path.join(work, "target"))
    subprocess.run(["cargo", "build", "-q", "--release", "-p", "vramscope-cli"], cwd=src, env=env,
                   check=True)
    return os.path.join(work, "target", "release", "vramscope")


def run_once(binary, args, budget):
    """(wall ms, model's µs on the simulator's thread, batches applied there, on the thread)."""
    env = dict(os.environ)
    env.pop("PROBE_BUDGET_US", None)
    if budget is not None:
        env["PROBE_BUDGET_US"] = budget
    r, w = os.pipe()
    null = os.open(os.devnull, os.O_WRONLY)
    start = time.perf_counter_ns()
    pid = os.posix_spawn(binary, [binary, *args], env,
                         file_actions=[(os.POSIX_SPAWN_DUP2, null, 1), (os.POSIX_SPAWN_DUP2, w, 2)])
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.waitpid(pid, 0)
    wall = (time.perf_counter_ns() - start) / 1e6
    os.close(r)
    os.close(null)
    probes = [line.split()[1:] for line in data.decode().splitlines() if line.startswith("probe ")]
    here_us, here, there = (int(x) for x in probes[-1]) if probes else (0, 0, 0)
    return wall, here_us, here, there


def main():
    argv = sys.argv[1:]
    n = int(argv[0]) if argv and argv[0].isdigit() else 100
    commands = [argv[argv.index("--") + 1:]] if "--" in argv else DEFAULT
    work = tempfile.mkdtemp(prefix="vramscope_thread_probe_")
    try:
        binary = build(work)
        for args in commands:
            rows = {name: [] for name in BUDGETS}
            order = list(BUDGETS.items())
            for i in range(n):
                for name, budget in (order if i % 2 == 0 else order[::-1]):
                    rows[name].append(run_once(binary, args, budget))
            print(f"vramscope {' '.join(args)}: {n} runs per budget, interleaved")
            for name, runs in rows.items():
                walls = sorted(r[0] for r in runs)
                print(f"  {name:26} median {statistics.median(walls):7.2f} ms  min {walls[0]:7.2f} ms")
            one = rows["one thread"]
            print(f"  the model's own work (one thread): median "
                  f"{statistics.median(r[1] for r in one) / 1000:.2f} ms over {one[0][2]} batches")
            split = [f"{r[3]}/{r[2] + r[3]}" for r in rows["thread from the start"][:12]]
            print(f"  batches the thread applied (thread from the start, first runs): {' '.join(split)}")
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", os.path.join(work, "src")],
                       capture_output=True)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
