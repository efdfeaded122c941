#!/usr/bin/env bash
# Measures Gemma 3's vision-language class run on text (validation/cases_gemma3_multimodal.jsonl:
# google/gemma-3-4b-it's Gemma3ForConditionalGeneration, its language model cut to 6 layers and at
# full depth, the SigLIP vision tower whole; AMP bf16, bf16 weights past the sliding window,
# checkpointing, inference, eager attention, LoRA over the tower's and the language model's
# projections, 4-bit loading (the tower quantized too) with QLoRA and for inference, generation;
# validation/multimodal_models.py builds them) with
# ../shared/truth and writes fixtures/truth/hf_gemma3_multimodal.jsonl. The tower and projector are
# on the device but never run, so they get no gradient and no optimizer state; the model makes the
# masks without the packed-sequence check, before its language model.
PREFIX= exec "$(dirname "$0")/make_py_fixtures.sh" gemma3_multimodal causal-lm --jobs 2 "$@"
