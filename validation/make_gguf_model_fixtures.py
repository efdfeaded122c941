"""Writes small GGUF checkpoints of the decoder families vramscope builds, and what transformers makes
of them, into fixtures/weights/gguf/:

- `NAME.gguf`: llama.cpp's metadata keys and tensor names (gguf-py's own name map) for a 2-layer
  model of each architecture, the 2-D weights in Q8_0 / Q4_K / Q6_K blocks, the rest F32;
- `NAME.json`: the config transformers rebuilds from the file (`AutoConfig.from_pretrained(folder,
  gguf_file=...)`, its legacy GGUF loader), which ../shared/truth measures (`hf:` that file);
- `refused/*.gguf`: files vramscope must refuse by name (an architecture transformers loads but
  vramscope does not build, one neither knows, a llama-architecture file with experts);
- `reference.json`: per file, that config's memory-relevant fields and the parameter count of the
  model `AutoModelForCausalLM.from_pretrained(folder, gguf_file=...)` loads (every tensor
  dequantized), which the tests compare vramscope's own reading of the GGUF header with.

Run in the truth venv (torch, transformers 5.23, gguf 0.19): `~/.venvs/truth/bin/python
validation/make_gguf_model_fixtures.py` (a few seconds).
"""

import json
import pathlib

import gguf
import numpy as np
import torch
from transformers import AutoConfig, AutoModelForCausalLM

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "fixtures" / "weights" / "gguf"
Q = gguf.GGMLQuantizationType

# (file name, gguf arch, general.name, HF config the tensors are laid out from, extra metadata)
SMALL = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=256, max_position_embeddings=512)
CASES = [
    ("llama", "llama", "tiny-llama", dict(model_type="llama", head_dim=16, tie_word_embeddings=False, **SMALL)),
    ("llama_tied", "llama", "tiny-llama-tied",
     dict(model_type="llama", head_dim=16, tie_word_embeddings=True, **SMALL)),
    ("qwen2", "qwen2", "tiny-qwen2", dict(model_type="qwen2", tie_word_embeddings=False, **SMALL)),
    ("qwen3", "qwen3", "tiny-qwen3", dict(model_type="qwen3", head_dim=128, tie_word_embeddings=True, **SMALL)),
    ("gemma2", "gemma2", "tiny-gemma2",
     dict(model_type="gemma2", head_dim=32, sliding_window=128, tie_word_embeddings=True, **SMALL)),
    ("gemma3", "gemma3", "tiny-gemma3",
     dict(model_type="gemma3_text", head_dim=32, sliding_window=128, tie_word_embeddings=True, **SMALL)),
    ("phi3", "phi3", "tiny-phi3",
     dict(model_type="phi3", tie_word_embeddings=False, pad_token_id=0, **{**SMALL, "num_key_value_heads": 4})),
    ("gpt2", "gpt2", "tiny-gpt2", dict(model_type="gpt2", n_embd=64, n_layer=2, n_head=4, vocab_size=256,
                                       n_positions=1024, tie_word_embeddings=True)),
]
ARCH = {"llama": gguf.MODEL_ARCH.LLAMA, "qwen2": gguf.MODEL_ARCH.QWEN2, "qwen3": gguf.MODEL_ARCH.QWEN3,
        "gemma2": gguf.MODEL_ARCH.GEMMA2, "gemma3": gguf.MODEL_ARCH.GEMMA3, "phi3": gguf.MODEL_ARCH.PHI3,
        "gpt2": gguf.MODEL_ARCH.GPT2}
QUANTS = [Q.Q8_0, Q.Q4_K, Q.Q6_K]


def finish(w: gguf.GGUFWriter) -> None:
    """Writes the header, the metadata and the tensors, and closes the file."""
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def hf_tensors(cfg: dict) -> dict[str, tuple[int, ...]]:
    """The state dict (names and shapes) of the model `cfg` describes, built on the meta device."""
    config = AutoConfig.for_model(**cfg)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    sd = model.state_dict()
    if config.tie_word_embeddings:
        sd.pop("lm_head.weight", None)
    return {k: tuple(v.shape) for k, v in sd.items()}


def write(name: str, arch: str, general_name: str, cfg: dict) -> None:
    n_layers = cfg.get("num_hidden_layers", cfg.get("n_layer"))
    names = gguf.get_tensor_name_map(ARCH[arch], n_layers)
    w = gguf.GGUFWriter(str(OUT / f"{name}.gguf"), arch=arch)
    w.add_name(general_name)
    if arch == "gpt2":
        w.add_context_length(cfg["n_positions"])
        w.add_embedding_length(cfg["n_embd"])
        w.add_feed_forward_length(4 * cfg["n_embd"])
        w.add_block_count(n_layers)
        w.add_head_count(cfg["n_head"])
        w.add_layer_norm_eps(1e-5)
    else:
        w.add_context_length(cfg["max_position_embeddings"])
        w.add_embedding_length(cfg["hidden_size"])
        w.add_feed_forward_length(cfg["intermediate_size"])
        w.add_block_count(n_layers)
        w.add_head_count(cfg["num_attention_heads"])
        w.add_head_count_kv(cfg["num_key_value_heads"])
        w.add_layer_norm_rms_eps(1e-6)
        w.add_rope_freq_base(10000.0)
        head_dim = cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
        w.add_rope_dimension_count(head_dim)
        if arch in ("gemma2", "gemma3", "qwen3"):
            w.add_key_length(head_dim)
            w.add_value_length(head_dim)
        if "sliding_window" in cfg:
            w.add_sliding_window(cfg["sliding_window"])
    w.add_tokenizer_model("gpt2")
    w.add_token_list([f"t{i}" for i in range(cfg["vocab_size"])])
    if "pad_token_id" in cfg:
        w.add_pad_token_id(cfg["pad_token_id"])
    rng = np.random.default_rng(0)
    for i, (hf_name, shape) in enumerate(sorted(hf_tensors(cfg).items())):
        if hf_name.endswith("rotary_emb.inv_freq") or ".attn.bias" in hf_name or ".attn.masked_bias" in hf_name:
            continue
        g = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        if g is None:
            raise SystemExit(f"{name}: no GGUF name for {hf_name}")
        if arch == "gpt2" and len(shape) == 2 and "wpe" not in hf_name and "wte" not in hf_name:
            shape = shape[::-1]  # GPT-2's Conv1D holds [in, out]; llama.cpp stores [out, in]
        data = rng.standard_normal(shape, dtype=np.float32)
        qt = QUANTS[i % len(QUANTS)] if len(shape) == 2 else Q.F32
        blk, _ = gguf.GGML_QUANT_SIZES[qt]
        if len(shape) == 2 and shape[-1] % blk:
            qt = Q.Q8_0
        if qt == Q.F32:
            w.add_tensor(g, data)
        elif qt == Q.Q8_0:
            w.add_tensor(g, gguf.quants.quantize(data, qt), raw_dtype=qt)
        else:
            # K-quant blocks: arbitrary bytes (only the header and the shape matter here)
            bytes_per_row = shape[-1] // blk * gguf.GGML_QUANT_SIZES[qt][1]
            w.add_tensor(g, rng.integers(0, 256, (shape[0], bytes_per_row), dtype=np.uint8), raw_dtype=qt)
    finish(w)


KEEP = ["model_type", "architectures", "num_hidden_layers", "n_layer", "hidden_size", "n_embd",
        "intermediate_size", "n_inner", "num_attention_heads", "n_head", "num_key_value_heads", "head_dim",
        "vocab_size", "tie_word_embeddings", "sliding_window", "max_position_embeddings", "n_positions",
        "num_experts", "num_experts_per_tok"]


def write_refused() -> None:
    """Headers vramscope refuses: each with a 2-D tensor so that only the metadata is at fault."""
    bad = OUT / "refused"
    bad.mkdir(parents=True, exist_ok=True)
    for name, arch, extra in (("bloom", "bloom", {}), ("mystery", "mystery", {}),
                              ("llama-experts", "llama", {"expert_count": 8, "expert_used_count": 2})):
        w = gguf.GGUFWriter(str(bad / f"{name}.gguf"), arch=arch)
        w.add_name(f"tiny-{name}")
        w.add_block_count(1)
        w.add_embedding_length(64)
        for key, value in extra.items():
            w.add_uint32(f"{arch}.{key}", value)
        w.add_tensor("token_embd.weight", np.zeros((8, 64), dtype=np.float32))
        finish(w)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    write_refused()
    reference = {}
    for name, arch, general_name, cfg in CASES:
        write(name, arch, general_name, cfg)
        config = AutoConfig.from_pretrained(str(OUT), gguf_file=f"{name}.gguf")
        model = AutoModelForCausalLM.from_pretrained(str(OUT), gguf_file=f"{name}.gguf")
        params = sum(p.numel() for p in model.parameters())
        d = config.to_dict()
        reference[f"{name}.gguf"] = {
            "config": {k: d[k] for k in KEEP if k in d},
            "class": type(model).__name__,
            "parameters": params,
            "param_dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        }
        config.to_json_file(str(OUT / f"{name}.json"))
        print(name, type(model).__name__, params)
    (OUT / "reference.json").write_text(json.dumps(reference, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
