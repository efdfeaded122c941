"""`measure.py --model py:validation/t5_models.py:t5` -- the T5 training step vramscope models.

`t5`: `T5ForConditionalGeneration` (or the class the config's `architectures` names:
`MT5ForConditionalGeneration`, `UMT5ForConditionalGeneration`) built from a config.json (random init,
`attn_implementation="sdpa"`, `use_cache=False`, as measure.py builds its hf: models), trained the way
transformers' own example and the HF Trainer train it:

    input_ids = randint(V, [B, S])            # the encoder's input
    labels    = randint(V, [B, T])            # T = target_len (default: seq)
    out  = model(input_ids=input_ids, labels=labels, use_cache=False)
    loss = out.loss

so the forward phase holds everything T5ForConditionalGeneration.forward does with labels:
`decoder_input_ids = self._shift_right(labels)`, the encoder, the decoder, the d_model**-0.5
rescale (configs without `tie_word_embeddings: false`), `lm_head`, and the loss
`CrossEntropyLoss(ignore_index=-100)(lm_logits.view(-1, V), labels.view(-1))`, which transformers
5.23 computes inside forward (not through `model.loss_function`). The loss phase only reads
`out.loss`. `out` (loss, logits, encoder_last_hidden_state) stays referenced until the next forward
returns, as in a plain loop. Inference (`--mode infer`) runs the same call under `no_grad` (an
evaluation step: loss included).

kwargs (via --model-kwargs): `config` (a config.json path, relative to the repository root; keys
starting with `_` are dropped, so the built-in configs under crates/vramscope-formats/data/hf work), `target_len`
(T, default seq), `layers` (overrides num_layers and num_decoder_layers), `decoder_layers`,
`overrides` (a dict of other config attributes, e.g. {"dropout_rate": 0.0}), `use_cache` (default false:
`config.use_cache = False` and `use_cache=False` in the call; `"config"` leaves the config's value and
calls `model(input_ids=..., labels=...)` without it, as a plain loop does: the decoder then returns an
`EncoderDecoderCache` in `out.past_key_values` unless gradient checkpointing turned it off).
`attn` (default "sdpa"): the `attn_implementation` (`"eager"`: each family's `eager_attention_forward`).
`checkpoint=True` calls `model.gradient_checkpointing_enable()` (every T5Block). `pad`: a padded
batch as DataCollatorForSeq2Seq makes it (`input_ids`, the `attention_mask` whose first row ends in
`pad` padding positions, `labels`), the mask passed to the forward.
"""
import json
import os

import torch


def _build(config, layers, decoder_layers, overrides, attn, use_cache):
    """The model `t5` and `generate` run, and its config."""
    import transformers
    here = os.path.dirname(os.path.abspath(__file__))
    path = config if os.path.isabs(config) else os.path.join(here, "..", config)
    with open(path) as f:
        # the built-in configs (crates/vramscope-formats/data/hf/*.json) carry a `_source` note
        d = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    cfg = transformers.CONFIG_MAPPING[d["model_type"]].from_dict(d)
    if layers:
        cfg.num_layers = int(layers)
        cfg.num_decoder_layers = int(layers)
    if decoder_layers:
        cfg.num_decoder_layers = int(decoder_layers)
    for k, v in (overrides or {}).items():
        setattr(cfg, k, v)
    cfg._attn_implementation = attn
    if use_cache != "config":
        cfg.use_cache = False
    arch = (d.get("architectures") or ["T5ForConditionalGeneration"])[0]
    model = getattr(transformers, arch)(cfg)
    assert model.config._attn_implementation == attn, model.config._attn_implementation
    return model, cfg


def generate(batch, seq, new_tokens=16, config="fixtures/hf/configs/t5_small_2l.json", layers=None,
             decoder_layers=None, overrides=None, attn="sdpa", pad=0, **_):
    """`model.generate(input_ids, do_sample=False, max_new_tokens=N)` of the model `t5` builds, with
    the config's `use_cache` (T5's default: true), as `generate_models.generation` runs a causal LM:
    the encoder on the `[B, seq]` prompt, then N one-token decoder steps with the
    `EncoderDecoderCache`. `pad`: a left-padded prompt batch (its `attention_mask` passed)."""
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from generate_models import generation
    model, cfg = _build(config, layers, decoder_layers, overrides, attn, "config")
    return generation(model, cfg.vocab_size, batch, seq, new_tokens, int(pad))


def t5(batch, seq, checkpoint=None, config="fixtures/hf/configs/t5_small_2l.json", target_len=None, layers=None,
       decoder_layers=None, overrides=None, use_cache=False, attn="sdpa", pad=0, **_):
    model, cfg = _build(config, layers, decoder_layers, overrides, attn, use_cache)
    if checkpoint:
        model.gradient_checkpointing_enable()
    V, B, S = cfg.vocab_size, batch, seq
    T = int(target_len) if target_len else seq

    def make_batch():
        ids = torch.randint(0, V, (B, S))
        if pad:
            # DataCollatorForSeq2Seq's order: input_ids, attention_mask, labels
            mask = torch.ones(B, S, dtype=torch.long)
            mask[0, S - int(pad):] = 0
            labels = torch.randint(0, V, (B, T))
            return (ids, mask, labels), labels
        labels = torch.randint(0, V, (B, T))
        return (ids, labels), labels

    def forward(m, x):
        kw = {}
        if len(x) == 3:
            ids, kw["attention_mask"], labels = x
        else:
            ids, labels = x
        if use_cache == "config":
            return m(input_ids=ids, labels=labels, **kw)
        return m(input_ids=ids, labels=labels, use_cache=False, **kw)

    def loss(out, y):
        return out.loss

    return model, make_batch, loss, forward
