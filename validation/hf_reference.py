#!/usr/bin/env python3
"""Reference parameter counts (and, for the small models, parameter shapes and module paths) that
Hugging Face transformers gives for the built-in transformer configs.

Each `crates/vramscope-formats/data/hf/<name>.json` is loaded into its config class, the model class
named by `architectures[0]` is built on the meta device (no memory, no weights), and
`sum(p.numel() for p in model.parameters())` is taken (`parameters()` yields a tied weight once).
The same count is recorded, under `unseen`, for `fixtures/hf/unseen/*.json`: real checkpoints'
configs that are not built in (other sizes and head layouts of the supported families).

Run (in the truth venv, transformers 5.23 / torch 2.15):
    ~/.venvs/truth/bin/python validation/hf_reference.py > fixtures/hf_reference.json
"""
import json
import pathlib
import sys

import torch
import transformers
from transformers import CONFIG_MAPPING

ROOT = pathlib.Path(__file__).resolve().parent.parent
DATA = ROOT / "crates" / "vramscope-formats" / "data" / "hf"
UNSEEN = ROOT / "fixtures" / "hf" / "unseen"
# models small enough to commit every parameter's shape and every module path for
DETAILED = {"gpt2", "opt-125m", "bert-base-uncased", "llama-3.2-1b", "qwen2.5-0.5b", "t5-small",
            "mixtral-8x7b", "gemma-2-2b", "gemma-3-1b", "phi-3-mini", "qwen3-0.6b", "mt5-small",
            "umt5-small"}


def build(cfg: dict):
    cfg = {k: v for k, v in cfg.items() if not k.startswith("_")}
    config = CONFIG_MAPPING[cfg["model_type"]].from_dict(cfg)
    cls = getattr(transformers, cfg["architectures"][0])
    with torch.device("meta"):
        return cls._from_config(config) if hasattr(cls, "_from_config") else cls(config)


def main() -> None:
    out = {
        "_command": "~/.venvs/truth/bin/python validation/hf_reference.py > fixtures/hf_reference.json",
        "_versions": {"transformers": transformers.__version__, "torch": torch.__version__},
        "models": {},
        "unseen": {},
    }
    for path in sorted(DATA.glob("*.json")):
        name = path.stem
        cfg = json.loads(path.read_text())
        model = build(cfg)
        entry = {
            "architecture": cfg["architectures"][0],
            "parameters": sum(p.numel() for p in model.parameters()),
            "parameters_with_tied": sum(p.numel() for _, p in model.named_parameters(remove_duplicate=False)),
            "parameter_tensors": len(list(model.parameters())),
            "modules": len(list(model.named_modules())),
        }
        if name in DETAILED:
            entry["named_parameters"] = {n: list(p.shape) for n, p in model.named_parameters()}
            entry["named_modules"] = [n for n, _ in model.named_modules()]
        # the order of `parameters()`: what the optimizer's per-parameter state, `zero_grad` and
        # `step` walk (the maps above are sorted by name)
        entry["parameter_order"] = [n for n, _ in model.named_parameters()]
        # a tied weight appears there under its first name (XLM-RoBERTa's `lm_head.decoder.weight`,
        # created before the embeddings it is tied to); its other names
        names = {}
        for n, p in model.named_parameters(remove_duplicate=False):
            names.setdefault(id(p), []).append(n)
        aliases = {ns[0]: ns[1:] for ns in names.values() if len(ns) > 1}
        if aliases:
            entry["parameter_aliases"] = aliases
        out["models"][name] = entry
        print(f"{name}: {entry['parameters']:,}", file=sys.stderr)
        del model
    for path in sorted(UNSEEN.glob("*.json")):
        cfg = json.loads(path.read_text())
        model = build(cfg)
        out["unseen"][path.stem] = {
            "architecture": cfg["architectures"][0],
            "parameters": sum(p.numel() for p in model.parameters()),
        }
        print(f"unseen {path.stem}: {out['unseen'][path.stem]['parameters']:,}", file=sys.stderr)
        del model
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
