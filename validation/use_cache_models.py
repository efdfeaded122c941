"""`measure.py --model py:validation/use_cache_models.py:causal_lm` models: the causal-LM training
step of `hf:` models (lora_models.py `causal_lm_step`), with `use_cache` as the config's default
(`True`) leaves it when no trainer turns it off: the forward then returns a `DynamicCache` holding
every layer's keys and values, which the output (kept until the step ends) keeps alive. vramscope
models `use_cache=False`; validation/measure_use_cache.sh measures what the difference is.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lora_models  # noqa: E402


def causal_lm(batch, seq, config="fixtures/hf/configs/qwen2_small_2l.json", use_cache=False, **_):
    model, cfg = lora_models._model(config, None, seq)
    cfg.use_cache = bool(use_cache)
    model, make_batch, loss, _ = lora_models.causal_lm_step(model, model, cfg, batch, seq)

    def forward(m, x):
        out = m(input_ids=x, use_cache=bool(use_cache))
        # the cache lives as long as the output does
        return (out.logits, out.past_key_values) if use_cache else out.logits

    def loss_of(out, y):
        return loss(out[0] if isinstance(out, tuple) else out, y)

    return model, make_batch, loss_of, forward
