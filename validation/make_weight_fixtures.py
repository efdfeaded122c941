#!/usr/bin/env python3
"""Writes the weight-file fixtures under fixtures/weights/ (each a few KB, the Llama checkpoint folders
for `--weights-dtype from-files` about 100 KB of zeros): real files made by the `safetensors`,
`transformers` and `gguf` packages, plus corrupt variants of them for the error tests, and
`reference.json`: what the packages' own readers (safetensors' safe_open, gguf's GGUFReader) say each
good file holds.

Run (in the truth venv, which has torch, transformers 5.23, safetensors 0.8, gguf 0.19 and
bitsandbytes 0.50.2):
    ~/.venvs/truth/bin/python validation/make_weight_fixtures.py
The output is deterministic (fixed seeds), so rerunning it leaves the committed files unchanged.
"""
import json
import pathlib
import shutil
import struct

import numpy as np
import torch
from safetensors.torch import save_file

import gguf

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "fixtures" / "weights"
BAD = OUT / "corrupt"


def single_safetensors(path: pathlib.Path) -> None:
    g = torch.Generator().manual_seed(0)
    tensors = {
        "embed.weight": torch.randn(32, 8, generator=g),  # F32
        "layers.0.attn.qkv.weight": torch.randn(24, 8, generator=g).to(torch.bfloat16),
        "layers.0.attn.qkv.bias": torch.zeros(24, dtype=torch.float16),
        "layers.0.norm.weight": torch.ones(8, dtype=torch.bfloat16),
        "position_ids": torch.arange(16, dtype=torch.int64).reshape(1, 16),
        "scale": torch.tensor(0.5, dtype=torch.float32),  # a 0-d tensor
        "mask": torch.ones(4, dtype=torch.bool),
    }
    save_file(tensors, str(path), metadata={"format": "pt"})


def sharded_folder(path: pathlib.Path) -> None:
    """A tiny Llama saved by transformers' save_pretrained with shards small enough to split."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
                      num_key_value_heads=1, vocab_size=64, max_position_embeddings=32,
                      tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    shutil.rmtree(path, ignore_errors=True)
    model.save_pretrained(path, max_shard_size="8KB")
    for extra in ("config.json", "generation_config.json"):
        (path / extra).unlink(missing_ok=True)


LLAMA_CFG = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, vocab_size=128, max_position_embeddings=512, tie_word_embeddings=False)


def checkpoint_folder(path: pathlib.Path, dtype_of, cfg=None, drop=(), extra=None) -> None:
    """config.json + model.safetensors of a Llama whose tensors are stored in dtype_of(name)
    (zeros: only the headers matter, and zeros compress in git). drop: names left out; extra: more
    tensors."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(**(cfg or LLAMA_CFG))
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    tensors = {n: torch.zeros(p.shape, dtype=dtype_of(n)) for n, p in model.named_parameters() if n not in drop}
    tensors.update(extra or {})
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    cfg.save_pretrained(path)
    (path / "generation_config.json").unlink(missing_ok=True)
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})


def checkpoint_folders() -> None:
    """Checkpoints for `estimate --weights-dtype from-files`: uniform bf16; mixed (float32
    embeddings and norms, bf16 linears); and a config whose weights do not fit it."""
    checkpoint_folder(OUT / "llama-bf16", lambda n: torch.bfloat16)
    checkpoint_folder(OUT / "llama-mixed",
                      lambda n: torch.float32 if ("norm" in n or "embed" in n) else torch.bfloat16)
    # the file misses lm_head and has a tensor the model does not: warnings, not errors
    checkpoint_folder(OUT / "llama-partial", lambda n: torch.bfloat16, drop=("lm_head.weight",),
                      extra={"model.layers.0.self_attn.rotary_emb.inv_freq": torch.zeros(8)})
    small = dict(LLAMA_CFG, hidden_size=16, intermediate_size=32, num_attention_heads=2, num_key_value_heads=1,
                 vocab_size=64)
    # valid files that do not fit their config (not under corrupt/, whose files inspect rejects)
    bad = OUT / "llama-wrong-shape"
    checkpoint_folder(bad, lambda n: torch.bfloat16, cfg=small)
    # the config says intermediate_size 48: the files' MLP weights are [32, 16]
    c = json.loads((bad / "config.json").read_text())
    c["intermediate_size"] = 48
    (bad / "config.json").write_text(json.dumps(c, indent=2, sort_keys=True) + "\n")


def bnb_4bit_folder(path: pathlib.Path) -> None:
    """A checkpoint saved already quantized, as unsloth's `*-bnb-4bit` repositories are: the
    tiny Llama loaded with BitsAndBytesConfig(load_in_4bit, nf4, double quantization, bfloat16
    compute) on the CPU and saved again, so config.json carries its `quantization_config` and
    model.safetensors the packed uint8 weights with their quantization state (needs bitsandbytes
    in the venv: `pip install bitsandbytes==0.50.2`)."""
    from transformers import BitsAndBytesConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    base = path.parent / (path.name + ".base")
    shutil.rmtree(base, ignore_errors=True)
    LlamaForCausalLM(LlamaConfig(**LLAMA_CFG)).to(torch.bfloat16).save_pretrained(base)
    q = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                           bnb_4bit_compute_dtype=torch.bfloat16)
    model = LlamaForCausalLM.from_pretrained(base, quantization_config=q, device_map="cpu", dtype=torch.bfloat16)
    shutil.rmtree(path, ignore_errors=True)
    model.save_pretrained(path)
    shutil.rmtree(base)
    (path / "generation_config.json").unlink(missing_ok=True)


def split_header(data: bytes):
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]), data[8 + n:]


def join_header(header: dict, body: bytes) -> bytes:
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + body


def corrupt_safetensors(good: pathlib.Path) -> None:
    data = good.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header, body = split_header(data)
    (BAD / "truncated.safetensors").write_bytes(data[:-40])
    (BAD / "truncated-header.safetensors").write_bytes(data[:8 + n // 2])
    (BAD / "short.safetensors").write_bytes(data[:5])
    (BAD / "absurd-header-length.safetensors").write_bytes(struct.pack("<Q", 1 << 40) + data[8:])
    bad_json = bytearray(data)
    bad_json[8 + n // 3] = ord("}")
    (BAD / "bad-json.safetensors").write_bytes(bytes(bad_json))
    not_utf8 = bytearray(data)
    not_utf8[8 + 12] = 0xFF
    (BAD / "not-utf8.safetensors").write_bytes(bytes(not_utf8))

    overlap = json.loads(json.dumps(header))
    first = min((k for k in overlap if k != "__metadata__"), key=lambda k: overlap[k]["data_offsets"][0])
    second = sorted((k for k in overlap if k != "__metadata__"), key=lambda k: overlap[k]["data_offsets"][0])[1]
    b, e = overlap[second]["data_offsets"]
    overlap[second]["data_offsets"] = [b - 4, e - 4]
    (BAD / "overlapping-offsets.safetensors").write_bytes(join_header(overlap, body))

    beyond = json.loads(json.dumps(header))
    last = max((k for k in beyond if k != "__metadata__"), key=lambda k: beyond[k]["data_offsets"][1])
    b, e = beyond[last]["data_offsets"]
    beyond[last]["data_offsets"] = [b + 64, e + 64]
    (BAD / "offsets-out-of-range.safetensors").write_bytes(join_header(beyond, body))

    dtype = json.loads(json.dumps(header))
    dtype[first]["dtype"] = "F12"
    (BAD / "unknown-dtype.safetensors").write_bytes(join_header(dtype, body))

    span = json.loads(json.dumps(header))
    span[first]["shape"] = [span[first]["shape"][0] + 1] + span[first]["shape"][1:]
    (BAD / "shape-mismatch.safetensors").write_bytes(join_header(span, body))


def bad_index(good_folder: pathlib.Path) -> None:
    dst = BAD / "sharded-missing-tensor"
    shutil.rmtree(dst, ignore_errors=True)
    shutil.copytree(good_folder, dst)
    index = json.loads((dst / "model.safetensors.index.json").read_text())
    shard = sorted(set(index["weight_map"].values()))[0]
    index["weight_map"]["model.layers.9.mlp.up_proj.weight"] = shard
    (dst / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")


def write_gguf(path: pathlib.Path) -> None:
    rng = np.random.default_rng(0)
    q = gguf.GGMLQuantizationType
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_name("tiny")
    w.add_context_length(32)
    w.add_uint8("test.u8", 7)
    w.add_int8("test.i8", -7)
    w.add_uint16("test.u16", 700)
    w.add_int16("test.i16", -700)
    w.add_int32("test.i32", -70000)
    w.add_float32("test.f32", 0.25)
    w.add_bool("test.bool", True)
    w.add_uint64("test.u64", 1 << 40)
    w.add_int64("test.i64", -(1 << 40))
    w.add_float64("test.f64", 0.125)
    w.add_array("test.ints", [1, 2, 3])
    w.add_token_list(["<s>", "</s>", "a", "b"])
    w.add_string("test.long", "x" * 200)

    w.add_tensor("token_embd.weight", gguf.quants.quantize(rng.standard_normal((8, 64), dtype=np.float32), q.Q8_0),
                 raw_dtype=q.Q8_0)
    w.add_tensor("blk.0.attn_q.weight", gguf.quants.quantize(rng.standard_normal((4, 64), dtype=np.float32), q.Q4_0),
                 raw_dtype=q.Q4_0)
    w.add_tensor("blk.0.attn_norm.weight", rng.standard_normal(64, dtype=np.float32))
    w.add_tensor("blk.0.attn_k.weight", rng.standard_normal((4, 64), dtype=np.float32).astype(np.float16))
    # K-quant and i-quant blocks: arbitrary bytes (only the header matters), shapes in elements
    for name, qt, rows in (("blk.0.ffn_up.weight", q.Q4_K, 2), ("blk.0.ffn_down.weight", q.Q6_K, 1),
                           ("blk.0.ffn_gate.weight", q.IQ4_XS, 1)):
        blk, size = gguf.GGML_QUANT_SIZES[qt]
        raw = rng.integers(0, 256, (rows, 256 // blk * size), dtype=np.uint8)
        w.add_tensor(name, raw, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def corrupt_gguf(good: pathlib.Path) -> None:
    data = good.read_bytes()
    v2 = bytearray(data)
    v2[4:8] = struct.pack("<I", 2)
    (OUT / "tiny-v2.gguf").write_bytes(bytes(v2))
    (BAD / "truncated.gguf").write_bytes(data[:len(data) // 3])
    (BAD / "truncated-data.gguf").write_bytes(data[:-100])
    absurd = bytearray(data)
    absurd[8:16] = struct.pack("<Q", 1 << 60)
    (BAD / "absurd-tensor-count.gguf").write_bytes(bytes(absurd))
    v1 = bytearray(data)
    v1[4:8] = struct.pack("<I", 1)
    (BAD / "version1.gguf").write_bytes(bytes(v1))
    # a tensor info is: name, n_dims (u32), dims (u64 each), type (u32), offset (u64)
    name = b"blk.0.ffn_gate.weight"
    name_at = data.index(name, data.index(b"blk.0.ffn_up.weight"))
    type_at = name_at + len(name) + 4 + 8 * 2
    bad_type = bytearray(data)
    bad_type[type_at:type_at + 4] = struct.pack("<I", 99)
    (BAD / "unknown-type.gguf").write_bytes(bytes(bad_type))


def reference_inventory() -> dict:
    """What the packages' own readers say about the good fixtures: name -> [dtype, shape, bytes]."""
    from safetensors import safe_open

    out = {}
    for rel in ("tiny.safetensors", "sharded/model-00001-of-00002.safetensors",
                "sharded/model-00002-of-00002.safetensors"):
        with safe_open(str(OUT / rel), framework="pt") as f:
            for name in f.keys():
                sl = f.get_slice(name)
                t = f.get_tensor(name)
                out.setdefault(rel.split("/")[0], {})[name] = [sl.get_dtype(), list(sl.get_shape()),
                                                               t.numel() * t.element_size()]
    r = gguf.GGUFReader(str(OUT / "tiny.gguf"))
    out["tiny.gguf"] = {t.name: [t.tensor_type.name, [int(d) for d in t.shape], int(t.n_bytes)]
                        for t in r.tensors}
    return out


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    BAD.mkdir(parents=True, exist_ok=True)
    single_safetensors(OUT / "tiny.safetensors")
    sharded_folder(OUT / "sharded")
    corrupt_safetensors(OUT / "tiny.safetensors")
    bad_index(OUT / "sharded")
    checkpoint_folders()
    bnb_4bit_folder(OUT / "llama-bnb4")
    write_gguf(OUT / "tiny.gguf")
    corrupt_gguf(OUT / "tiny.gguf")
    (OUT / "reference.json").write_text(json.dumps(reference_inventory(), indent=1, sort_keys=True) + "\n")
    for p in sorted(OUT.rglob("*")):
        if p.is_file():
            print(f"{p.stat().st_size:7d}  {p.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
