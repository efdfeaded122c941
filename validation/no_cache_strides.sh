#!/usr/bin/env bash
# How far the stride of a long generation without a KV cache can go (docs/performance.md,
# "Generation"): builds vramscope from HEAD with other node budgets, in a temporary worktree and
# target folder (the checkout is left alone), and compares each build with the truth fixtures'
# long no-cache generations (peak allocated and reserved error, steps simulated, stride).
#
#   validation/no_cache_strides.sh                    # every step, then 100000, 30000, 15000
#   validation/no_cache_strides.sh full 50000         # the budgets to try
#
# `full` records every decode step (STEP_BUDGET unbounded); a number is NO_CACHE_BUDGET (the
# default is 100000). About a minute per build. Last, each build's estimate of llama-3-8b
# without a cache (no truth at that size: the builds against each other).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
budgets=("$@")
[ ${#budgets[@]} -gt 0 ] || budgets=(full 100000 30000 15000)
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/src" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add --detach "$work/src" HEAD >/dev/null
# the long no-cache generations of the truth fixtures: the file and the case name
cases=(
  "hf_generate_no_cache gpt2_nocache_b8_p256_n700_fp32"
  "hf_generate_no_cache gpt2_nocache_b4_p64_n500_fp32"
  "hf_generate_no_cache qwen25_05b_nocache_b2_p64_n300_pbf16"
  "hf_generate_no_cache qwen2_nocache_b2_p64_n1200_pbf16"
  "hf_t5_no_cache t5_nc_b4_p128_n300_fp32"
  "hf_generate_4bit gpt2_4bit_nocache_b8_p256_n300_pbf16"
)
src=crates/vramscope-formats/src/hf/generate.rs
for budget in "${budgets[@]}"; do
  git -C "$work/src" checkout -q -- "$src"
  if [ "$budget" = full ]; then
    sed -i 's/^pub const STEP_BUDGET: usize = .*/pub const STEP_BUDGET: usize = usize::MAX;/' "$work/src/$src"
  else
    sed -i "s/^pub const NO_CACHE_BUDGET: usize = .*/pub const NO_CACHE_BUDGET: usize = $budget;/" "$work/src/$src"
  fi
  (cd "$work/src" && CARGO_TARGET_DIR="$work/target" cargo build -q --release -p vramscope-cli)
  bin="$work/target/release/vramscope"
  echo "== budget $budget"
  for c in "${cases[@]}"; do
    set -- $c
    python3 validation/compare.py "fixtures/truth/$1.jsonl" --only "$2" --bin "$bin" | sed -n 1p
    # the same command's steps simulated and stride
    python3 - "$bin" "fixtures/truth/$1.jsonl" "$2" <<'EOF'
import json, subprocess, sys
sys.path.insert(0, "validation")
from compare import args_for
bin_, fixture, name = sys.argv[1:]
case = next(json.loads(l) for l in open(fixture) if json.loads(l)["name"] == name)
out = json.loads(subprocess.run([bin_, "estimate", *args_for(case)], capture_output=True, text=True,
                                check=True).stdout)
g = out["generation"]
print(f"    {g['simulated_decode_steps']} of {g['decode_steps']} decode steps simulated, stride {g['skeleton_stride']}")
EOF
  done
  # a larger model without truth at its size, compared across the builds
  /usr/bin/time -f "llama-3-8b: %e s, %M KB resident at most" \
      "$bin" estimate llama-3-8b -b 4 --prompt-len 512 --new-tokens 256 --precision bf16 \
      --mode generate --use-cache false --json > "$work/llama.json"
  python3 - "$work/llama.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
p, g = d["peak"], d["generation"]
print(f"llama-3-8b b4 512+256 bf16: peak {p['allocated_bytes']} B allocated, "
      f"{p['reserved_bytes']} B reserved; {g['simulated_decode_steps']} of {g['decode_steps']} "
      f"steps simulated, stride {g['skeleton_stride']}")
EOF
done
