#!/usr/bin/env python3
"""Why truth's T5 traces at an unaligned length size the second mask gradient 8 bytes short.

Mem-efficient attention's backward makes the mask's gradient padded to 16 columns and sliced
back (torch/_meta_registrations.py: `torch.empty([.., 32])[..., :30]`, 61,440 bytes for a
[2, 8, 30, 30] float32 gradient). The truth tool runs under FakeTensorMode, whose dispatch cache
rebuilds a repeated call's outputs from their sizes and strides alone (`empty_strided`), so the
second identical call's storage is the strided extent: 61,432 bytes. A GPU (and vramscope)
allocates 61,440 every time; both round to the same 512-byte block.

    ~/.venvs/truth/bin/python validation/fake_cache_probe.py
    # cache on  [61440, 61432]
    # cache off [61440, 61440]
"""
import torch
import torch._dynamo.config as dynamo_config
from torch._subclasses.fake_tensor import FakeTensorMode

aten = torch.ops.aten


def grad_bias_bytes(cache):
    dynamo_config.fake_tensor_cache_enabled = cache
    sizes = []
    with FakeTensorMode():
        q, k, v, out = (torch.empty(2, 8, 30, 64, device="cuda") for _ in range(4))
        # the kernel's mask: the [1, H, L, S] bias padded to 32 columns, sliced, expanded
        bias = torch.empty(1, 8, 30, 32, device="cuda")[..., :30].expand(2, 8, 30, 30)
        lse = torch.empty(2, 8, 32, device="cuda")
        seed, offset = (torch.empty((), dtype=torch.long, device="cuda") for _ in range(2))
        for _ in range(2):
            grads = aten._scaled_dot_product_efficient_attention_backward(
                out, q, k, v, bias, out, lse, seed, offset, 0.0, [True, True, True, True])
            sizes.append(grads[3].untyped_storage().nbytes())
    return sizes


if __name__ == "__main__":
    print("cache on ", grad_bias_bytes(True))
    print("cache off", grad_bias_bytes(False))
