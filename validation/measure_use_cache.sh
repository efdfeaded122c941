#!/usr/bin/env bash
# Measures cases_use_cache.jsonl (a causal-LM training step with and without the config's default
# use_cache=True) with ../shared/truth, writes the compact records to
# validation/measured_use_cache.jsonl and prints each pair's peak allocated (~30 s). vramscope
# models use_cache=False; this is what keeping the DynamicCache in the output adds.
#   validation/measure_use_cache.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-$HOME/.venvs/truth}
mkdir -p .truth/raw
"$VENV/bin/python" ../shared/truth/run_cases.py validation/cases_use_cache.jsonl \
    --out .truth/raw/use_cache_results.jsonl
python3 validation/compact_results.py .truth/raw/use_cache_results.jsonl --prefix py: \
    --order validation/cases_use_cache.jsonl --out validation/measured_use_cache.jsonl
python3 - <<'PY'
import json
rows = {json.loads(l)["name"]: json.loads(l) for l in open("validation/measured_use_cache.jsonl")}
for name, r in rows.items():
    if name.endswith("_cache") and not name.endswith("_nocache"):
        base = rows[name[: -len("_cache")] + "_nocache"]["peak_alloc"]
        d = r["peak_alloc"] - base
        print(f"{name}: peak {r['peak_alloc'] / 2**20:.1f} MiB, {d / 2**20:+.1f} MiB ({100 * d / base:+.2f}%) over use_cache=False")
PY
