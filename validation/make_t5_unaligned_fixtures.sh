#!/usr/bin/env bash
# Measures validation/cases_t5_unaligned.jsonl with ../shared/truth and writes
# fixtures/truth/hf_t5_unaligned.jsonl: T5 training steps whose target length (50) is not a
# multiple of 8, so mem-efficient attention pads the decoder's position-bias mask, which needs a
# gradient (`preprocess_mask`'s constant_pad_nd and slice, and their backward nodes). Cases 6 and 7
# of `validation/random_configs.py 2662 --truth 8 --large --t5` (case 7's reserved peak was -0.01%
# before), written by `--write-cases t5_unaligned --only 6,7`; and case 3 of
# `validation/random_configs.py 2746 --truth 20 --t5 --pad --knobs`, checkpointed (the cross-attention's
# zero position bias is a leaf whose padded gradient AccumulateGrad copies), added by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
exec validation/make_py_fixtures.sh t5_unaligned seq2seq-lm --jobs 2 "$@"
