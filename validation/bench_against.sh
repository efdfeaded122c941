#!/usr/bin/env bash
# Runs the estimate benches of this checkout and of an older commit alternately (same machine, same
# minutes), so that a speed change is measured side by side rather than against numbers taken on
# another day (docs/performance.md). Builds REV in a worktree under .bench/ with its own target dir.
#   validation/bench_against.sh REV [ROUNDS] [FILTER]     # e.g. 802ece3 2 transformer_train
# With OLD_HEAP_KEPT=1, REV's bench also runs with the heap settings of vramscope_core::heap
# (through GLIBC_TUNABLES), for a commit older than that function: the engine's gain alone.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=$1
rounds=${2:-2}
filter=${3:-transformer_train}
old=.bench/$rev
if [ ! -d "$old" ]; then
  git worktree add --detach "$old" "$rev" >/dev/null
fi
bench_bin() {  # prints the path of the estimate bench binary built in $1 (a checkout)
  (cd "$1" && CARGO_TARGET_DIR="$PWD/target" cargo bench -q -p vramscope-formats --bench estimate \
      --no-run --message-format=json 2>/dev/null) \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "estimate" and m.get("executable"):
        print(m["executable"])'
}
new_bin=$(bench_bin .)
old_bin=$(bench_bin "$old")
for r in $(seq "$rounds"); do
  echo "== round $r: $rev"
  "$old_bin" --bench "$filter"
  if [ "${OLD_HEAP_KEPT:-0}" = 1 ]; then
    echo "== round $r: $rev, heap kept"
    GLIBC_TUNABLES=glibc.malloc.trim_threshold=268435456:glibc.malloc.mmap_threshold=33554432 \
      "$old_bin" --bench "$filter"
  fi
  echo "== round $r: $(git rev-parse --short HEAD)"
  "$new_bin" --bench "$filter"
done
