"""`measure.py --model py:validation/multimodal_models.py:FACTORY`: vision-language checkpoints run
on text alone, built from their config.json (random init, SDPA unless `attn` says otherwise,
`use_cache=False`,
`gradient_checkpointing_enable()` for `checkpoint`):

- `gemma3_text_only`: `Gemma3ForConditionalGeneration` (the class of google/gemma-3-4b-it and its
  larger siblings, which `AutoModelForCausalLM` also picks for a `gemma3` config): the SigLIP vision
  tower and the projector are built and moved to the device with the language model, but a batch
  of token ids alone never runs them. `labels = input_ids`, `logits = model(input_ids,
  use_cache=False).logits`, the loss `model.loss_function` outside the forward, as measure.py's
  `hf:` route does for causal LMs (which cannot build this class: `Gemma3Config` has no
  `vocab_size` of its own).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lora_models import _patch_packed_sequence_detection, causal_lm_step  # noqa: E402


def _gemma3_config(config, attn="sdpa", use_cache=False):
    """The `Gemma3Config` at `config` (relative to the repository root), with the attention
    implementation and the language model's `use_cache` set; the packed-sequence patch applied."""
    import transformers
    _patch_packed_sequence_detection()
    here = os.path.dirname(os.path.abspath(__file__))
    path = config if os.path.isabs(config) else os.path.join(here, "..", config)
    cfg = transformers.AutoConfig.from_pretrained(path)
    cfg._attn_implementation = attn
    cfg.text_config.use_cache = use_cache
    return cfg


def gemma3_text_only(batch, seq, checkpoint=False, config=None, attn="sdpa", pad=0, **_):
    """With `pad`, a padded batch (padding_models.py's: the `attention_mask` passed to the
    forward, its first row ending in `pad` padding positions)."""
    import transformers
    cfg = _gemma3_config(config, attn)
    model = transformers.Gemma3ForConditionalGeneration(cfg)
    if checkpoint:
        model.gradient_checkpointing_enable()
    if pad:
        import torch
        from padding_models import _padded
        V = cfg.text_config.vocab_size

        def loss(out, y):
            return model.loss_function(out, y, vocab_size=V)

        return (model, *_padded(lambda: torch.randint(0, V, (batch, seq)), lambda ids: ids, batch, seq, int(pad),
                                loss))
    return causal_lm_step(model, model, cfg.text_config, batch, seq)


def gemma3_text_only_lora(batch, seq, checkpoint=False, config=None, attn="sdpa", r=8, alpha=8,
                          dropout=0.0, targets=None, upcast=False, **_):
    """`gemma3_text_only` with LoRA as PEFT injects it (lora_models.py's `apply_lora`): every
    target Linear in `named_modules()` order gets adapters, the vision tower's `q_proj` /
    `v_proj` first, though they never run; `upcast` as in lora_models.py's `lora`."""
    from lora_models import apply_lora, upcast_adapters
    model, make_batch, loss, forward = gemma3_text_only(batch, seq, False, config, attn)
    tg = targets.split(",") if targets else ["q_proj", "v_proj"]
    model = apply_lora(model, int(r), alpha, float(dropout), tg)
    if upcast:
        upcast_adapters(model)
    if checkpoint:
        model.gradient_checkpointing_enable()
    return model, make_batch, loss, forward


def gemma3_text_only_qlora(batch, seq, checkpoint=False, config=None, r=8, alpha=8, dropout=0.0,
                           targets=None, double_quant=True, lora=True, amp="fp32", **_):
    """`gemma3_text_only` loaded in 4 bits as qlora_models.py's `qlora` loads a causal LM: every
    nn.Linear but the tied head quantized while loading, the vision tower's included though it
    never runs; with `lora`, adapters on the 4-bit target layers in `named_modules()` order."""
    import torch
    import transformers
    from qlora_models import load_and_adapt
    cfg = _gemma3_config(config)
    with torch.device("meta"):
        model = transformers.Gemma3ForConditionalGeneration(cfg)
    model = load_and_adapt(model, double_quant, amp, lora, targets, r, alpha, dropout, checkpoint)
    return causal_lm_step(model, model, cfg.text_config, batch, seq)


def gemma3_generate(batch, seq, new_tokens=16, config=None, attn="sdpa", **_):
    """`Gemma3ForConditionalGeneration.generate(input_ids, do_sample=False, max_new_tokens=N)` on
    token ids alone, as generate_models.py's `generate` runs a causal LM (its `_ScriptedValues`
    answering the value reads), with the cache on."""
    import transformers
    from generate_models import generation
    cfg = _gemma3_config(config, attn, use_cache=True)
    model = transformers.Gemma3ForConditionalGeneration(cfg)
    return generation(model, cfg.text_config.vocab_size, batch, seq, new_tokens)
