"""`measure.py --model py:validation/qlora_models.py:qlora` models for QLoRA / 4-bit truth.

bitsandbytes cannot run under the truth tool (its kernels need a real GPU, FakeTensorMode cannot
dispatch them), so this file rewrites, with plain torch ops, what bitsandbytes 0.4x and transformers
5.23 do for

    bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4",
                             bnb_4bit_use_double_quant=DQ, bnb_4bit_compute_dtype=torch.bfloat16)
    model = AutoModelForCausalLM.from_pretrained(path, quantization_config=bnb, dtype=DTYPE)
    model = get_peft_model(model, LoraConfig(r=R, lora_alpha, lora_dropout, target_modules))

with the same tensors, shapes, dtypes and lifetimes on the device (the kernels' values are never
needed):

* Loading (the `model` phase): the model is created on the meta device, every `nn.Linear` but the
  output head becomes a `Linear4bit` (transformers' `replace_with_bnb_linear` skips
  `get_keys_to_not_convert`: the output embeddings, tied weights and the last parameter), then the
  parameters and buffers are materialised on the device one at a time in `named_modules()` order.
  A quantized weight is loaded as a DTYPE tensor `[out, in]` and quantized on the device
  (`Params4bit._quantize` -> `bnb.functional.quantize_4bit(w, blocksize=64,
  compress_statistics=DQ, quant_type="nf4")`): the kernel's outputs `absmax` (float32, one per 64
  elements) and the packed weight (uint8 `[(n + 1) // 2, 1]`), `get_4bit_type("nf4")` (a float32
  `[16]` code, normalised by `abs().max()`), and with double quantization `offset = absmax.mean()`,
  `quantize_blockwise(absmax - offset, blocksize=256)` (bitsandbytes' global 256-entry dynamic map,
  created once; float32 `absmax2` per 256 blocks, uint8 `qabsmax`, a copy of the dynamic map), then
  the float32 absmax is dropped; the loaded DTYPE weight is freed when the next tensor loads.
  Modelling assumption: transformers' real loader may read several tensors ahead (threads) and
  holds the checkpoint on the CPU; here exactly one loaded weight is on the device at a time.
* `Linear4bit.forward` (compute dtype bf16 given, so `set_compute_type` never runs): bias recast
  to the input's dtype if they differ (permanent), `x.to(compute_dtype)`, `bias.to(compute_dtype)`,
  `bnb.matmul_4bit(x, weight.t(), bias, quant_state).to(inp_dtype)`.
* `MatMul4Bit` (`bnb.autograd._functions`): forward `F.linear(A, dequantize_4bit(B, qs).to(A.dtype)
  .t(), bias)`: `dequantize_4bit` with double quantization first makes a float32 absmax
  (`dequantize_blockwise`, `+= offset`), then the `[out, in]` weight in the quantized tensor's
  original dtype; `ctx.tensors = (None, B)` (the packed weight only); backward
  `matmul(grad_output, dequantize_4bit(B, qs).to(grad_output.dtype).t())`, the weight dequantized
  again. `matmul_4bit`'s `gemv_4bit` path (one token, no grad) returns a fresh output.
* PEFT 0.21's `lora.bnb.Linear4bit.forward`: `result = base_layer(x); result = result.clone()`;
  without autocast `x = x.to(lora_A.weight.dtype)`, `output = lora_B(lora_A(dropout(x))) * scaling`,
  `output.to(result.dtype)`; `result = result + output`. The adapters stay float32 (the base weight
  is uint8, so `_move_adapter_to_device_of_base_layer` does not cast them).

`prepare_model_for_kbit_training` is not applied (`prepare=False`): its upcast of every other
parameter to float32 is a different program (see docs/qlora.md).

The loop around it (optimizer, loss, phases) is measure.py's; DTYPE is measure.py's `param_dtype`
(the default dtype while the factory runs).
"""
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lora_models import _patch_packed_sequence_detection, causal_lm_step, moe_checkpoint_init  # noqa: E402

BLOCKSIZE = 64
NESTED_BLOCKSIZE = 256
_DYNAMIC_MAP = {}


class QuantState:
    """bitsandbytes.functional.QuantState: the tensors a 4-bit weight needs to be dequantized."""

    def __init__(self, absmax, shape, code, dtype, offset=None, state2=None, blocksize=BLOCKSIZE):
        self.absmax, self.shape, self.code, self.dtype = absmax, shape, code, dtype
        self.offset, self.state2, self.blocksize = offset, state2, blocksize
        self.nested = state2 is not None


def _get_4bit_type(device):
    # torch.tensor(NF4 values, device) then data.div_(data.abs().max())
    data = torch.empty(16, dtype=torch.float32, device=device)
    data.div_(data.abs().max())
    return data


def _quantize_blockwise(a, blocksize):
    """bnb.functional.quantize_blockwise(A, code=None, blocksize) on CUDA."""
    if "dynamic" not in _DYNAMIC_MAP:
        # name2qmap["dynamic"] = create_dynamic_map().to(A.device): once per process
        _DYNAMIC_MAP["dynamic"] = torch.empty(256, dtype=torch.float32, device=a.device)
    code = _DYNAMIC_MAP["dynamic"]
    n = a.numel()
    absmax = torch.empty((-(n // -blocksize),), dtype=torch.float32, device=a.device)
    out = torch.empty_like(a, dtype=torch.uint8)
    return out, QuantState(absmax=absmax, shape=None, code=code.clone(), dtype=a.dtype, blocksize=blocksize)


def quantize_4bit(w, double_quant):
    """bnb.functional.quantize_4bit(w, blocksize=64, compress_statistics, quant_type="nf4")."""
    n = w.numel()
    # torch.ops.bitsandbytes.quantize_4bit (CUDA): absmax, then the packed output
    absmax = torch.empty((-(n // -BLOCKSIZE),), dtype=torch.float32, device=w.device)
    out = torch.empty(((n + 1) // 2, 1), dtype=torch.uint8, device=w.device)
    code = _get_4bit_type(w.device)
    if double_quant:
        offset = absmax.mean()
        qabsmax, state2 = _quantize_blockwise(absmax - offset, NESTED_BLOCKSIZE)
        del absmax
        state = QuantState(qabsmax, w.shape, code, w.dtype, offset=offset, state2=state2)
    else:
        state = QuantState(absmax, w.shape, code, w.dtype)
    return out, state


def dequantize_4bit(packed, qs):
    """bnb.functional.dequantize_4bit(A, quant_state)."""
    absmax = qs.absmax
    if qs.nested:
        # dequantize_blockwise(qs.absmax, qs.state2): torch.empty_like(A, dtype=state2.dtype)
        absmax = torch.empty_like(qs.absmax, dtype=qs.state2.dtype)
        absmax += qs.offset
    out = torch.empty(qs.shape, dtype=qs.dtype, device=packed.device)
    del absmax
    if packed.shape[0] == 1:  # is transposed, transpose back
        return out.t()
    return out


class MatMul4Bit(torch.autograd.Function):
    @staticmethod
    def forward(ctx, A, B, out=None, bias=None, quant_state=None):
        output = torch.nn.functional.linear(A, dequantize_4bit(B, quant_state).to(A.dtype).t(), bias)
        ctx.state = quant_state
        ctx.dtype_A, ctx.dtype_B, ctx.dtype_bias = A.dtype, B.dtype, None if bias is None else bias.dtype
        if any(ctx.needs_input_grad[:2]):
            ctx.tensors = (None, B)
        else:
            ctx.tensors = (None, None)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        req_grad_a, _, _, req_grad_bias, _ = ctx.needs_input_grad
        _, B = ctx.tensors
        grad_a = grad_bias = None
        if req_grad_bias:
            grad_bias = grad_output.sum(0, dtype=ctx.dtype_bias)
        if req_grad_a:
            grad_a = torch.matmul(grad_output, dequantize_4bit(B, ctx.state).to(grad_output.dtype).t())
        return grad_a, None, None, grad_bias, None


def matmul_4bit(A, B, quant_state, bias=None):
    if A.numel() == A.shape[-1] and not A.requires_grad and A.shape[-1] % quant_state.blocksize == 0:
        # F.gemv_4bit: one fused kernel writing a fresh output
        out = torch.empty(A.shape[:-1] + (quant_state.shape[0],), dtype=A.dtype, device=A.device)
        if bias is not None:
            out += bias
        return out
    return MatMul4Bit.apply(A, B, None, bias, quant_state)


class Linear4bit(nn.Module):
    """bnb.nn.Linear4bit after loading: `weight` is the packed uint8 Params4bit (frozen)."""

    def __init__(self, packed, quant_state, bias, compute_dtype):
        super().__init__()
        self.weight = nn.Parameter(packed, requires_grad=False)
        self.quant_state = quant_state
        self.bias = bias
        self.compute_dtype = compute_dtype
        self.in_features, self.out_features = quant_state.shape[1], quant_state.shape[0]

    def forward(self, x):
        if self.bias is not None and self.bias.dtype != x.dtype:
            self.bias.data = self.bias.data.to(x.dtype)
        inp_dtype = x.dtype
        x = x.to(self.compute_dtype)
        bias = None if self.bias is None else self.bias.to(self.compute_dtype)
        return matmul_4bit(x, self.weight.t(), self.quant_state, bias=bias).to(inp_dtype)


class LoraLinear4bit(nn.Module):
    """peft.tuners.lora.bnb.Linear4bit (one adapter, vanilla LoRA)."""

    def __init__(self, base, r, alpha, dropout):
        super().__init__()
        self.base_layer = base
        self.lora_dropout = nn.ModuleDict({"default": nn.Dropout(dropout) if dropout > 0 else nn.Identity()})
        self.lora_A = nn.ModuleDict({"default": nn.Linear(base.in_features, r, bias=False, dtype=torch.float32)})
        self.lora_B = nn.ModuleDict({"default": nn.Linear(r, base.out_features, bias=False, dtype=torch.float32)})
        self.scaling = {"default": alpha / r}

    def forward(self, x):
        result = self.base_layer(x)
        result = result.clone()
        lora_a, lora_b = self.lora_A["default"], self.lora_B["default"]
        requires_conversion = not torch.is_autocast_enabled()
        if requires_conversion:
            expected_dtype = result.dtype
            if x.dtype != lora_a.weight.dtype:
                x = x.to(lora_a.weight.dtype)
        output = lora_b(lora_a(self.lora_dropout["default"](x))) * self.scaling["default"]
        if requires_conversion:
            output = output.to(expected_dtype)
        return result + output


def _not_converted(model):
    """transformers' get_keys_to_not_convert: tied weights, the last parameter, the output embeddings."""
    keys = set()
    tied = getattr(model, "all_tied_weights_keys", None) or {}
    keys |= set(tied.keys()) | set(tied.values())
    keys.add(list(model.named_parameters())[-1][0])
    out_emb = model.get_output_embeddings()
    keys |= {n for n, m in model.named_modules() if out_emb is not None and m is out_emb}
    return {k.removesuffix(".weight") for k in keys}


def load_in_4bit(model, double_quant, compute_dtype):
    """Materialises a meta-device model on the device, quantizing every convertible nn.Linear."""
    from transformers.pytorch_utils import Conv1D

    skip = _not_converted(model)
    quantized = {name for name, m in model.named_modules()
                 if (type(m) is nn.Linear or isinstance(m, Conv1D))
                 and not any(name == s or name.startswith(s + ".") for s in skip)}
    memo = {}

    def materialise(t, is_param):
        if id(t) not in memo:
            new = torch.empty(t.shape, dtype=t.dtype)
            memo[id(t)] = nn.Parameter(new, requires_grad=t.requires_grad) if is_param else new
        return memo[id(t)]

    replacements = []
    for name, m in list(model.named_modules()):
        if name in quantized:
            w = torch.empty(m.weight.shape, dtype=m.weight.dtype)  # the checkpoint tensor, loaded
            if isinstance(m, Conv1D):
                # Bnb4bitQuantize: value.T; Params4bit._quantize: self.data.contiguous()
                packed, qs = quantize_4bit(w.T.contiguous(), double_quant)
            else:
                packed, qs = quantize_4bit(w, double_quant)
            del w
            bias = materialise(m.bias, True) if m.bias is not None else None
            replacements.append((name, Linear4bit(packed, qs, bias, compute_dtype)))
            continue
        for k, p in m._parameters.items():
            if p is not None:
                m._parameters[k] = materialise(p, True)
        for k, b in m._buffers.items():
            if b is not None:
                m._buffers[k] = materialise(b, False)
    for name, new in replacements:
        model.set_submodule(name, new)
    return model


def _meta_causal_lm(config, layers, use_cache):
    """An HF causal LM of `config` (a path from the repository root, or absolute) on the meta
    device, SDPA attention, `use_cache` as given, and its config."""
    import transformers

    _patch_packed_sequence_detection()
    here = os.path.dirname(os.path.abspath(__file__))
    path = config if os.path.isabs(config) else os.path.join(here, "..", config)
    cfg = transformers.AutoConfig.from_pretrained(path)
    if layers:
        cfg.num_hidden_layers = int(layers)
    cfg._attn_implementation = "sdpa"
    cfg.use_cache = use_cache
    # from_pretrained(dtype=DTYPE): measure.py's param_dtype is the default dtype here
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    return model, cfg


def qlora(batch, seq, config="fixtures/hf/configs/qwen2_small_2l.json", layers=None, r=8, alpha=8,
          dropout=0.0, targets=None, double_quant=True, lora=True, checkpoint=False, amp="fp32", **_):
    """QLoRA (lora=True) or a plain 4-bit model (lora=False) of an HF causal LM."""
    model, cfg = _meta_causal_lm(config, layers, use_cache=False)
    model = load_and_adapt(model, double_quant, amp, lora, targets, r, alpha, dropout, checkpoint)
    return moe_checkpoint_init(causal_lm_step(model, model, cfg, batch, seq), cfg, checkpoint)


def load_and_adapt(model, double_quant, amp, lora, targets, r, alpha, dropout, checkpoint):
    """A meta-device `model` loaded in 4 bits, frozen, with QLoRA adapters on the 4-bit `targets`
    (`q_proj,v_proj` by default) when `lora`, in `named_modules()` order, then
    `gradient_checkpointing_enable()` when `checkpoint`."""
    # bnb_4bit_compute_dtype: bf16, fp16 on the fp16 recipes (GPUs without bf16)
    fp16 = amp == "fp16" or torch.get_default_dtype() == torch.float16
    compute = torch.float16 if fp16 else torch.bfloat16
    model = load_in_4bit(model, double_quant, compute)
    for p in model.parameters():
        p.requires_grad_(False)
    if lora:
        tg = targets.split(",") if targets else ["q_proj", "v_proj"]
        for name, mod in list(model.named_modules()):
            for cname, child in list(mod.named_children()):
                if cname in tg and isinstance(child, Linear4bit):
                    setattr(mod, cname, LoraLinear4bit(child, int(r), alpha, float(dropout)))
    if checkpoint:
        model.gradient_checkpointing_enable()
    return model


def generate_4bit(batch, seq, new_tokens=16, config="fixtures/hf/configs/qwen2_small_2l.json", layers=None,
                  double_quant=True, use_cache=True, pad=0, amp="fp32", **_):
    """`model.generate(input_ids, do_sample=False, max_new_tokens=N)` (validation/generate_models.py's
    `generation`) of an HF causal LM loaded in 4 bits (`load_in_4bit`, no adapters), with or without
    the KV cache (`use_cache`, as the config says it)."""
    from generate_models import generation

    model, cfg = _meta_causal_lm(config, layers, use_cache=bool(use_cache))
    model = load_and_adapt(model, double_quant, amp, False, None, 0, 0, 0.0, False)
    return generation(model, cfg.vocab_size, batch, seq, new_tokens, int(pad))
