#!/usr/bin/env python3
"""Writes fixtures/hf/activations/*.json and validation/cases_activations.jsonl: small configs of
each family with an activation other than its default (transformers' `ACT2FN` names: gelu_new,
gelu_fast, quick_gelu, relu2, gelu_accurate, linear, ...), each with one training or inference
step, for validation/make_activation_fixtures.sh. The composite activations (written out op by
op in transformers' activations.py) decide what is saved for backward and, for the ones with a
`pow`, the dtype under autocast.

    python3 validation/make_activation_configs.py
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
ZOO = os.path.join(ROOT, "crates", "vramscope-formats", "data", "hf")
OUT = os.path.join(ROOT, "fixtures", "hf", "activations")

# family: (built-in config, small sizes, the field naming the activation, task)
FAMILIES = {
    "gpt2": ("gpt2.json", dict(n_embd=128, n_head=4, n_layer=2, vocab_size=1000), "activation_function",
             "causal-lm"),
    "opt": ("opt-125m.json", dict(hidden_size=128, num_attention_heads=4, num_hidden_layers=2, ffn_dim=256,
                                  word_embed_proj_dim=128, vocab_size=1000), "activation_function", "causal-lm"),
    "bert": ("bert-base-uncased.json", dict(hidden_size=128, num_attention_heads=4, num_hidden_layers=2,
                                            intermediate_size=256, vocab_size=1000), "hidden_act", "masked-lm"),
    "distilbert": ("distilbert-base-uncased.json", dict(dim=128, n_heads=4, n_layers=2, hidden_dim=256,
                                                        vocab_size=1000), "activation", "masked-lm"),
    "llama": ("llama-3.2-1b.json", dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
                                        num_hidden_layers=2, intermediate_size=512, vocab_size=1000, head_dim=64),
              "hidden_act", "causal-lm"),
    "mistral": ("mistral-7b.json", dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
                                        num_hidden_layers=2, intermediate_size=512, vocab_size=1000),
                "hidden_act", "causal-lm"),
    "qwen2": ("qwen2.5-0.5b.json", dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
                                        num_hidden_layers=2, intermediate_size=512, vocab_size=1000),
              "hidden_act", "causal-lm"),
    "qwen3": ("qwen3-0.6b.json", dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
                                      num_hidden_layers=2, intermediate_size=512, vocab_size=1000, head_dim=64),
              "hidden_act", "causal-lm"),
    "phi3": ("phi-3-mini.json", dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=4,
                                     num_hidden_layers=2, intermediate_size=512, vocab_size=1000, rope_scaling=None),
             "hidden_act", "causal-lm"),
    "mixtral": ("mixtral-8x7b.json", dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
                                          num_hidden_layers=2, intermediate_size=256, vocab_size=1000,
                                          num_local_experts=4), "hidden_act", "causal-lm"),
    "gemma3": ("gemma-3-1b.json", dict(hidden_size=256, num_attention_heads=4, num_key_value_heads=1,
                                       num_hidden_layers=2, intermediate_size=512, vocab_size=1000, head_dim=64,
                                       layer_types=None), "hidden_activation", "causal-lm"),
}

# (family, activation, batch, seq, mode, autocast, parameter dtype, optimizer, checkpointing)
CASES = [
    ("gpt2", "gelu", 2, 200, "train", "bf16", "fp32", "adamw", False),
    ("gpt2", "relu2", 2, 128, "train", "fp32", "fp32", "sgdm", True),
    ("gpt2", "quick_gelu", 2, 200, "train", "fp16", "fp32", "adamw", False),
    ("opt", "gelu_fast", 2, 200, "train", "bf16", "fp32", "adamw", False),
    ("opt", "quick_gelu", 1, 128, "train", "fp32", "bf16", "sgdm", False),
    ("bert", "gelu_new", 2, 128, "train", "fp32", "fp32", "adamw", False),
    ("bert", "relu2", 2, 128, "train", "fp16", "fp32", "adamw", False),
    ("distilbert", "gelu_new", 1, 128, "train", "fp32", "bf16", "sgdm", False),
    ("distilbert", "linear", 4, 128, "infer", "bf16", "fp32", "adamw", False),
    ("llama", "gelu_fast", 2, 200, "train", "bf16", "fp32", "adamw", True),
    ("llama", "relu2", 1, 128, "train", "fp32", "bf16", "adamw", False),
    ("llama", "gelu", 4, 128, "infer", "fp32", "fp32", "adamw", False),
    ("mistral", "gelu_accurate", 2, 200, "train", "bf16", "fp32", "adamw", False),
    ("qwen2", "tanh", 2, 128, "train", "fp32", "fp32", "sgdm", True),
    ("qwen3", "quick_gelu", 2, 200, "train", "fp16", "fp32", "adamw", False),
    ("phi3", "gelu_new", 2, 200, "train", "bf16", "fp32", "adamw", False),
    ("mixtral", "gelu_fast", 2, 200, "train", "bf16", "fp32", "adamw", False),
    ("gemma3", "relu2", 2, 200, "train", "bf16", "fp32", "adamw", False),
]


def config(family, act):
    base, sizes, field, _ = FAMILIES[family]
    with open(os.path.join(ZOO, base)) as f:
        cfg = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    # the parameters' dtype is the precision's; token ids of the full vocabulary fall outside
    cfg.pop("dtype", None)
    cfg.pop("torch_dtype", None)
    for k in ("pad_token_id", "bos_token_id", "eos_token_id"):
        if isinstance(cfg.get(k), int) and cfg[k] >= sizes["vocab_size"]:
            cfg[k] = None
    cfg.update(sizes)
    cfg = {k: v for k, v in cfg.items() if v is not None or k != "layer_types"}
    cfg[field] = act
    note = f"validation/make_activation_configs.py: {base} cut down, {field} = {act!r}"
    return {"_source": note, **cfg}


def main():
    os.makedirs(OUT, exist_ok=True)
    lines = []
    for family, act, batch, seq, mode, amp, pdt, optim, ckpt in CASES:
        rel = f"fixtures/hf/activations/{family}_{act}.json"
        with open(os.path.join(ROOT, rel), "w") as f:
            f.write(json.dumps(config(family, act), indent=2) + "\n")
        task = FAMILIES[family][3]
        name = f"{family}_{act}_b{batch}_s{seq}_{mode}_{amp}_{pdt}_{optim}{'_ckpt' if ckpt else ''}"
        case = {"name": name, "model": f"hf:{rel}", "task": task, "batch": batch, "seq": seq, "mode": mode,
                "amp": amp, "param_dtype": pdt, "optim": optim}
        if ckpt:
            case["checkpoint"] = True
        case["vramscope"] = {"config": rel, "args": [], "task": task}
        lines.append(json.dumps(case))
    with open(os.path.join(HERE, "cases_activations.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"{len(lines)} cases")


if __name__ == "__main__":
    main()
