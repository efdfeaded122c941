"""`measure.py --model py:validation/lora_models.py:FACTORY` models for LoRA fine-tuning truth.

`lora`: an HF causal LM built from a config.json (random init, sdpa, use_cache=False, as measure.py's
hf: models) with LoRA applied by hand exactly as PEFT 0.21's `get_peft_model(LoraConfig(r,
lora_alpha, lora_dropout, target_modules))` does it (PEFT itself cannot run under FakeTensorMode: it
moves adapters with `.to(device)`, which fails to swap fake parameters): every parameter frozen, each
target `nn.Linear` (or transformers' `Conv1D`, GPT-2's projections, weight `[in, out]`, which PEFT wraps in
the same `lora.Linear` with `fan_in_fan_out=True`: the forward below is unchanged, the flag only
transposes the weight delta when merging) replaced by a `LoraLinear` holding `base_layer`, `lora_dropout.default`
(`nn.Identity` for p = 0), `lora_A.default` (in -> r, no bias), `lora_B.default` (r -> out, no bias),
forward `result = base_layer(x); result = result + lora_B(lora_A(dropout(x))) * scaling` (the code
of peft/tuners/lora/layer.py `Linear.forward`). Default targets: PEFT's for llama/mistral/qwen2
(`q_proj`, `v_proj`), for gpt2 (`c_attn`). The loss is `model.loss_function` on the logits, as for hf: models.

`freeze`: the same model without adapters, with `requires_grad_(False)` on every parameter whose name
contains one of `patterns` (comma-separated), then `gradient_checkpointing_enable()` when the case
checkpoints.
"""
import json
import os

import torch


def _patch_packed_sequence_detection():
    """What measure.py does for hf: models (`_patch_hf_packed_sequence_detection`): under
    FakeTensors transformers cannot see that the positions are 0..S-1 and would build a [B,1,S,S]
    mask (and repeat k/v for GQA); run the same temporaries, return what a real run returns."""
    import transformers.masking_utils as mu
    if getattr(mu.find_packed_sequence_indices, "_truth_patched", False):
        return
    orig = mu.find_packed_sequence_indices

    def patched(position_ids):
        orig(position_ids)
        return None
    patched._truth_patched = True
    mu.find_packed_sequence_indices = patched


def _model(config, layers, seq):
    import transformers
    _patch_packed_sequence_detection()
    here = os.path.dirname(os.path.abspath(__file__))
    path = config if os.path.isabs(config) else os.path.join(here, "..", config)
    cfg = transformers.AutoConfig.from_pretrained(path)
    if layers:
        cfg.num_hidden_layers = int(layers)
    cfg._attn_implementation = "sdpa"
    cfg.use_cache = False
    model = transformers.AutoModelForCausalLM.from_config(cfg)
    return model, cfg


def causal_lm_step(model, loss_model, cfg, batch, seq):
    """The `py:` factory result of a causal-LM training step, as for hf: models: `labels =
    input_ids`, `logits = model(input_ids, use_cache=False).logits`, then `loss_model.loss_function`
    on them (outside the forward; for a wrapped model, the base model's)."""
    V = cfg.vocab_size

    def make_batch():
        ids = torch.randint(0, V, (batch, seq))
        return ids, ids

    def forward(m, x):
        return m(input_ids=x, use_cache=False).logits

    def loss(out, y):
        return loss_model.loss_function(out, y, vocab_size=V)

    return model, make_batch, loss, forward


class LoraLinear(torch.nn.Module):
    def __init__(self, base, r, alpha, dropout):
        super().__init__()
        nn = torch.nn
        self.base_layer = base
        self.lora_dropout = nn.ModuleDict({"default": nn.Dropout(dropout) if dropout > 0 else nn.Identity()})
        # peft.tuners.tuners_utils._get_in_out_features: a Conv1D's weight is [in, out]
        if isinstance(base, torch.nn.Linear):
            in_features, out_features = base.in_features, base.out_features
        else:
            in_features, out_features = base.weight.shape
        self.lora_A = nn.ModuleDict({"default": nn.Linear(in_features, r, bias=False)})
        self.lora_B = nn.ModuleDict({"default": nn.Linear(r, out_features, bias=False)})
        self.scaling = {"default": alpha / r}

    def forward(self, x):
        result = self.base_layer(x)
        dt = result.dtype
        a = self.lora_A["default"]
        if x.dtype != a.weight.dtype:
            x = x.to(a.weight.dtype)
        result = result + self.lora_B["default"](a(self.lora_dropout["default"](x))) * self.scaling["default"]
        return result.to(dt)


MOE_MODEL_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe")


def moe_checkpoint_init(step, cfg, checkpoint):
    """`cuda_init_first` for a checkpointed Mixture-of-Experts step (`cfg` the model's config),
    the factory result as it is for any other: every other truth stays as it was."""
    return cuda_init_first(step, bool(checkpoint) and cfg.model_type in MOE_MODEL_TYPES)


def cuda_init_first(step, when=True):
    """A `py:` factory result whose forward initializes the CUDA runtime first (`torch.cuda.init()`,
    no allocation), when `when`: under fake CUDA a checkpointed Mixture-of-Experts layer would
    otherwise initialize it inside the checkpoint, which `torch.utils.checkpoint` refuses ("device
    state was initialized in the forward pass of a Checkpoint"); a real run's first CUDA call, or
    bf16 autocast's capability check, has done it before."""
    if not when:
        return step
    model, make_batch, loss, forward = step

    def initialized_forward(m, x):
        torch.cuda.init()
        return forward(m, x)

    return model, make_batch, loss, initialized_forward


def apply_lora(model, r, alpha, dropout, targets):
    from transformers.pytorch_utils import Conv1D
    for p in model.parameters():
        p.requires_grad_(False)
    for name, mod in list(model.named_modules()):
        for cname, child in list(mod.named_children()):
            if cname in targets and isinstance(child, (torch.nn.Linear, Conv1D)):
                setattr(mod, cname, LoraLinear(child, r, alpha, dropout))
    return model


def upcast_adapters(model):
    """PEFT's `get_peft_model(..., autocast_adapter_dtype=True)` (the default): `_cast_adapter_dtype`
    walks `model.modules()` and, in each LoRA layer, `lora_A` then `lora_B`, sets
    `param.data = param.data.to(torch.float32)` for a bfloat16 / float16 adapter weight."""
    for m in model.modules():
        if isinstance(m, LoraLinear):
            for sub in (m.lora_A, m.lora_B):
                for p in sub["default"].parameters():
                    if p.dtype in (torch.float16, torch.bfloat16):
                        p.data = p.data.to(torch.float32)
    return model


def lora(batch, seq, config="fixtures/hf/configs/qwen2_small_2l.json", layers=None, r=8, alpha=8, dropout=0.0,
         targets=None, checkpoint=False, upcast=False, **_):
    """`upcast`: the adapters of a model built in bfloat16 / float16 upcast to float32, as PEFT's
    `get_peft_model` does by default (with `param_dtype` bf16: the base model loaded in bf16, then
    `get_peft_model`); without it they keep the model's dtype (`autocast_adapter_dtype=False`)."""
    base, cfg = _model(config, layers, seq)
    default = {"gpt2": ["c_attn"]}.get(cfg.model_type, ["q_proj", "v_proj"])
    tg = targets.split(",") if targets else default
    model = apply_lora(base, int(r), alpha, float(dropout), tg)
    if upcast:
        upcast_adapters(model)
    if checkpoint:
        # as qlora_models.py: gradient_checkpointing_enable() with its default kwargs, after the
        # adapters are in
        model.gradient_checkpointing_enable()
    return moe_checkpoint_init(causal_lm_step(model, base, cfg, batch, seq), cfg, checkpoint)


def freeze(batch, seq, config="fixtures/hf/configs/qwen2_small_2l.json", layers=None, patterns="embed_tokens",
           checkpoint=None, **_):
    model, cfg = _model(config, layers, seq)
    pats = [p for p in patterns.split(",") if p]
    for n, p in model.named_parameters():
        if any(s in n for s in pats):
            p.requires_grad_(False)
    if checkpoint:
        # gradient_checkpointing_enable() with its default kwargs, after the freeze (as a
        # script calls it)
        model.gradient_checkpointing_enable()
    return moe_checkpoint_init(causal_lm_step(model, model, cfg, batch, seq), cfg, checkpoint)
