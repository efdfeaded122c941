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


def causal_lm(batch, seq, checkpoint=False, config="fixtures/hf/configs/gemma2_2b_2l.json", attn="eager", **_):
    import transformers
    _patch_packed_sequence_detection()
    here = os.path.dirname(os.path.abspath(__file__))
    path = config if os.path.isabs(config) else os.path.join(here, "..", config)
    cfg = transformers.AutoConfig.from_pretrained(path)
    cfg._attn_implementation = attn
    cfg.use_cache = False
    cls = transformers.AutoModelForCausalLM._model_mapping[type(cfg)]
    model = cls(cfg)
    if checkpoint:
        model.gradient_checkpointing_enable()
    return causal_lm_step(model, model, cfg, batch, seq)
