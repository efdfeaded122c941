#!/usr/bin/env bash
# Times `estimate_once MODEL RUNS` of this checkout and of an older commit alternately, pinned to
# each CPU in turn (`taskset -c N`), for ROUNDS rounds: the development VM runs one of its vCPUs
# fast and the other slow (a busy neighbour on its core; which one changes over time), so a
# comparison only holds between runs on the same vCPU in the same minutes (docs/performance.md).
# Each round ends with an unpinned run of both: pinned to one vCPU, the simulator has no second
# CPU for its allocator-model thread and runs it on its own thread.
# Builds REV's example in a worktree under .bench/ with its own target dir.
#   validation/pinned_against.sh REV [ROUNDS] [RUNS] [MODEL]     # e.g. 818bf20 3 60 llama-3-70b
set -euo pipefail
cd "$(dirname "$0")/.."
rev=$1
rounds=${2:-3}
runs=${3:-60}
model=${4:-llama-3-70b}
old=.bench/$rev
if [ ! -d "$old" ]; then
  git worktree add --detach "$old" "$rev" >/dev/null
fi
(cd "$old" && CARGO_TARGET_DIR="$PWD/target" cargo build -q --release -p vramscope-formats --example estimate_once)
cargo build -q --release -p vramscope-formats --example estimate_once
old_bin=$old/target/release/examples/estimate_once
new_bin=target/release/examples/estimate_once
cpus=$(nproc)
for r in $(seq "$rounds"); do
  for c in $(seq 0 $((cpus - 1))); do
    echo "== round $r, cpu $c"
    printf '%s: ' "$rev"; taskset -c "$c" "$old_bin" "$model" "$runs"
    printf 'now: '; taskset -c "$c" "$new_bin" "$model" "$runs"
  done
  echo "== round $r, unpinned"
  printf '%s: ' "$rev"; "$old_bin" "$model" "$runs"
  printf 'now: '; "$new_bin" "$model" "$runs"
done
