#!/usr/bin/env bash
# Measures the `py:` truth cases of validation/cases_NAME.jsonl with ../shared/truth and writes
# fixtures/truth/hf_NAME.jsonl: the compact format of compact_results.py plus what each case's
# `vramscope` entry says vramscope runs (validation/vramscope_fixture.py: `model`, `extra_args`,
# `task`, and for generations `mode` without `seq`). The make_*_fixtures.sh scripts call it.
#   validation/make_py_fixtures.sh NAME TASK [run_cases.py flags...]
#   MEASURE=0 validation/make_py_fixtures.sh ...   # convert .truth/raw/NAME_results.jsonl only
#   OUT=fixtures/truth/X.jsonl validation/make_py_fixtures.sh ...   # another fixture name
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-$HOME/.venvs/truth}
name=$1
task=$2
shift 2
cases=validation/cases_$name.jsonl
raw=.truth/raw/${name}_results.jsonl
out=${OUT:-fixtures/truth/hf_$name.jsonl}
mkdir -p .truth/raw
if [ "${MEASURE:-1}" != 0 ]; then
  "$VENV/bin/python" ../shared/truth/run_cases.py "$cases" --out "$raw" "$@"
fi
python3 validation/compact_results.py "$raw" --prefix "${PREFIX-py:}" \
    --order "$cases" --out ".truth/raw/${name}_compact.jsonl"
python3 validation/vramscope_fixture.py "$cases" ".truth/raw/${name}_compact.jsonl" "$out" --task "$task"
wc -l "$out"
