"""`measure.py --model py:validation/encoder_head_models.py:FACTORY` : the encoders' per-token heads
built from a config.json as measure.py's `hf:` models are (random init, the config's own attention
implementation unless `attn` is given, `gradient_checkpointing_enable()` for `checkpoint`):

- `token_cls`: `AutoModelForTokenClassification`, labels `randint(0, num_labels, (B, S))`, the loss
  `model.loss_function(logits, labels, config)` outside the forward (`ForTokenClassification`), as
  measure.py computes the masked-LM and sequence-classification losses;
- `question_answering`: `AutoModelForQuestionAnswering`, `start_positions` / `end_positions`
  `randint(0, S, (B,))` made after the ids and handed to the forward, which computes the loss (as a
  `Trainer` calls it); the loss phase reads `out.loss`. `out` (loss, start and end logits) stays
  referenced until the next forward returns, as in a plain loop.

- `feature_extraction`: the bare `AutoModel` (`BertModel`, `RobertaModel` with their poolers,
  `DistilBertModel`, the Llama family's `{X}Model`), run in inference: `out = model(input_ids=x)`
  (last_hidden_state and, where there is a pooler, pooler_output; a decoder whose config keeps
  `use_cache` also returns the `DynamicCache` its forward filled) stays referenced until the next
  forward returns. The packed-sequence patch of measure.py's `hf:` route is applied.

- `t5_model`: the bare encoder-decoder `T5Model` (`MT5Model`, `UMT5Model`) on `input_ids` and
  `decoder_input_ids` (`target_len` long, default seq), in inference the same way.

- `t5_encoder`: `T5EncoderModel` (`MT5EncoderModel`, `UMT5EncoderModel` for those model types),
  run in inference the same way.

`num_labels` is the config's unless `num_labels` is given.
"""
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lora_models import _patch_packed_sequence_detection  # noqa: E402  (measure.py loads this file by path)


def _read_config(config):
    """The config at `config` (relative to the repository root) as its model type's config class."""
    import transformers
    here = os.path.dirname(os.path.abspath(__file__))
    path = config if os.path.isabs(config) else os.path.join(here, "..", config)
    with open(path) as f:
        # the built-in configs (crates/vramscope-formats/data/hf/*.json) carry a `_source` note
        d = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    return transformers.CONFIG_MAPPING[d["model_type"]].from_dict(d)


def _model(auto_name, config, attn, num_labels, checkpoint, use_cache=None):
    import transformers
    # the decoders' mask code under FakeTensors keeps a packed-sequence mask a real run drops
    _patch_packed_sequence_detection()
    cfg = _read_config(config)
    if num_labels:
        cfg.num_labels = int(num_labels)
    if use_cache is not None:
        # `from_pretrained(..., use_cache=...)`: what the decoders' base model reads when the head
        # calls it without the argument
        cfg.use_cache = bool(use_cache)
    cfg._attn_implementation = attn
    # the decoders' per-token heads build their base model with `AutoModel.from_config`, which
    # takes the config's `dtype` (a checkpoint's bfloat16) over the default: the whole model is
    # built in the dtype the case asks for instead, as `from_pretrained(..., dtype=...)` does
    import torch
    cfg.dtype = torch.get_default_dtype()
    auto = getattr(transformers, auto_name)
    model = auto._model_mapping[type(cfg)](cfg)
    assert model.config._attn_implementation == attn, model.config._attn_implementation
    if checkpoint:
        model.gradient_checkpointing_enable()
    return model, cfg


def _attention_mask(batch, seq, pad):
    """A padding collator's `attention_mask` (int64 `[B, S]`) whose first sequence ends in `pad`
    padding positions, or `None` without `pad`."""
    import torch
    if not pad:
        return None
    mask = torch.ones(batch, seq, dtype=torch.long)
    mask[0, seq - pad:] = 0
    return mask


def token_cls(batch, seq, checkpoint=False, config="crates/vramscope-formats/data/hf/bert-base-uncased.json",
              attn="sdpa", num_labels=None, use_cache=None, pad=0, **_):
    """With `pad`, a padded batch: `input_ids`, the `attention_mask`, then the labels, in a padding
    collator's order, and `model(input_ids=..., attention_mask=...)`."""
    import torch
    model, cfg = _model("AutoModelForTokenClassification", config, attn, num_labels, checkpoint, use_cache)
    V, L = cfg.vocab_size, cfg.num_labels

    def make_batch():
        ids = torch.randint(0, V, (batch, seq))
        mask = _attention_mask(batch, seq, pad)
        return (ids if mask is None else (ids, mask)), torch.randint(0, L, (batch, seq))

    def forward(m, x):
        if isinstance(x, tuple):
            return m(input_ids=x[0], attention_mask=x[1]).logits
        return m(input_ids=x).logits

    def loss(out, y):
        return model.loss_function(out, y, config=model.config)

    return model, make_batch, loss, forward


def question_answering(batch, seq, checkpoint=False, config="crates/vramscope-formats/data/hf/bert-base-uncased.json",
                       attn="sdpa", use_cache=None, pad=0, **_):
    """With `pad`, a padded batch: `input_ids`, the `attention_mask`, then the positions, and the
    mask passed to the forward."""
    import torch
    model, cfg = _model("AutoModelForQuestionAnswering", config, attn, None, checkpoint, use_cache)
    V = cfg.vocab_size

    def make_batch():
        ids = torch.randint(0, V, (batch, seq))
        mask = _attention_mask(batch, seq, pad)
        start = torch.randint(0, seq, (batch,))
        end = torch.randint(0, seq, (batch,))
        return ((ids, start, end) if mask is None else (ids, mask, start, end)), start

    def forward(m, x):
        if len(x) == 4:
            ids, mask, start, end = x
            return m(input_ids=ids, attention_mask=mask, start_positions=start, end_positions=end)
        ids, start, end = x
        return m(input_ids=ids, start_positions=start, end_positions=end)

    def loss(out, y):
        return out.loss

    return model, make_batch, loss, forward


def _features(model, vocab, batch, seq, pad=0):
    """An inference run of a bare model: ids in, `out = model(input_ids=x)` kept until the next
    forward returns. With `pad`, a padded batch: `(input_ids, attention_mask)`, both passed."""
    import torch

    def make_batch():
        ids = torch.randint(0, vocab, (batch, seq))
        mask = _attention_mask(batch, seq, pad)
        return (ids if mask is None else (ids, mask)), ids

    def forward(m, x):
        if isinstance(x, tuple):
            return m(input_ids=x[0], attention_mask=x[1])
        return m(input_ids=x)

    return model, make_batch, None, forward


def feature_extraction(batch, seq, checkpoint=False, config="crates/vramscope-formats/data/hf/bert-base-uncased.json",
                       attn="sdpa", use_cache=None, pad=0, **_):
    model, cfg = _model("AutoModel", config, attn, None, checkpoint, use_cache)
    return _features(model, cfg.vocab_size, batch, seq, pad)


def t5_model(batch, seq, checkpoint=False, config="crates/vramscope-formats/data/hf/t5-small.json", attn="sdpa",
             target_len=None, use_cache=None, **_):
    """The bare encoder-decoder `T5Model` (`MT5Model`, `UMT5Model`) in inference: `input_ids`
    `[B, seq]` then `decoder_input_ids` `[B, target_len]` (default `seq`), `out =
    model(input_ids=..., decoder_input_ids=...)` kept until the next forward returns."""
    import torch
    cfg = _read_config(config)
    cfg._attn_implementation = attn
    if use_cache is not None:
        cfg.use_cache = bool(use_cache)
    model = _t5_class(cfg.model_type, "Model")(cfg)
    V, T = cfg.vocab_size, int(target_len or seq)

    def make_batch():
        ids = torch.randint(0, V, (batch, seq))
        dec = torch.randint(0, V, (batch, T))
        return (ids, dec), ids

    def forward(m, x):
        ids, dec = x
        return m(input_ids=ids, decoder_input_ids=dec)

    return model, make_batch, None, forward


def t5_encoder(batch, seq, checkpoint=False, config="crates/vramscope-formats/data/hf/t5-small.json", attn="sdpa",
               pad=0, **_):
    cfg = _read_config(config)
    cfg._attn_implementation = attn
    return _features(_t5_class(cfg.model_type, "EncoderModel")(cfg), cfg.vocab_size, batch, seq, pad)


def _t5_class(model_type, suffix):
    """`T5{suffix}`, `MT5{suffix}` or `UMT5{suffix}` for the config's model type."""
    import transformers
    return getattr(transformers, {"t5": "T5", "mt5": "MT5", "umt5": "UMT5"}[model_type] + suffix)
