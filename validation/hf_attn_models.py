"""`measure.py --model py:validation/hf_attn_models.py:causal_lm` : an HF causal LM built from a
config.json exactly as measure.py's `hf:` models are (random init, `use_cache=False`, the
packed-sequence patch, `gradient_checkpointing_enable()` for `checkpoint`, loss
`model.loss_function(logits, labels, vocab_size=V)` outside the forward), except that the attention
implementation is a parameter instead of always `sdpa`.

Why: transformers refuses `sdpa` for models that declare `_supports_sdpa = False` (Gemma2, whose
attention logit soft-capping SDPA cannot do), so `from_pretrained` runs them with `eager`
attention, and measure.py's `hf:` route (which forces `sdpa`) cannot build them at all.
"""
import os
import sys


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lora_models import _patch_packed_sequence_detection, causal_lm_step  # noqa: E402  (measure.py loads this file by path)


def _config(config, attn):
    """The config at `config` (relative to the repository root) with `attn` attention and
    `use_cache=False`, the packed-sequence patch applied."""
    import transformers
    _patch_packed_sequence_detection()
    here = os.path.dirname(os.path.abspath(__file__))
    path = config if os.path.isabs(config) else os.path.join(here, "..", config)
    cfg = transformers.AutoConfig.from_pretrained(path)
    cfg._attn_implementation = attn
    cfg.use_cache = False
    return cfg


def causal_lm(batch, seq, checkpoint=False, config="fixtures/hf/configs/gemma2_2b_2l.json", attn="eager", **_):
    import transformers
    cfg = _config(config, attn)
    cls = transformers.AutoModelForCausalLM._model_mapping[type(cfg)]
    model = cls(cfg)
    if checkpoint:
        model.gradient_checkpointing_enable()
    return causal_lm_step(model, model, cfg, batch, seq)


def seq_cls(batch, seq, checkpoint=False, config="fixtures/hf/configs/gemma2_2b_2l.json", attn="eager", **_):
    """`AutoModelForSequenceClassification` as measure.py's `hf:` route builds it (random init,
    `use_cache=False`, the packed-sequence patch, a pad token set for a batch of more than one,
    labels `randint(0, num_labels, (B,))`, `model.loss_function(labels=..., pooled_logits=...)`
    outside the forward), with the attention implementation as a parameter, and the base model in
    the run's parameter dtype: `GenericForSequenceClassification` builds it with
    `AutoModel.from_config`, which follows the config's `dtype` (bfloat16 in most checkpoints), as
    `from_pretrained(..., dtype=...)` sets it; measure.py's `hf:` route would leave it at the
    config's."""
    import torch
    import transformers
    cfg = _config(config, attn)
    # the dtype the run builds its parameters in (float32, or bfloat16 for a bf16 run)
    cfg.dtype = torch.get_default_dtype()
    V, L = cfg.vocab_size, cfg.num_labels
    if getattr(cfg, "pad_token_id", None) is None and batch > 1:
        # the EOS token, as measure.py sets it (0 where a cut-down config's EOS id is outside its
        # vocabulary: the embedding checks its padding index)
        eos = getattr(cfg, "eos_token_id", None)
        cfg.pad_token_id = eos if isinstance(eos, int) and eos < V else 0
    cls = transformers.AutoModelForSequenceClassification._model_mapping[type(cfg)]
    model = cls(cfg)
    if checkpoint:
        model.gradient_checkpointing_enable()

    def make_batch():
        return torch.randint(0, V, (batch, seq)), torch.randint(0, L, (batch,))

    def forward(m, x):
        return m(input_ids=x, use_cache=False).logits

    def loss(out, y):
        return model.loss_function(labels=y, pooled_logits=out, config=model.config)

    return model, make_batch, loss, forward
