"""`measure.py --model py:validation/padding_models.py:causal_lm`: an HF causal LM built from a
config.json as measure.py's `hf:` models are (random init, SDPA, `use_cache=False`,
`gradient_checkpointing_enable()` for `checkpoint`, loss `model.loss_function(logits, labels,
vocab_size=V)` outside the forward), trained on a padded batch: `input_ids` `[B, S]` and the
`attention_mask` `[B, S]` (int64) a padding data collator makes, whose first sequence ends with
`pad` padding positions. The batch is `((input_ids, attention_mask), labels)` and the forward is
`model(input_ids=..., attention_mask=..., use_cache=False)`.

Why: measure.py's `hf:` route passes no attention mask, so transformers' mask code skips the mask
(SDPA runs `is_causal`); with padding it builds the `[B, 1, S, S]` boolean mask, SDPA takes
another kernel and GQA models repeat their keys and values. (Mask values do not change what is
allocated; under fake tensors transformers cannot read them and builds the mask, as a real run
with padding does.)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_attn_models import _config  # noqa: E402  (measure.py loads this file by path)
from lora_models import moe_checkpoint_init  # noqa: E402


def causal_lm(batch, seq, checkpoint=False, config="fixtures/hf/configs/llama32_1b_2l.json", pad=1, attn="sdpa",
              **_):
    import torch
    import transformers
    cfg = _config(config, attn)
    cls = transformers.AutoModelForCausalLM._model_mapping[type(cfg)]
    model = cls(cfg)
    if checkpoint:
        model.gradient_checkpointing_enable()
    V = cfg.vocab_size

    def loss(out, y):
        return model.loss_function(out, y, vocab_size=V)

    step = (model, *_padded(lambda: torch.randint(0, V, (batch, seq)), lambda ids: ids, batch, seq, pad, loss))
    return moe_checkpoint_init(step, cfg, checkpoint)


def _padded(make_ids, make_labels, batch, seq, pad, loss, use_cache=False):
    """`make_batch`, `loss` and `forward` of a padded batch, in a padding collator's order:
    `input_ids`, the `attention_mask` (int64) whose first sequence ends in `pad` padding
    positions, then the labels (`make_labels(input_ids)`). `use_cache=None`: not passed (the
    encoders take no `use_cache`)."""
    import torch

    def make_batch():
        ids = make_ids()
        mask = torch.ones(batch, seq, dtype=torch.long)
        mask[0, seq - pad:] = 0
        return (ids, mask), make_labels(ids)

    def forward(m, x):
        ids, mask = x
        kw = {} if use_cache is None else {"use_cache": use_cache}
        return m(input_ids=ids, attention_mask=mask, **kw).logits

    return make_batch, loss, forward


def seq_cls(batch, seq, checkpoint=False, config="fixtures/hf/configs/qwen2_small_2l_cls3.json", pad=1, **_):
    """hf_attn_models.py's `seq_cls` (SDPA) on a padded batch: `((input_ids, attention_mask),
    labels)`, `model(input_ids=..., attention_mask=..., use_cache=False)`."""
    import torch
    from hf_attn_models import seq_cls as plain

    model, _, loss, _ = plain(batch, seq, checkpoint=checkpoint, config=config, attn="sdpa")
    V, L = model.config.vocab_size, model.config.num_labels
    return (model, *_padded(lambda: torch.randint(0, V, (batch, seq)), lambda _: torch.randint(0, L, (batch,)),
                            batch, seq, pad, loss))


def encoder(batch, seq, checkpoint=False, config="fixtures/hf/configs/bert_base_uncased_9labels.json",
            task="seq-cls", pad=1, attn="sdpa", **_):
    """An encoder (BERT, RoBERTa, DistilBERT, ...) as measure.py's `hf:` route builds it (random
    init, SDPA or `attn`, `gradient_checkpointing_enable()` for `checkpoint`; `seq-cls`: labels
    `randint(0, num_labels, (B,))` and `model.loss_function(labels=..., pooled_logits=...)`;
    `masked-lm`: labels `randint(0, V, (B, S))` and `model.loss_function(logits, labels,
    vocab_size=V)`, outside the forward), on a padded batch: `model(input_ids=...,
    attention_mask=...)`."""
    import torch
    import transformers
    cfg = _config(config, attn)
    V = cfg.vocab_size
    if task == "seq-cls":
        cls = transformers.AutoModelForSequenceClassification._model_mapping[type(cfg)]
        L = cfg.num_labels

        def make_labels(_):
            return torch.randint(0, L, (batch,))

        def loss(out, y):
            return model.loss_function(labels=y, pooled_logits=out, config=model.config)
    else:
        cls = transformers.AutoModelForMaskedLM._model_mapping[type(cfg)]

        def make_labels(_):
            return torch.randint(0, V, (batch, seq))

        def loss(out, y):
            return model.loss_function(out, y, vocab_size=V)
    model = cls(cfg)
    if checkpoint:
        model.gradient_checkpointing_enable()
    return (model, *_padded(lambda: torch.randint(0, V, (batch, seq)), make_labels, batch, seq, pad, loss,
                            use_cache=None))
