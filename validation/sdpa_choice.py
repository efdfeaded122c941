#!/usr/bin/env python3
"""Which kernel torch's own `F.scaled_dot_product_attention` dispatch picks on ../shared/truth's
fake H100 (sm_90), per dtype, dropout, grad, causal / mask, GQA, sequence lengths and head dim:
the table `SdpaBackend::choose` (crates/vramscope-core/src/ops/attention.rs) follows.

    ~/.venvs/truth/bin/python validation/sdpa_choice.py            # the whole table
    ~/.venvs/truth/bin/python validation/sdpa_choice.py --dims 8 12 136 264

Codes: C cuDNN, F flash, E mem-efficient, M math; a trailing `p` means the call padded something
first (flash: q, k and v to a multiple of 8 in the head dim; mem-efficient: the mask's last dim).
"""
import argparse
import itertools
import os
import sys

sys.dont_write_bytecode = True
TRUTH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "truth")
sys.path.insert(0, os.path.abspath(TRUTH))
import measure  # noqa: E402  (the fake CUDA runtime's bootstrap)

if os.environ.get("TRUTH_SHIM_ACTIVE") != "1":
    measure.ensure_shim()

import torch  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

KERNELS = {"_scaled_dot_product_flash_attention": "F", "_scaled_dot_product_cudnn_attention": "C",
           "_scaled_dot_product_efficient_attention": "E"}
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class Record(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func).replace("aten.", "").split(".")[0])
        return func(*args, **(kwargs or {}))


def choice(dtype, d, dropout, grad, causal, mask, gqa, L, S):
    heads, kv_heads = (4, 2) if gqa else (2, 2)
    with FakeTensorMode():
        q = torch.empty(2, heads, L, d, device="cuda", dtype=dtype, requires_grad=grad)
        k = torch.empty(2, kv_heads, S, d, device="cuda", dtype=dtype, requires_grad=grad)
        v = torch.empty(2, kv_heads, S, d, device="cuda", dtype=dtype, requires_grad=grad)
        m = None
        if mask == "bool":
            m = torch.ones(2, 1, L, S, device="cuda", dtype=torch.bool)
        elif mask == "float":
            m = torch.zeros(2, 1, L, S, device="cuda", dtype=dtype)
        rec = Record()
        with rec:
            torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=m, dropout_p=dropout, is_causal=causal, enable_gqa=gqa)
    pad = "p" if "constant_pad_nd" in rec.ops else ""
    for op in rec.ops:
        if op in KERNELS:
            return KERNELS[op] + pad
    return "M" + pad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dims", type=int, nargs="*",
                    default=[4, 6, 8, 12, 16, 60, 64, 72, 100, 128, 136, 192, 200, 248, 256, 264, 320, 512])
    a = ap.parse_args()
    print("dtype dropout grad causal mask gqa L S :", " ".join(map(str, a.dims)))
    grid = itertools.product(DTYPES, [0.0, 0.1], [True, False], [True, False], [None, "bool", "float"],
                             [False, True], [(64, 64), (1, 64), (63, 63)])
    for dt, dropout, grad, causal, mask, gqa, (L, S) in grid:
        if causal and (mask or L != S):
            continue
        row = [choice(DTYPES[dt], d, dropout, grad, causal, mask, gqa, L, S) for d in a.dims]
        print(dt, dropout, int(grad), int(causal), mask, int(gqa), L, S, ":", " ".join(row), flush=True)


if __name__ == "__main__":
    main()
