#!/usr/bin/env bash
# Measures the bare models that the Llama family's, Gemma's and the encoders' feature cases do not
# cover (validation/cases_bare_models.jsonl), in inference, each `out = model(...)` kept until the
# next forward returns: the decoders GPT2Model, OPTModel, MixtralModel, Qwen2MoeModel and
# Qwen3MoeModel (validation/encoder_head_models.py's feature_extraction: the last hidden state and
# the DynamicCache the config's use_cache fills), and T5's bare encoder-decoder T5Model / MT5Model
# / UMT5Model (its t5_model: input_ids and decoder_input_ids, the decoder's last hidden state,
# the EncoderDecoderCache and the encoder's last hidden state; the configs are copies naming that
# class, fixtures/hf/configs/*_model.json) with ../shared/truth and writes
# fixtures/truth/hf_bare_models.jsonl.
PREFIX= exec "$(dirname "$0")/make_py_fixtures.sh" bare_models feature-extraction --jobs 2 "$@"
