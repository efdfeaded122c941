"""`measure.py --model py:validation/checkpoint_models.py:from_files` models for `--weights-dtype
from-files` truth: an HF causal LM built from a checkpoint folder's config.json (random init, sdpa,
use_cache=False, as measure.py's hf: models) whose parameters are materialised on the device one at a
time, in named_modules() order, each in the dtype its tensor has in the folder's safetensors header
(what `load_state_dict(state_dict, assign=True)` leaves, and `from_pretrained(dtype="auto")` for a
uniform checkpoint). Buffers keep the dtype the model's __init__ gives them. Only headers are read.
"""
import json
import os
import struct
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lora_models import _patch_packed_sequence_detection, causal_lm_step  # noqa: E402

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
          "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8, "BOOL": torch.bool}


def header_dtypes(folder):
    """name -> torch dtype from the safetensors headers (8-byte length + JSON)."""
    out = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            with open(os.path.join(folder, f), "rb") as fh:
                n = struct.unpack("<Q", fh.read(8))[0]
                header = json.loads(fh.read(n))
            out.update({k: DTYPES[v["dtype"]] for k, v in header.items() if k != "__metadata__"})
    return out


def from_files(batch, seq, folder="fixtures/weights/llama-mixed", **_):
    import transformers

    _patch_packed_sequence_detection()
    here = os.path.dirname(os.path.abspath(__file__))
    path = folder if os.path.isabs(folder) else os.path.join(here, "..", folder)
    cfg = transformers.AutoConfig.from_pretrained(path)
    cfg._attn_implementation = "sdpa"
    cfg.use_cache = False
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    dtypes = header_dtypes(path)
    memo = {}
    for prefix, m in model.named_modules():
        for k, p in list(m._parameters.items()):
            if p is None:
                continue
            name = f"{prefix}.{k}" if prefix else k
            if id(p) not in memo:
                new = torch.empty(p.shape, dtype=dtypes.get(name, p.dtype))
                memo[id(p)] = nn.Parameter(new, requires_grad=p.requires_grad)
            m._parameters[k] = memo[id(p)]
        for k, b in list(m._buffers.items()):
            if b is not None:
                m._buffers[k] = torch.empty(b.shape, dtype=b.dtype)
    return causal_lm_step(model, model, cfg, batch, seq)
