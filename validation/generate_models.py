"""`measure.py --model py:validation/generate_models.py:FACTORY --mode infer` models for generation truth.

`generate`: an HF causal LM built from a config.json (random init, `attn_implementation="sdpa"`, as
measure.py's hf: models, but with the KV cache on) whose inference "forward" is
`model.generate(input_ids, do_sample=False, max_new_tokens=N)`: transformers 5.23's own
`GenerationMixin.generate` / `_sample` with its default `DynamicCache`, run unchanged (`use_cache=False`:
the config's `use_cache` false, with which generate() keeps no cache and reruns the whole sequence
every step; vramscope refuses that, so it is for looking at traces only). The batch is
`input_ids = [B, seq]` random token ids (`seq` is the prompt length P); each iteration's output is
the `[B, P + N]` sequences tensor.

`generate` needs tensor *values* at a few places, which FakeTensorMode cannot give (it raises
DataDependentOutputException on `bool(tensor)`). `_ScriptedValues`, a TorchDispatchMode entered
around `generate`, answers exactly those reads (`aten._local_scalar_dense`, the op behind
`bool()` / `.item()`) with what a real run on these inputs answers, after the same ops ran:
  * `_prepare_special_tokens`: whether the pad token is an EOS token and whether an EOS id is
    negative (warnings only) -> computed from the generation config's ids;
  * `_get_logits_processor`: whether a prompt id is negative (a -100 dummy) -> False;
  * `generate`: `(attention_mask == 1).all()` -> True (no padding: the mask is dropped);
  * `generate`: the right-padding check `sum(input_ids[:, -1] == pad) > 0` -> False;
  * `StopCheck.__call__`: `unfinished_sequences.max() == 0` -> True exactly when the sequence has
    reached `max_length` (a run in which no sequence emits EOS early, so all N tokens are made);
any other value read raises, naming the source line, so a change in transformers cannot be answered
silently.

`eager`: the same model as measure.py's hf: models (use_cache=False, the plain forward, loss
`model.loss_function`) but with `attn_implementation="eager"` (measure.py's hf: loader sets sdpa
after applying --config-overrides, so the override cannot select eager there).

`eager_encoder`: measure.py's hf: masked-lm / seq-cls model (`build_hf`: the class
`AutoModelFor{MaskedLM,SequenceClassification}` maps the config to, built as `cls(cfg)`, input_ids
`[B, S]` random and no attention mask, masked-lm labels random at every position, seq-cls labels
`[B]`, `model.loss_function(...)` outside the forward, seq-cls `pad_token_id` set when unset,
`checkpoint=True`: `gradient_checkpointing_enable()` with default kwargs) with
`attn_implementation="eager"`, for BERT, RoBERTa and DistilBERT. (T5 with eager attention is
`t5_models.py:t5` with `attn="eager"`.)
"""
import inspect
import linecache
import os
import sys

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lora_models import _patch_packed_sequence_detection, causal_lm_step, cuda_init_first  # noqa: E402


def _config(config, layers, attn, overrides=None):
    import transformers
    here = os.path.dirname(os.path.abspath(__file__))
    path = config if os.path.isabs(config) else os.path.join(here, "..", config)
    cfg = transformers.AutoConfig.from_pretrained(path)
    if layers:
        cfg.num_hidden_layers = int(layers)
        if hasattr(cfg, "n_layer"):
            cfg.n_layer = int(layers)
    for k, v in (overrides or {}).items():
        setattr(cfg, k, v)
    cfg._attn_implementation = attn
    return cfg


def _source_of(frame):
    """The source of the expression whose value the frame is reading: the instruction running (a
    `bool(...)` call) and the one before it (the value an `if` tests), lines joined."""
    pos = list(frame.f_code.co_positions())
    i = frame.f_lasti // 2
    spans = [p for p in (pos[i], pos[i - 1] if i > 0 else pos[i]) if p[0] is not None]
    first = min(p[0] for p in spans) if spans else frame.f_lineno
    last = max(p[1] for p in spans) if spans else frame.f_lineno
    return " ".join(linecache.getline(frame.f_code.co_filename, n).strip() for n in range(first, last + 1))


class _ScriptedValues(TorchDispatchMode):
    """Answers the value reads of `generate` as a real run on these inputs answers them."""

    def __init__(self, max_length, padded=False):
        super().__init__()
        self.max_length = max_length
        self.padded = padded
        self.answered = []

    def _answer(self):
        f = inspect.currentframe()
        while f is not None:
            code = f.f_code
            line = _source_of(f)
            if (self.padded and code.co_filename.endswith("masking_utils.py")
                    and code.co_name == "_ignore_causal_mask_sdpa" and "fast_all(padding_mask)" in line):
                return False  # the left-padded row keeps its padding positions in every step's mask
            if code.co_filename.endswith(os.path.join("generation", "utils.py")):
                if code.co_name == "_prepare_special_tokens":
                    # the token ids are Python constants of the generation config
                    gc = f.f_locals["generation_config"]
                    eos = gc.eos_token_id if isinstance(gc.eos_token_id, list) else [gc.eos_token_id]
                    pad = gc.pad_token_id if gc.pad_token_id is not None else eos[0]
                    if "torch.isin(eos_token_tensor, pad_token_tensor).any()" in line:
                        return pad in eos
                    if "(eos_token_tensor < 0).any()" in line:
                        return any(e < 0 for e in eos)
                if code.co_name == "_get_logits_processor" and "(encoder_input_ids < 0).any()" in line:
                    return False  # the prompt's token ids are all valid (non-negative)
                if code.co_name == "generate" and "== 1).all()" in line:
                    return not self.padded
                if code.co_name == "generate" and "has_right_padding" in line:
                    return False
                if code.co_name == "__call__" and "unfinished_sequences.max() == 0" in line:
                    return f.f_locals["length"] >= self.max_length
                raise RuntimeError(f"generate reads a tensor value at {code.co_filename}:{f.f_lineno}: {line}")
            f = f.f_back
        raise RuntimeError("a tensor value is read outside transformers' generation code")

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in (torch.ops.aten._local_scalar_dense.default, torch.ops.aten.item.default):
            v = self._answer()
            self.answered.append(v)
            return v
        return func(*args, **(kwargs or {}))


def generate(batch, seq, new_tokens=16, config="fixtures/hf/configs/qwen2_small_2l.json", layers=None,
             overrides=None, attn="sdpa", pad=0, use_cache=True, **_):
    import transformers
    _patch_packed_sequence_detection()
    cfg = _config(config, layers, attn, overrides)
    # generate() keeps a cache only when the config's use_cache is true
    cfg.use_cache = bool(use_cache)
    # in the measured parameter dtype (measure.py's default dtype), not the config's `torch_dtype`
    # (Phi-3's and Llama 3.2's configs say bfloat16, which from_config would build in)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.get_default_dtype())
    return generation(model, cfg.vocab_size, batch, seq, new_tokens, int(pad))


def generation(model, vocab, batch, seq, new_tokens, pad=0):
    """The `py:` factory result of `model.generate(input_ids, do_sample=False,
    max_new_tokens=N)` on `[B, seq]` random ids below `vocab`, under `_ScriptedValues`. With `pad`,
    a left-padded batch as a tokenizer with `padding_side="left"` makes it: `(input_ids,
    attention_mask)`, the first prompt starting with `pad` padding positions, and
    `generate(input_ids, attention_mask=..., ...)`. An encoder-decoder's sequences start from the
    decoder start token alone: `[B, 1 + N]`."""
    n = int(new_tokens)
    start = 1 if model.config.is_encoder_decoder else seq

    def make_batch():
        ids = torch.randint(0, vocab, (batch, seq))
        if not pad:
            return ids, ids
        mask = torch.ones(batch, seq, dtype=torch.long)
        mask[0, :pad] = 0
        return (ids, mask), ids

    def forward(m, x):
        kw = {}
        if isinstance(x, tuple):
            x, kw["attention_mask"] = x
        with _ScriptedValues(start + n, padded=bool(kw)):
            out = m.generate(x, do_sample=False, max_new_tokens=n, **kw)
        assert out.shape == (batch, start + n), out.shape
        return out

    return model, make_batch, None, forward


def eager(batch, seq, config="fixtures/hf/configs/gpt2_medium_2l.json", layers=None, overrides=None,
          checkpoint=None, **_):
    return _causal_step(batch, seq, config, layers, overrides, checkpoint, "eager")


def _causal_step(batch, seq, config, layers, overrides, checkpoint, attn):
    """measure.py's hf: causal-LM step (see `eager`) under `attn`."""
    import transformers
    _patch_packed_sequence_detection()
    cfg = _config(config, layers, attn, overrides)
    cfg.use_cache = False
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.get_default_dtype())
    if checkpoint:
        model.gradient_checkpointing_enable()
    return causal_lm_step(model, model, cfg, batch, seq)


def eager_encoder(batch, seq, config, task=None, overrides=None, checkpoint=None, **_):
    return _head_step(batch, seq, config, task, overrides, checkpoint, "eager")


def _head_step(batch, seq, config, task, overrides, checkpoint, attn):
    """measure.py's hf: masked-lm / seq-cls step (see `eager_encoder`) under `attn`."""
    import json as _json
    import transformers
    here = os.path.dirname(os.path.abspath(__file__))
    path = config if os.path.isabs(config) else os.path.join(here, "..", config)
    with open(path) as f:
        # the built-in configs (crates/vramscope-formats/data/hf/*.json) carry a `_source` note
        d = {k: v for k, v in _json.load(f).items() if not k.startswith("_")}
    cfg = transformers.CONFIG_MAPPING[d["model_type"]].from_dict(d)
    for k, v in (overrides or {}).items():
        setattr(cfg, k, v)
    archs = cfg.architectures or []
    task = task or ("seq-cls" if any("SequenceClassification" in a for a in archs) else "masked-lm")
    auto = {"masked-lm": transformers.AutoModelForMaskedLM,
            "seq-cls": transformers.AutoModelForSequenceClassification}[task]
    cls = auto._model_mapping[type(cfg)]
    cfg._attn_implementation = attn
    if hasattr(cfg, "use_cache"):
        cfg.use_cache = False
    if task == "seq-cls" and getattr(cfg, "pad_token_id", None) is None and batch > 1:
        cfg.pad_token_id = getattr(cfg, "eos_token_id", None) or 0
    model = cls(cfg)
    assert model.config._attn_implementation == attn, model.config._attn_implementation
    if checkpoint:
        model.gradient_checkpointing_enable()
    V, nl = cfg.vocab_size, getattr(cfg, "num_labels", 2)

    def make_batch():
        ids = torch.randint(0, V, (batch, seq))
        if task == "masked-lm":
            labels = torch.randint(0, V, (batch, seq))
        else:
            labels = torch.randint(0, nl, (batch,))
        return ids, labels

    def forward(m, x):
        return m(input_ids=x).logits

    if task == "seq-cls":
        def loss(out, y):
            return model.loss_function(labels=y, pooled_logits=out, config=model.config)
    else:
        def loss(out, y):
            return model.loss_function(out, y, vocab_size=V)

    return model, make_batch, loss, forward


def cuda_initialized(batch, seq, config, layers=None, overrides=None, attn="sdpa", checkpoint=None,
                     task="causal-lm", **_):
    """measure.py's hf: causal-LM step (`causal_lm_step`, SDPA unless `attn`; `task="seq-cls"`:
    its sequence-classification step, as `eager_encoder` builds it) with the CUDA runtime
    initialized before the first forward (`torch.cuda.init()`), as a real run's first CUDA call
    does. Under fake CUDA a checkpointed Mixture-of-Experts step without bf16 autocast
    (whose capability check initializes it) otherwise initializes it inside the first
    checkpointed layer, which `torch.utils.checkpoint` refuses ("device state was initialized in
    the forward pass of a Checkpoint")."""
    if task == "seq-cls":
        _patch_packed_sequence_detection()
        return cuda_init_first(_head_step(batch, seq, config, task, overrides, checkpoint, attn))
    return cuda_init_first(_causal_step(batch, seq, config, layers, overrides, checkpoint, attn))
