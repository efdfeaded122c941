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


def causal_lm(batch, seq, checkpoint=False, config="fixtures/hf/configs/llama32_1b_2l.json", pad=1, **_):
    import torch
    import transformers
    cfg = _config(config, "sdpa")
    cls = transformers.AutoModelForCausalLM._model_mapping[type(cfg)]
    model = cls(cfg)
    if checkpoint:
        model.gradient_checkpointing_enable()
    V = cfg.vocab_size

    def make_plain():
        ids = torch.randint(0, V, (batch, seq))
        return ids, ids

    def loss(out, y):
        return model.loss_function(out, y, vocab_size=V)

    return (model, *_padded(make_plain, batch, seq, pad, loss))


def _padded(make_plain, batch, seq, pad, loss):
    """`make_batch`, `loss` and `forward` of a padded batch around an unpadded one: the
    `attention_mask` (int64, made after the inputs, as a collator's batch is moved) whose first
    sequence ends in `pad` padding positions."""
    import torch

    def make_batch():
        ids, labels = make_plain()
        mask = torch.ones(batch, seq, dtype=torch.long)
        mask[0, seq - pad:] = 0
        return (ids, mask), labels

    def forward(m, x):
        ids, mask = x
        return m(input_ids=ids, attention_mask=mask, use_cache=False).logits

    return make_batch, loss, forward


def seq_cls(batch, seq, checkpoint=False, config="fixtures/hf/configs/qwen2_small_2l_cls3.json", pad=1, **_):
    """hf_attn_models.py's `seq_cls` (SDPA) on a padded batch: `((input_ids, attention_mask),
    labels)`, `model(input_ids=..., attention_mask=..., use_cache=False)`."""
    from hf_attn_models import seq_cls as plain

    model, make_plain, loss, _ = plain(batch, seq, checkpoint=checkpoint, config=config, attn="sdpa")
    return (model, *_padded(make_plain, batch, seq, pad, loss))
