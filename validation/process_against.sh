#!/usr/bin/env bash
# Whole `vramscope` processes of this checkout and of an older commit, alternately (same machine,
# same minutes): elapsed time, page faults, user and kernel time per process, from `perf stat -r
# RUNS` (docs/performance.md). What a user timing one command sees, start-up and output included;
# the benches time the engine warm. Builds REV in a worktree under .bench/ with its own target dir.
#   validation/process_against.sh REV [ROUNDS] [RUNS] [-- VRAMSCOPE ARGS]
#   validation/process_against.sh da955cd 4 30 -- estimate llama-3-70b --seq-len 4096 -b 1 --precision amp-bf16 --json
set -euo pipefail
cd "$(dirname "$0")/.."
rev=$1
rounds=${2:-4}
runs=${3:-30}
shift $(( $# < 3 ? $# : 3 ))
[ "${1:-}" = "--" ] && shift
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(estimate llama-3-70b --seq-len 4096 -b 1 --precision amp-bf16 --json)
command -v perf >/dev/null || { echo "needs perf (linux-perf)" >&2; exit 1; }
old=.bench/$rev
if [ ! -d "$old" ]; then
  git worktree add --detach "$old" "$rev" >/dev/null
fi
(cd "$old" && CARGO_TARGET_DIR="$PWD/target" cargo build -q --release -p vramscope-cli)
cargo build -q --release -p vramscope-cli
new_bin=target/release/vramscope
old_bin=$old/target/release/vramscope
# one line per binary: means over RUNS processes of elapsed time, page faults, user and kernel time
stat() {
  perf stat -r "$runs" -e page-faults,user_time,system_time "$1" "${args[@]}" 2>&1 >/dev/null \
    | python3 -c 'import re, sys
v = {}
for l in sys.stdin:
    m = re.match(r"\s*([\d.,]+)\s+(?:\+-\s+[\d.,]+\s+)?(?:ns\s+)?(page-faults|user_time|system_time|seconds time elapsed)", l)
    if m:
        v[m.group(2)] = float(m.group(1).replace(",", ""))
print("elapsed %5.2f ms  faults %5.0f  user %5.2f ms  kernel %5.2f ms" % (
    v["seconds time elapsed"] * 1e3, v["page-faults"], v["user_time"] / 1e6, v["system_time"] / 1e6))'
}
echo "/bin/true: $(perf stat -r 50 /bin/true 2>&1 | awk '/elapsed/ {printf "%.2f ms", $1 * 1000}')"
for r in $(seq "$rounds"); do
  echo "round $r  $rev: $(stat "$old_bin")"
  echo "round $r  $(git rev-parse --short HEAD): $(stat "$new_bin")"
done
