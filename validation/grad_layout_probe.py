#!/usr/bin/env python3
"""Which of q's, k's and v's gradients a projection's `.view(B, S, H, D)` must copy in backward
(`ViewBackward0` reshapes the incoming `[B, S, H, D]` gradient to `[B, S, E]`: a copy unless its
strides allow a view). Runs a tiny GPT-2 / OPT step with eager attention on the CPU (autograd's
layouts are the device's: the matmul backward formulas choose them) and prints, for every 4-d
gradient reaching a `ViewBackward0`, its strides and whether it can be viewed. The builders'
choices (`gpt2.rs`: q and v copied, k not; `opt.rs`) rest on it and on the truth traces.

    ~/.venvs/truth/bin/python validation/grad_layout_probe.py [gpt2|opt] [BATCH] [--cache]
"""
import sys

import torch
import transformers


def probe(family, batch, use_cache):
    if family == "gpt2":
        cfg = transformers.GPT2Config(n_embd=64, n_head=4, n_layer=1, vocab_size=100, n_positions=64,
                                      num_labels=3, bos_token_id=None, eos_token_id=None)
    else:
        cfg = transformers.OPTConfig(hidden_size=64, num_attention_heads=4, num_hidden_layers=1,
                                     ffn_dim=128, vocab_size=100, max_position_embeddings=64,
                                     word_embed_proj_dim=64, num_labels=3, pad_token_id=None,
                                     bos_token_id=None, eos_token_id=None)
    cfg._attn_implementation = "eager"
    cls = transformers.GPT2ForTokenClassification if family == "gpt2" else transformers.OPTForCausalLM
    model = cls(cfg).train()
    ids = torch.randint(0, 100, (batch, 16))
    labels = torch.randint(0, 3, (batch, 16)) if family == "gpt2" else ids
    # the attention's `.view(B, S, H, D)` calls by their autograd node, named in the order the
    # forward makes them (GPT2Attention views k and v, then q; OPTAttention q, then k and v)
    order = "kvq" if family == "gpt2" else "qkv"
    made, view = {}, torch.Tensor.view

    def recording_view(self, *shape):
        t = view(self, *shape)
        if t.dim() == 4 and t.grad_fn is not None:
            made[t.grad_fn] = order[len(made) % 3]
        return t
    torch.Tensor.view = recording_view
    try:
        out = model(input_ids=ids, labels=labels, use_cache=use_cache)
    finally:
        torch.Tensor.view = view
    seen, visited = [], set()

    def walk(fn):
        if fn is None or fn in visited:
            return
        visited.add(fn)
        if type(fn).__name__ == "ViewBackward0":
            def hook(grad_inputs, grad_outputs):
                g = grad_outputs[0]
                if g is not None and g.dim() == 4:
                    b, s, h, d = g.shape
                    try:
                        g.view(b, s, h * d)
                        viewable = True
                    except RuntimeError:
                        viewable = False
                    seen.append((made.get(fn, "?"), tuple(g.shape), g.stride(), "view" if viewable else "copy"))
            fn.register_hook(hook)
        for nxt, _ in fn.next_functions:
            walk(nxt)

    walk(out.loss.grad_fn)
    out.loss.backward()
    for name, shape, strides, what in seen:
        print(f"{family} batch {batch} cache={use_cache}: {name}: grad {shape} strides {strides}: {what}")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    probe(args[0] if args else "gpt2", int(args[1]) if len(args) > 1 else 2, "--cache" in sys.argv)
