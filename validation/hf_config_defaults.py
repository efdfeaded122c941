#!/usr/bin/env python3
"""Writes crates/vramscope-formats/data/hf_config_defaults.json: for every model_type vramscope
builds, the defaults of its transformers config class (the dataclass fields' own defaults, before
__post_init__ derives anything, so a field whose default is derived from others, like Llama's
head_dim or Qwen2's layer_types, is left out). vramscope reads a field from there when a
config.json leaves it out, as `AutoConfig.from_pretrained` fills it in.

Run in the truth venv (transformers 5.23):
    ~/.venvs/truth/bin/python validation/hf_config_defaults.py
"""
import dataclasses
import json
import pathlib

import transformers

MODEL_TYPES = ["gpt2", "opt", "llama", "mistral", "qwen2", "qwen3", "phi3", "gemma", "gemma2",
               "gemma3_text", "mixtral", "qwen2_moe", "qwen3_moe", "bert", "roberta", "xlm-roberta",
               "camembert", "distilbert", "t5", "mt5", "umt5"]
OUT = pathlib.Path(__file__).resolve().parent.parent / "crates/vramscope-formats/data/hf_config_defaults.json"


def defaults(cls) -> dict:
    base = {f.name: f.default for f in dataclasses.fields(transformers.PreTrainedConfig)}
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is dataclasses.MISSING or f.default is None:
            continue
        if f.name in base and base[f.name] == f.default:
            continue  # the base class's, which no family reads for its shape
        try:
            json.dumps(f.default)
        except TypeError:
            continue
        out[f.name] = f.default
    return dict(sorted(out.items()))


def main() -> None:
    table = {"transformers_version": transformers.__version__}
    for mt in MODEL_TYPES:
        table[mt] = defaults(transformers.CONFIG_MAPPING[mt])
    OUT.write_text(json.dumps(table, indent=1) + "\n")
    print(f"{OUT}: {len(MODEL_TYPES)} config classes")


if __name__ == "__main__":
    main()
