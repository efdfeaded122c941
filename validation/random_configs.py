#!/usr/bin/env python3
"""Random configs of the supported families: each built-in config with its sizes, head layout, kv
heads, `head_dim`, biases, tying, experts and head class drawn at random (`--medium`: checkpoint-like
widths and lengths; `--nulls`: one optional field set to null in a third of them).

Default: each config is built by transformers on the meta device and by vramscope, and the
parameter counts must be equal.

`--truth K`: K configs of the causal-LM, masked-LM and sequence-classification heads (the ones
`../shared/truth/measure.py --model hf:CONFIG` builds), each run at a random batch, sequence
length, precision, optimizer, mode and checkpointing through measure.py and through `vramscope
estimate`: peak allocated and peak reserved are compared (the issue's tolerance: 2% on the peak).
With `--generate`, K random causal LMs' `model.generate()` (validation/generate_models.py) at a
random batch, prompt, number of new tokens and precision against `estimate --mode generate`; with
`--heads`, K random token classifiers, question-answering models and bare models
(validation/encoder_head_models.py) against `estimate --task token-cls | qa | feature-extraction`;
with `--t5`, K random T5 / mT5 / UMT5 training or evaluation steps (validation/t5_models.py; with
`--generate`, their `model.generate`); `--no-cache` with `--generate`: every config with
`use_cache: false` (no KV cache, every step over the whole sequence; `--use-cache false`);
with `--eager`, K random causal LMs under `attn_implementation="eager"`
(validation/generate_models.py:eager) against `estimate --attn-implementation eager`; with
`--lora`, K random causal LMs with LoRA adapters on random targets, rank and dropout
(validation/lora_models.py:lora) against `estimate --lora R --lora-targets ...`.

Draws on top of the built-in configs' fields, each drawn after everything else (a seed's other
draws stay what they were): `--knobs` (activations, attention scaling, LayerNorm affine, router
logits and jitter, rope scaling), `--dropouts` (every dropout probability), `--windows` (with
--generate: eager attention and small sliding windows, Gemma2 too, GPT-2's
`reorder_and_upcast_attn`; with --eager, --lora: the windows), `--half` (pure fp16 / bf16 models in the training and inference steps).
`--moe` draws every config from the Mixture-of-Experts families instead (Mixtral, Qwen2-MoE,
Qwen3-MoE: experts, top-k, expert widths, Qwen's shared expert, sparse-step grid and dense
layers), in every mode.

Prints each difference and the total; configs go to a temporary folder.

    ~/.venvs/truth/bin/python validation/random_configs.py [SEED] [N]
    ~/.venvs/truth/bin/python validation/random_configs.py SEED --truth K [--jobs 2] [--generate | --heads | --t5]
    python3 validation/random_configs.py SEED --truth K --write-cases random   # commit them
    python3 validation/random_configs.py SEED --truth K --eager --write-cases random_eager
    python3 validation/random_configs.py SEED --truth K --t5 --write-cases NAME [--only I,J]
"""
import argparse
import concurrent.futures as cf
import json
import os
import random
import subprocess
import sys
import tempfile
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
BIN = os.environ.get("VRAMSCOPE_BIN", os.path.join(ROOT, "target", "release", "vramscope"))
MEASURE = os.path.join(ROOT, "..", "shared", "truth", "measure.py")
Z = os.path.join(ROOT, "crates", "vramscope-formats", "data", "hf")
BASES = {
    "gpt2": "gpt2.json", "opt": "opt-125m.json", "llama": "llama-3.2-1b.json", "mistral": "mistral-7b.json",
    "qwen2": "qwen2.5-0.5b.json", "qwen3": "qwen3-0.6b.json", "phi3": "phi-3-mini.json",
    "gemma2": "gemma-2-2b.json", "gemma3_text": "gemma-3-1b.json", "mixtral": "mixtral-8x7b.json",
    "bert": "bert-base-uncased.json", "roberta": "roberta-base.json", "distilbert": "distilbert-base-uncased.json",
    "t5": "t5-small.json", "mt5": "mt5-small.json", "umt5": "umt5-small.json", "xlm-roberta": "xlm-roberta-base.json",
    # no built-in Qwen MoE config: the committed small ones
    "qwen2_moe": os.path.join(ROOT, "fixtures", "hf", "configs", "qwen2_moe_small_3l.json"),
    "qwen3_moe": os.path.join(ROOT, "fixtures", "hf", "configs", "qwen3_moe_small_2l.json"),
}
HEADS = {
    "gpt2": ["GPT2LMHeadModel", "GPT2ForSequenceClassification", "GPT2ForTokenClassification",
             "GPT2ForQuestionAnswering", "GPT2Model"],
    "opt": ["OPTForCausalLM", "OPTForSequenceClassification", "OPTForQuestionAnswering", "OPTModel"],
    "bert": ["BertForMaskedLM", "BertForSequenceClassification", "BertForTokenClassification",
             "BertForQuestionAnswering", "BertModel"],
    "roberta": ["RobertaForMaskedLM", "RobertaForSequenceClassification", "RobertaForTokenClassification",
                "RobertaForQuestionAnswering", "RobertaModel"],
    "xlm-roberta": ["XLMRobertaForMaskedLM", "XLMRobertaForSequenceClassification", "XLMRobertaModel"],
    "distilbert": ["DistilBertForMaskedLM", "DistilBertForSequenceClassification",
                   "DistilBertForQuestionAnswering", "DistilBertModel"],
    "t5": ["T5ForConditionalGeneration", "T5EncoderModel", "T5Model"],
    "mt5": ["MT5ForConditionalGeneration", "MT5Model"],
    "umt5": ["UMT5ForConditionalGeneration", "UMT5EncoderModel"],
}
PREFIX = {"llama": "Llama", "mistral": "Mistral", "qwen2": "Qwen2", "qwen3": "Qwen3", "phi3": "Phi3",
          "gemma2": "Gemma2", "gemma3_text": "Gemma3", "mixtral": "Mixtral", "qwen2_moe": "Qwen2Moe",
          "qwen3_moe": "Qwen3Moe"}
# the heads measure.py's hf: route builds
MEASURED = ("ForCausalLM", "LMHeadModel", "ForMaskedLM", "ForSequenceClassification")


def heads_of(mt):
    if mt in HEADS:
        return HEADS[mt]
    p = PREFIX[mt]
    return [f"{p}ForCausalLM", f"{p}ForSequenceClassification", "Gemma3TextModel" if mt == "gemma3_text" else f"{p}Model"]


# `--medium`: checkpoint-like widths and lengths (the caching allocator's large blocks, segments
# and rounding come into play) instead of toy ones
MEDIUM = False
# `--optimizers`: training steps under the optimizers measure.py does not ship, measured through
# validation/measure_more_optimizers.py (Adam without weight decay is measure.py's own)
OPTIMIZERS = False
MORE_OPTIMIZERS = ["adam", "adagrad", "rmsprop", "adafactor", "adam_fused", "adamw_fused"]
# `--large`: full-size widths (4096 to 8192, head_dim 128), vocabularies (128k to 256k) and sequence
# lengths (2048 to 8192) at one to three layers: the caching allocator's largest blocks
LARGE = False
# `--nulls`: a third of the configs get one optional field set to null
NULLS = False
# `--knobs`: memory-relevant fields the built-in configs leave at their defaults, drawn at random
# after everything else (the activation, GPT-2's attention scaling flags, OPT's LayerNorm affine
# and biases, Mixtral's router logits and jitter, rope scaling)
KNOBS = False
# `--dropouts`: the dropout probabilities (0 or 0.1, classifier dropouts also unset), drawn last
DROPOUTS = False
# `--half`: pure float16 / bfloat16 models in the training and inference steps
HALF = False
# `--windows` (with --generate): Gemma2 among the families, eager attention in half the cases and
# a small sliding window (past which the generation runs) in most, drawn last
WINDOWS = False
# `--moe`: every config from the Mixture-of-Experts families (whatever the mode's families)
MOE = False
MOE_FAMILIES = ["mixtral", "qwen2_moe", "qwen3_moe"]
# `--no-cache` (with --generate): configs with use_cache false, so that generate() keeps no cache
NO_CACHE = False
# `--odd-heads`: head dims the fused attention kernels do not take as they are
ODD_HEADS = False
ACTIVATIONS = ["gelu", "gelu_pytorch_tanh", "gelu_new", "gelu_fast", "quick_gelu", "relu", "relu2",
               "silu", "tanh", "sigmoid", "linear", "gelu_accurate", "relu6", "hardswish"]
# `--pad`: half the generation, per-token-head and T5 cases (with a batch of 2 or more) run on a
# padded batch (a left-padded prompt for generate, a collator's `attention_mask` otherwise)
PAD = False


def padding_of(rng, batch, seq):
    """With `--pad`, the padding positions of the first row (`pad` of the truth models, `--padded`
    for vramscope), drawn after the case's other draws; 0 for an unpadded batch."""
    if not PAD or batch < 2 or rng.random() < 0.5:
        return 0
    return rng.randint(1, max(1, seq // 4))


def knob_fields(rng, mt, cfg):
    """`--knobs`: sets some memory-relevant fields of `cfg` (family `mt`) at random."""
    field = {"gpt2": "activation_function", "opt": "activation_function", "distilbert": "activation",
             "gemma2": "hidden_activation", "gemma3_text": "hidden_activation"}.get(mt, "hidden_act")
    if mt in ("t5", "mt5", "umt5"):
        cfg["feed_forward_proj"] = rng.choice(["", "gated-"]) + rng.choice(ACTIVATIONS)
    elif rng.random() < 0.7:
        cfg[field] = rng.choice(ACTIVATIONS)
    if mt == "gpt2":
        cfg["scale_attn_by_inverse_layer_idx"] = rng.choice([True, False])
        cfg["scale_attn_weights"] = rng.choice([True, True, False])
    if mt == "opt":
        cfg["layer_norm_elementwise_affine"] = rng.choice([True, False])
        cfg["enable_bias"] = rng.choice([True, False])
    if mt in MOE_FAMILIES:
        cfg["output_router_logits"] = rng.choice([True, False])
        if mt != "mixtral" and not any((i + 1) % cfg["decoder_sparse_step"] == 0 and i not in cfg["mlp_only_layers"]
                                       for i in range(cfg["num_hidden_layers"])):
            # every layer dense: transformers' load-balancing loss fails (vramscope refuses it)
            cfg["output_router_logits"] = False
    if mt == "mixtral":
        cfg["router_jitter_noise"] = rng.choice([0.0, 0.01, 0.1])
    if mt in ("llama", "mistral", "qwen2", "qwen3") and rng.random() < 0.5:
        cfg["rope_scaling"] = rng.choice([{"rope_type": "linear", "factor": 2.0},
                                          {"rope_type": "yarn", "factor": 4.0,
                                           "original_max_position_embeddings": 64}])


DROPOUT_FIELDS = {
    "gpt2": ["resid_pdrop", "embd_pdrop", "attn_pdrop", "summary_first_dropout"],
    "opt": ["dropout", "attention_dropout", "activation_dropout"],
    "bert": ["hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout"],
    "roberta": ["hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout"],
    "xlm-roberta": ["hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout"],
    "distilbert": ["dropout", "attention_dropout", "seq_classif_dropout", "qa_dropout"],
    "t5": ["dropout_rate", "classifier_dropout"], "mt5": ["dropout_rate", "classifier_dropout"],
    "umt5": ["dropout_rate", "classifier_dropout"],
    "phi3": ["attention_dropout", "resid_pdrop", "embd_pdrop"],
}


def dropout_fields(rng, mt, cfg):
    """`--dropouts`: each dropout probability of family `mt` 0 or 0.1 (a classifier's also unset,
    which falls back on the hidden dropout)."""
    for field in DROPOUT_FIELDS.get(mt, ["attention_dropout"]):
        choices = [0.0, 0.1, None] if "classif" in field else [0.0, 0.1]
        p = rng.choice(choices)
        if p is None:
            cfg.pop(field, None)
        else:
            cfg[field] = p


def random_config(rng, families=None, measured_heads=False):
    """One random config (a dict with `architectures`)."""
    if MOE:
        families = MOE_FAMILIES
    else:
        families = [m for m in (families or list(BASES)) if m not in MOE_FAMILIES[1:]]
    mt = rng.choice(families)
    with open(os.path.join(Z, BASES[mt])) as f:
        cfg = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    if LARGE:
        heads = rng.choice([32, 48, 64])
        hidden = heads * 128
        vocab = rng.choice([128256, 151936, 256000])
    else:
        heads = rng.choice([8, 16, 32] if MEDIUM else [2, 4, 8])
        hidden = heads * rng.choice([64, 128] if MEDIUM else [16, 32])
        if ODD_HEADS:
            # head dims the fused attention kernels do not take as they are (flash pads them,
            # float32 odd ones run the math fallback) and one past 256
            hidden = heads * rng.choice([4, 6, 10, 12, 20, 36, 100])
        vocab = rng.choice([32000, 50257]) if MEDIUM else 1000

    def ffn():
        if LARGE:
            return rng.choice([4 * hidden, hidden * 7 // 2 // 256 * 256, hidden * 8 // 3 // 256 * 256])
        return rng.choice([4 * hidden, hidden * 8 // 3 // 64 * 64]) if MEDIUM else rng.choice([128, 200])
    if mt == "gpt2":
        cfg.update(n_embd=hidden, n_head=heads, n_layer=rng.choice([1, 2, 3]), vocab_size=vocab + rng.choice([0, 3]),
                   n_inner=rng.choice([None, 4 * hidden + 8]))
    elif mt == "opt":
        cfg.update(hidden_size=hidden, num_attention_heads=heads, num_hidden_layers=rng.choice([1, 2]),
                   ffn_dim=ffn(), word_embed_proj_dim=rng.choice([hidden, hidden // 2]),
                   vocab_size=vocab, do_layer_norm_before=rng.choice([True, False]))
    elif mt == "distilbert":
        cfg.update(dim=hidden, n_heads=heads, n_layers=rng.choice([1, 2]), hidden_dim=ffn(),
                   vocab_size=vocab)
    elif mt in ("bert", "roberta", "xlm-roberta"):
        cfg.update(hidden_size=hidden, num_attention_heads=heads, num_hidden_layers=rng.choice([1, 2]),
                   intermediate_size=ffn(), vocab_size=vocab, num_labels=rng.choice([2, 5]))
    elif mt in ("t5", "mt5", "umt5"):
        cfg.update(d_model=hidden, num_heads=heads, d_kv=rng.choice([6, 10, 12] if ODD_HEADS else [16, 24]), d_ff=ffn(),
                   num_layers=rng.choice([1, 2]), num_decoder_layers=rng.choice([1, 3]), vocab_size=vocab)
    else:
        kv = rng.choice([k for k in (1, 2, heads) if heads % k == 0])
        cfg.update(hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv,
                   num_hidden_layers=rng.choice([1, 2, 3]), intermediate_size=ffn(),
                   vocab_size=vocab + rng.choice([0, 24]), tie_word_embeddings=rng.choice([True, False]))
        if rng.random() < 0.4:
            cfg["head_dim"] = rng.choice([6, 12, 20, 264] if ODD_HEADS else [16, 24, 64])
        if mt in ("llama", "qwen2", "qwen3", "mistral", "mixtral") and rng.random() < 0.3:
            cfg["attention_bias"] = True
        if mt == "mixtral":
            cfg.update(num_local_experts=rng.choice([2, 4]), num_experts_per_tok=2)
        if mt in ("qwen2_moe", "qwen3_moe"):
            experts = rng.choice([2, 4, 8])
            layers = cfg["num_hidden_layers"]
            cfg.update(num_experts=experts, num_experts_per_tok=rng.choice([k for k in (1, 2, 4) if k <= experts]),
                       moe_intermediate_size=rng.choice([32, 64, 96]) * (4 if MEDIUM or LARGE else 1),
                       norm_topk_prob=rng.choice([True, False]), decoder_sparse_step=rng.choice([1, 1, 2]),
                       mlp_only_layers=sorted(rng.sample(range(layers), rng.choice([0, 0, 1]))))
            if mt == "qwen2_moe":
                cfg["shared_expert_intermediate_size"] = rng.choice([64, 128]) * (4 if MEDIUM or LARGE else 1)
                cfg["qkv_bias"] = rng.choice([True, False])
        if mt in ("gemma2", "gemma3_text"):
            cfg.pop("layer_types", None)
        if mt == "phi3":
            cfg.pop("rope_scaling", None)
        if rng.random() < 0.3:
            cfg["mlp_bias"] = True
    # the parameters' dtype is the precision's: a config's `dtype` would make the generic heads'
    # base model (`AutoModel.from_config(config)`) half under measure.py's float32 default
    cfg.pop("dtype", None)
    cfg.pop("torch_dtype", None)
    # token ids of the full-size vocabulary would fall outside the drawn one
    for k in ("pad_token_id", "bos_token_id", "eos_token_id"):
        if isinstance(cfg.get(k), int) and cfg[k] >= vocab:
            cfg[k] = None
    # an optional field set to null, as many checkpoints' config.json do: None in transformers,
    # whatever the config class's default is
    if NULLS and rng.random() < 0.3:
        nullable = [k for k in ("head_dim", "num_key_value_heads", "sliding_window", "pad_token_id",
                                "bos_token_id", "eos_token_id", "rope_scaling", "layer_types",
                                "n_inner", "classifier_dropout", "attention_dropout")
                    if k in cfg or k in ("head_dim", "pad_token_id")]
        if mt in ("roberta", "xlm-roberta"):
            # their embeddings number positions from it and transformers' forward fails without
            # one (vramscope refuses it); measure.py sets it for a classifier's batch of two or
            # more, which would make such a draw look like a vramscope failure
            nullable.remove("pad_token_id")
        cfg[rng.choice(nullable)] = None
    heads = [h for h in heads_of(mt) if not measured_heads or h.endswith(MEASURED)]
    cfg["architectures"] = [rng.choice(heads)]
    if cfg["architectures"][0].endswith("ForQuestionAnswering"):
        # a start and an end logit: transformers builds other counts but its forward fails on them
        cfg["num_labels"] = 2
    if KNOBS:
        knob_fields(rng, mt, cfg)
    if DROPOUTS:
        dropout_fields(rng, mt, cfg)
    return mt, cfg


def parameter_counts(seed, n, tmp):
    sys.path.insert(0, HERE)
    from hf_reference import build
    rng = random.Random(seed)
    fails = 0
    for i in range(n):
        mt, cfg = random_config(rng)
        path = os.path.join(tmp, f"c{i}.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        try:
            ref = sum(p.numel() for p in build(cfg).parameters())
        except Exception as e:  # transformers refuses the draw itself
            print(f"{i} {mt} {cfg['architectures'][0]}: transformers refuses: {str(e)[:100]}")
            continue
        r = subprocess.run([BIN, "estimate", path, "--seq-len", "32", "-b", "1", "--mode", "infer", "--json"],
                           capture_output=True, text=True)
        if r.returncode != 0:
            print(f"{i} {mt} {cfg['architectures'][0]}: vramscope error: {r.stderr.strip()[:200]}")
            fails += 1
            continue
        got = json.loads(r.stdout)["model"]["parameters"]
        if got != ref:
            print(f"{i} {mt} {cfg['architectures'][0]}: parameters {got}, transformers {ref}")
            fails += 1
    print(f"{n} configs, {fails} differences or errors")


def precision_flag(amp, param_dtype):
    """`estimate --precision` for measure.py's `--amp` and `--param-dtype`."""
    return {"bf16": "amp-bf16", "fp16": "amp-fp16"}.get(amp) or {"bf16": "bf16", "fp16": "fp16"}.get(
        param_dtype, "fp32")


def measured_against(what, measure_cmd, vramscope_args):
    """Runs `measure_cmd` (../shared/truth) and `vramscope estimate ... --json`: `(what, (peak
    allocated error %, peak reserved error %, worst |error| % of a phase's peak or end
    allocated))`, or `(what, message)` when either fails."""
    t = subprocess.run(measure_cmd, capture_output=True, text=True)
    if t.returncode != 0:
        # a config transformers cannot build should be refused by vramscope too
        r = subprocess.run([BIN, "estimate", *vramscope_args, "--json"], capture_output=True, text=True)
        ours = (f"vramscope refuses it too: {r.stderr.strip().splitlines()[-1][:200]}" if r.returncode
                else "vramscope estimated it  <-- should be refused")
        return what, f"measure.py failed: {(t.stderr.strip() or t.stdout.strip())[-300:]}\n    {ours}"
    record = json.loads(t.stdout.strip().splitlines()[-1])
    if "overall" not in record:
        # measure_more_optimizers.py prints a failed case's record and exits 0
        return what, f"measure failed: {str(record.get('error'))[-300:]}"
    truth = record["overall"]["peak"]
    r = subprocess.run([BIN, "estimate", *vramscope_args, "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        return what, f"vramscope error: {r.stderr.strip()[:200]}"
    report = json.loads(r.stdout)
    ours = report["peak"]
    # the worst phase (peak and end allocated), where a model-phase peak hides the others
    mine = {p["name"]: p for p in report["phases"]}
    worst_phase = 0.0
    for p in record.get("phases", []):
        o = mine.get(p["phase"])
        for t, e in ((p["peak"]["alloc"], o and o["peak_allocated_bytes"]),
                     (p["after"]["alloc"], o and o["allocated_after_bytes"])):
            if o and t > 0:
                worst_phase = max(worst_phase, abs(e - t) / t * 100)
    return what, ((ours["allocated_bytes"] - truth["alloc"]) / truth["alloc"] * 100,
                  (ours["reserved_bytes"] - truth["reserved"]) / truth["reserved"] * 100, worst_phase)


def within_positions(mt, cfg, seq):
    """`seq` capped at the positions the model has: the encoders' 512 learned ones, GPT-2's
    `n_positions`, the others' `max_position_embeddings` (measure.py refuses longer ones; the
    truth tool's FakeTensors would index past them where a GPU fails)."""
    if mt in ("bert", "roberta", "xlm-roberta", "distilbert"):
        return min(seq, 512)
    return min(seq, cfg.get("n_positions") or cfg.get("max_position_embeddings") or seq)


def random_step(rng):
    """Batch, sequence length, mode, autocast, parameter dtype, optimizer, checkpointing."""
    batch, seq = rng.choice([1, 2, 4]), rng.choice([2048, 4096, 8192] if LARGE else [512, 1000, 2048] if MEDIUM else [64, 128, 200, 256])
    mode = rng.choice(["train", "train", "infer"])
    amp = rng.choice(["fp32", "bf16", "fp16"])
    pdt = "fp32" if amp != "fp32" or mode == "train" else rng.choice(["fp32", "bf16"])
    optim = rng.choice(["adamw", "sgd", "sgdm"])
    ckpt = mode == "train" and rng.random() < 0.3
    if OPTIMIZERS:
        # drawn after the others, so the rest of a seed's steps stay what they were
        mode, optim = "train", rng.choice(MORE_OPTIMIZERS)
        pdt = rng.choice(["fp32", "fp32", "bf16"]) if amp == "fp32" else "fp32"
        ckpt = rng.random() < 0.3
    if HALF:
        # a pure half model (`model.half()` / `model.bfloat16()`), drawn after the others
        amp, pdt = "fp32", rng.choice(["fp16", "bf16"])
    return batch, seq, mode, amp, pdt, optim, ckpt


def task_of(cfg):
    arch = cfg["architectures"][0]
    if arch.endswith("ForSequenceClassification"):
        return "seq-cls"
    return "masked-lm" if arch.endswith("ForMaskedLM") else "causal-lm"


def truth_cases(seed, k):
    """K random configs measure.py's hf: route builds, each with its random step."""
    rng = random.Random(seed)
    # T5 has no hf: route in measure.py; Gemma2 runs eager attention only, which it does not set
    families = [m for m in BASES if m not in ("t5", "mt5", "umt5", "gemma2")]
    out = []
    for i in range(k):
        mt, cfg = random_config(rng, families, measured_heads=True)
        step = random_step(random.Random(seed * 1000 + i))
        if mt == "mixtral" and not MOE:
            # measure.py's hf: route cannot checkpoint Mixtral's layers ("device state was
            # initialized in the forward pass of a Checkpoint"); --moe measures them through
            # generate_models.py:cuda_initialized (truth_case), and old seeds keep their steps
            step = (*step[:-1], False)
        out.append((i, mt, cfg, step))
    return out


def write_cases(seed, k, name, causal=None, t5=False, only=None):
    """Commits K random configs (fixtures/hf/random/) and their truth cases
    (validation/cases_NAME.jsonl) for validation/make_py_fixtures.sh; with `causal` (a [`SPECS`]
    name) the causal LMs of that sweep, with `t5` its T5 steps; `only`: those case numbers."""
    folder = os.path.join(ROOT, "fixtures", "hf", "random")
    os.makedirs(folder, exist_ok=True)
    lines = []
    if t5:
        for i, mt, cfg, rng, _ in t5_cases(seed, k, None):
            if only is not None and i not in only:
                continue
            cfg["architectures"] = [{"t5": "T5", "mt5": "MT5", "umt5": "UMT5"}[mt] + "ForConditionalGeneration"]
            cfg["decoder_start_token_id"] = 0
            rel = f"fixtures/hf/random/s{seed}_{i}_{mt}.json"
            note = (f"validation/random_configs.py {seed} --truth {k} --t5 --write-cases {name}: case {i}, "
                    f"drawn from {BASES[mt]}")
            with open(os.path.join(ROOT, rel), "w") as f:
                f.write(json.dumps({"_source": note, **cfg}, indent=2) + "\n")
            batch, seq, target, mode, amp, optim, ckpt, pad = t5_draw(rng)
            args = ["--target-len", str(target), "--use-cache", "false"] + (["--padded"] if pad else [])
            case = {"name": f"s{seed}_{i}_{mt}_b{batch}_s{seq}_t{target}_{mode}_{amp}_{optim}"
                            f"{'_ckpt' if ckpt else ''}{f'_pad{pad}' if pad else ''}",
                    "model": "py:t5_models.py:t5", "batch": batch, "seq": seq, "amp": amp, "optim": optim,
                    "mode": mode, "param_dtype": "fp32",
                    "model_kwargs": {"config": rel, "target_len": target, "pad": pad},
                    "vramscope": {"config": rel, "task": "seq2seq-lm", "args": args}}
            if ckpt:
                case["checkpoint"] = True
            lines.append(json.dumps(case))
        with open(os.path.join(HERE, f"cases_{name}.jsonl"), "w") as f:
            f.write("\n".join(lines) + "\n")
        print(f"wrote {len(lines)} configs and validation/cases_{name}.jsonl")
        return
    if causal is not None:
        spec, sdpa_only = SPECS[causal]
        for i, mt, cfg, rng, _ in causal_cases(seed, k, None, sdpa_only):
            rel = f"fixtures/hf/random/s{seed}_{i}_{mt.replace('-', '_')}.json"
            flag = f"--{causal}"
            note = (f"validation/random_configs.py {seed} --truth {k} {flag} --write-cases {name}: case {i}, "
                    f"drawn from {BASES[mt]}")
            path = os.path.join(ROOT, rel)
            if os.path.exists(path):
                # the other sweep of the same seed drew the same config (same draws, same name)
                with open(path) as f:
                    kept = {k2: v for k2, v in json.load(f).items() if not k2.startswith("_")}
                if kept != cfg:
                    sys.exit(f"{rel} exists with another config; use another seed")
            else:
                with open(path, "w") as f:
                    f.write(json.dumps({"_source": note, **cfg}, indent=2) + "\n")
            case = spec(i, mt, cfg, rng, rel)
            case["name"] = f"s{seed}_{i}_{case['name']}"
            lines.append(json.dumps(case))
        with open(os.path.join(HERE, f"cases_{name}.jsonl"), "w") as f:
            f.write("\n".join(lines) + "\n")
        print(f"wrote {k} configs and validation/cases_{name}.jsonl")
        return
    for i, mt, cfg, (batch, seq, mode, amp, pdt, optim, ckpt) in truth_cases(seed, k):
        rel = f"fixtures/hf/random/s{seed}_{i}_{mt.replace('-', '_')}.json"
        note = f"validation/random_configs.py {seed} --write-cases {name}: case {i}, drawn from {BASES[mt]}"
        with open(os.path.join(ROOT, rel), "w") as f:
            f.write(json.dumps({"_source": note, **cfg}, indent=2) + "\n")
        task = task_of(cfg)
        case = {"name": f"s{seed}_{i}_{mt.replace('-', '_')}_{task.replace('-', '')}_b{batch}_s{seq}_{mode}_{amp}"
                        f"{'' if pdt == 'fp32' else '_p' + pdt}_{optim}{'_ckpt' if ckpt else ''}",
                "model": f"hf:{rel}", "task": task, "batch": batch, "seq": seq, "mode": mode, "amp": amp,
                "param_dtype": pdt, "optim": optim}
        if ckpt:
            case["checkpoint"] = True
        case["vramscope"] = {"config": rel, "args": [], "task": task}
        lines.append(json.dumps(case))
    with open(os.path.join(HERE, f"cases_{name}.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {k} configs and validation/cases_{name}.jsonl")


def truth_case(i, mt, cfg, step, tmp):
    path = os.path.join(tmp, f"t{i}.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    batch, seq, mode, amp, pdt, optim, ckpt = step
    seq = within_positions(mt, cfg, seq)
    what = f"{i} {mt} {cfg['architectures'][0]} b{batch} s{seq} {mode} amp={amp} param={pdt} {optim}{' ckpt' if ckpt else ''}"
    cmd = [sys.executable, MEASURE, "--model", f"hf:{path}", "--batch", str(batch), "--seq", str(seq),
           "--mode", mode, "--amp", amp, "--param-dtype", pdt, "--optim", optim, "--json"]
    if ckpt:
        cmd.append("--checkpoint")
    if ckpt and mt in MOE_FAMILIES and task_of(cfg) in ("causal-lm", "seq-cls"):
        # the same step with CUDA initialized first: under fake CUDA a checkpointed MoE layer
        # would initialize it itself, which torch.utils.checkpoint refuses
        cmd[cmd.index("--model") + 1] = "py:" + os.path.join(HERE, "generate_models.py") + ":cuda_initialized"
        cmd += ["--model-kwargs", json.dumps({"config": path, "task": task_of(cfg)})]
    if optim in MORE_OPTIMIZERS and optim != "adam":
        spec = os.path.join(tmp, f"t{i}_case.jsonl")
        with open(spec, "w") as f:
            f.write(json.dumps({"name": f"t{i}", "model": f"hf:{path}", "task": task_of(cfg), "batch": batch,
                                "seq": seq, "mode": mode, "amp": amp, "param_dtype": pdt, "optim": optim,
                                **({"checkpoint": True} if ckpt else {})}) + "\n")
        cmd = [sys.executable, os.path.join(HERE, "measure_more_optimizers.py"), "--cases", spec]
    precision = precision_flag(amp, pdt)
    optimizer = {"sgdm": "sgd-momentum", "adam_fused": "adam-fused", "adamw_fused": "adamw-fused"}.get(optim, optim)
    args = [path, "-b", str(batch), "--seq-len", str(seq), "--mode", mode, "--precision", precision,
            "--optimizer", optimizer]
    if ckpt:
        args.append("--gradient-checkpointing")
    return measured_against(what, cmd, args)


def generate_case(i, mt, cfg, rng, tmp):
    """`model.generate` of a random causal LM (validation/generate_models.py) against `vramscope
    estimate --mode generate`."""
    path = os.path.join(tmp, f"g{i}.json")
    cfg = dict(cfg)
    attn = cfg.pop("_attn", "sdpa")
    with open(path, "w") as f:
        json.dump(cfg, f)
    batch, prompt, new = rng.choice([1, 2, 4]), rng.choice([16, 40, 128, 512] if MEDIUM else [16, 40, 128]), \
        rng.choice([4, 9, 16])
    amp, pdt = rng.choice([("fp32", "fp32"), ("bf16", "fp32"), ("fp32", "bf16"), ("fp32", "fp16")])
    pad = padding_of(rng, batch, prompt)
    window = cfg.get("sliding_window") if WINDOWS else None
    what = (f"{i} {mt} generate b{batch} p{prompt} n{new} amp={amp} param={pdt}{f' pad={pad}' if pad else ''}"
            f"{' eager' if attn == 'eager' else ''}{f' window={window}' if window else ''}")
    kwargs = {"config": path, "new_tokens": new, "pad": pad}
    if attn != "sdpa":
        kwargs["attn"] = attn
    if NO_CACHE:
        kwargs["use_cache"] = False
        what += " no-cache"
    cmd = [sys.executable, MEASURE, "--model", "py:" + os.path.join(HERE, "generate_models.py") + ":generate",
           "--model-kwargs", json.dumps(kwargs), "--batch", str(batch),
           "--seq", str(prompt), "--mode", "infer", "--amp", amp, "--param-dtype", pdt, "--json"]
    precision = precision_flag(amp, pdt)
    args = [path, "-b", str(batch), "--mode", "generate", "--prompt-len", str(prompt), "--new-tokens",
            str(new), "--precision", precision] + (["--padded"] if pad else []) + (
        ["--attn-implementation", "eager"] if attn == "eager" else []) + (
        ["--use-cache", "false"] if NO_CACHE else [])
    return measured_against(what, cmd, args)


def head_case(i, mt, cfg, rng, tmp):
    """A random token-classification, question-answering or bare model
    (validation/encoder_head_models.py) against `vramscope estimate --task ...`."""
    path = os.path.join(tmp, f"h{i}.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    arch = cfg["architectures"][0]
    task, factory = next((t, f) for suffix, t, f in (
        ("ForTokenClassification", "token-cls", "token_cls"),
        ("ForQuestionAnswering", "qa", "question_answering"),
        ("Model", "feature-extraction", "feature_extraction")) if arch.endswith(suffix))
    batch, seq = rng.choice([1, 2, 4]), rng.choice([2048, 4096, 8192] if LARGE else [512, 1000, 2048] if MEDIUM else [64, 128, 200])
    seq = within_positions(mt, cfg, seq)
    mode = "infer" if task == "feature-extraction" else rng.choice(["train", "train", "infer"])
    amp, pdt = rng.choice([("fp32", "fp32"), ("bf16", "fp32"), ("fp16", "fp32")] + (
        [("fp32", "bf16")] if mode == "infer" else []))
    optim = rng.choice(["adamw", "sgd"])
    pad = padding_of(rng, batch, seq)
    what = f"{i} {mt} {arch} b{batch} s{seq} {mode} amp={amp} param={pdt} {optim}{f' pad={pad}' if pad else ''}"
    cmd = [sys.executable, MEASURE, "--model", "py:" + os.path.join(HERE, "encoder_head_models.py") + ":" + factory,
           "--model-kwargs", json.dumps({"config": path, "attn": "sdpa", "pad": pad}), "--batch", str(batch),
           "--seq", str(seq), "--mode", mode, "--amp", amp, "--param-dtype", pdt, "--optim", optim, "--json"]
    precision = precision_flag(amp, pdt)
    args = [path, "-b", str(batch), "--seq-len", str(seq), "--mode", mode, "--task", task, "--precision",
            precision, "--optimizer", optim] + (["--padded"] if pad else [])
    return measured_against(what, cmd, args)


def head_cases(seed, k, tmp):
    rng = random.Random(seed)
    out = []
    while len(out) < k:
        mt, cfg = random_config(rng, [m for m in BASES if m not in ("t5", "mt5", "umt5", "gemma2")])
        arch = cfg["architectures"][0]
        if arch.endswith(("ForTokenClassification", "ForQuestionAnswering", "Model")):
            out.append((len(out), mt, cfg, random.Random(seed * 1000 + len(out)), tmp))
        elif mt not in HEADS and mt != "gemma3_text":
            # the Llama family's and MoE's generic per-token heads (not built for every family)
            p = PREFIX[mt]
            cfg["architectures"] = [rng.choice([f"{p}ForTokenClassification", f"{p}ForQuestionAnswering"])]
            if mt == "phi3":
                cfg["architectures"] = ["Phi3ForTokenClassification"]
            if cfg["architectures"][0].endswith("ForQuestionAnswering"):
                cfg["num_labels"] = 2
            out.append((len(out), mt, cfg, random.Random(seed * 1000 + len(out)), tmp))
    return out


def t5_case(i, mt, cfg, rng, tmp):
    """A random T5 / mT5 / UMT5 `ForConditionalGeneration` step (validation/t5_models.py, the loss
    inside forward) against `vramscope estimate --target-len T --use-cache false`."""
    path = os.path.join(tmp, f"t5_{i}.json")
    cfg["architectures"] = [{"t5": "T5", "mt5": "MT5", "umt5": "UMT5"}[mt] + "ForConditionalGeneration"]
    cfg["decoder_start_token_id"] = 0
    with open(path, "w") as f:
        json.dump(cfg, f)
    batch, seq, target, mode, amp, optim, ckpt, pad = t5_draw(rng)
    what = f"{i} {mt} b{batch} s{seq} t{target} {mode} amp={amp} {optim}{' ckpt' if ckpt else ''}" \
        f"{f' pad={pad}' if pad else ''}"
    cmd = [sys.executable, MEASURE, "--model", "py:" + os.path.join(HERE, "t5_models.py") + ":t5",
           "--model-kwargs", json.dumps({"config": path, "target_len": target, "pad": pad}), "--batch", str(batch),
           "--seq", str(seq), "--mode", mode, "--amp", amp, "--optim", optim, "--json"]
    if ckpt:
        cmd.append("--checkpoint")
    precision = precision_flag(amp, "fp32")
    args = [path, "-b", str(batch), "--seq-len", str(seq), "--target-len", str(target), "--use-cache", "false",
            "--mode", mode, "--precision", precision, "--optimizer", optim] + (["--padded"] if pad else [])
    if ckpt:
        args.append("--gradient-checkpointing")
    return measured_against(what, cmd, args)


def t5_generate_case(i, mt, cfg, rng, tmp):
    """`model.generate` of a random T5 / mT5 / UMT5 (validation/t5_models.py:generate) against
    `vramscope estimate --mode generate`: SDPA or eager attention, fp32 / AMP bf16 / pure bf16 /
    pure fp16, a left-padded prompt batch with `--pad`. The decoder is cut to the encoder's depth
    where it is deeper (transformers 5.23's generate() fails on such a model, and vramscope
    refuses it)."""
    path = os.path.join(tmp, f"t5g_{i}.json")
    cfg = dict(cfg)
    cfg["architectures"] = [{"t5": "T5", "mt5": "MT5", "umt5": "UMT5"}[mt] + "ForConditionalGeneration"]
    cfg["decoder_start_token_id"] = 0
    cfg["num_decoder_layers"] = min(cfg["num_decoder_layers"], cfg["num_layers"])
    with open(path, "w") as f:
        json.dump(cfg, f)
    batch, prompt, new = rng.choice([1, 2, 4]), rng.choice([16, 40, 128, 512] if MEDIUM else [16, 40, 128]), \
        rng.choice([4, 9, 16])
    amp, pdt = rng.choice([("fp32", "fp32"), ("bf16", "fp32"), ("fp32", "bf16"), ("fp32", "fp16")])
    attn = rng.choice(["sdpa", "eager"])
    pad = padding_of(rng, batch, prompt)
    what = (f"{i} {mt} generate b{batch} p{prompt} n{new} amp={amp} param={pdt}{f' pad={pad}' if pad else ''}"
            f"{' eager' if attn == 'eager' else ''}")
    kwargs = {"config": path, "new_tokens": new, "pad": pad, "attn": attn}
    if NO_CACHE:
        kwargs["overrides"] = {"use_cache": False}
        what += " no-cache"
    cmd = [sys.executable, MEASURE, "--model", "py:" + os.path.join(HERE, "t5_models.py") + ":generate",
           "--model-kwargs", json.dumps(kwargs), "--batch", str(batch),
           "--seq", str(prompt), "--mode", "infer", "--amp", amp, "--param-dtype", pdt, "--json"]
    args = [path, "-b", str(batch), "--mode", "generate", "--prompt-len", str(prompt), "--new-tokens",
            str(new), "--precision", precision_flag(amp, pdt), "--attn-implementation", attn] + (
        ["--padded"] if pad else []) + (["--use-cache", "false"] if NO_CACHE else [])
    return measured_against(what, cmd, args)


def t5_draw(rng):
    """A T5 step's batch, sequence and target lengths, mode, autocast, optimizer, checkpointing
    and padding, drawn in this order."""
    batch, seq, target = rng.choice([1, 2, 4]), rng.choice([64, 128, 200]), rng.choice([16, 50, 128])
    mode = rng.choice(["train", "train", "infer"])
    amp = rng.choice(["fp32", "bf16", "fp16"])
    optim = rng.choice(["adamw", "sgd"])
    ckpt = mode == "train" and rng.random() < 0.3
    return batch, seq, target, mode, amp, optim, ckpt, padding_of(rng, batch, seq)


def t5_cases(seed, k, tmp):
    rng = random.Random(seed)
    out = []
    for i in range(k):
        mt, cfg = random_config(rng, ["t5", "mt5", "umt5"])
        out.append((i, mt, cfg, random.Random(seed * 1000 + i), tmp))
    return out


def generate_cases(seed, k, tmp):
    rng = random.Random(seed)
    # the causal LMs whose generate() is modelled under SDPA (Gemma2's runs eager attention)
    families = ["gpt2", "opt", "llama", "mistral", "qwen2", "qwen3", "phi3", "gemma3_text", "mixtral"]
    if WINDOWS:
        families.append("gemma2")
    out = []
    for i in range(k):
        mt, cfg = random_config(rng, families, measured_heads=True)
        cfg["architectures"] = [heads_of(mt)[0]]  # the causal LM
        if WINDOWS:
            window_fields(rng, mt, cfg)
        out.append((i, mt, cfg, random.Random(seed * 1000 + i), tmp))
    return out


def window_fields(rng, mt, cfg):
    """`--windows`: eager attention (`_attn` in the config, read by generate_case) in half the
    cases, Gemma2 always, and a sliding window of 24 to 80 on the families that have one."""
    cfg["_attn"] = "eager" if mt == "gemma2" or rng.random() < 0.5 else "sdpa"
    if mt == "gpt2":
        # `_upcast_and_reordered_attn` under eager attention, from a generator of its own so that
        # the seed's other draws stay what they were
        cfg["reorder_and_upcast_attn"] = random.Random(json.dumps(cfg, sort_keys=True)).random() < 0.5
    if rng.random() < 0.25:
        return
    w = rng.choice([24, 40, 64, 80])
    layers = cfg.get("num_hidden_layers", 1)
    if mt in ("mistral", "phi3", "mixtral", "gemma2", "gemma3_text"):
        cfg["sliding_window"] = w
    elif mt in ("qwen2", "qwen2_moe"):
        # the layers from (Qwen2) or below (Qwen2-MoE) max_window_layers slide
        cfg.update(use_sliding_window=True, sliding_window=w, max_window_layers=rng.randint(0, layers))
        cfg.pop("layer_types", None)
    elif mt == "qwen3":
        cfg.update(use_sliding_window=True, sliding_window=w,
                   layer_types=[rng.choice(["sliding_attention", "full_attention"]) for _ in range(layers)])
    elif mt == "qwen3_moe":
        cfg.update(use_sliding_window=True, sliding_window=w)


# causal LMs with an eager / LoRA case (validation/generate_models.py:eager, lora_models.py:lora)
CAUSAL = ["gpt2", "opt", "llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3_text", "mixtral"]
# the nn.Linear names a random LoRA picks its targets from
LORA_TARGETS = {
    "gpt2": ["c_attn", "c_proj", "c_fc"],
    "opt": ["q_proj", "k_proj", "v_proj", "out_proj", "fc1", "fc2"],
    "phi3": ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"],
    # Mixtral's experts are fused parameters, not nn.Linear modules
    "mixtral": ["q_proj", "k_proj", "v_proj", "o_proj"],
}


def causal_cases(seed, k, tmp, sdpa_only=False):
    rng = random.Random(seed)
    # lora_models.py and qlora_models.py build with SDPA, which Gemma2's classes do not declare
    families = [m for m in CAUSAL if not (sdpa_only and m == "gemma2")]
    out = []
    for i in range(k):
        mt, cfg = random_config(rng, families, measured_heads=True)
        cfg["architectures"] = [heads_of(mt)[0]]
        if WINDOWS:
            # a small sliding window (the attention choice is the mode's)
            window_fields(rng, mt, cfg)
            cfg.pop("_attn")
        out.append((i, mt, cfg, random.Random(seed * 1000 + i), tmp))
    return out


def eager_spec(i, mt, cfg, rng, config):
    """A random causal LM's training step or forward with `attn_implementation="eager"`
    (validation/generate_models.py:eager; `config` its file) as a truth case whose `vramscope`
    entry runs `estimate --attn-implementation eager`."""
    batch, seq, mode, amp, pdt, optim, ckpt = random_step(rng)
    seq = within_positions(mt, cfg, seq)
    case = {"name": f"{mt.replace('-', '_')}_eager_b{batch}_s{seq}_{mode}_{amp}"
                    f"{'' if pdt == 'fp32' else '_p' + pdt}_{optim}{'_ckpt' if ckpt else ''}",
            "model": "py:generate_models.py:eager", "batch": batch, "seq": seq, "mode": mode, "amp": amp,
            "param_dtype": pdt, "optim": optim, "model_kwargs": {"config": config},
            "vramscope": {"config": config, "args": ["--attn-implementation", "eager"]}}
    if ckpt:
        case["checkpoint"] = True
        if mt in MOE_FAMILIES:
            # the same step with CUDA initialized first (see truth_case)
            case["model"] = "py:generate_models.py:cuda_initialized"
            case["model_kwargs"]["attn"] = "eager"
    return case


def lora_spec(i, mt, cfg, rng, config):
    """A random causal LM with PEFT-style LoRA adapters (validation/lora_models.py:lora) on random
    targets, rank, dropout and checkpointing as a truth case whose `vramscope` entry runs
    `estimate --lora R --lora-targets ...`."""
    names = LORA_TARGETS.get(mt, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    targets = ",".join(rng.sample(names, rng.randint(1, len(names))))
    r, dropout = rng.choice([4, 8, 16, 64]), rng.choice([0.0, 0.0, 0.1])
    batch, seq = rng.choice([1, 2, 4]), rng.choice([2048, 4096, 8192] if LARGE else [512, 1000, 2048] if MEDIUM else [64, 128, 200, 256])
    seq = within_positions(mt, cfg, seq)
    amp = rng.choice(["fp32", "bf16", "fp16"])
    optim = rng.choice(["adamw", "sgd"])
    ckpt = rng.random() < 0.3 and mt != "mixtral"
    case = {"name": f"{mt.replace('-', '_')}_lora{r}_b{batch}_s{seq}_{amp}_{optim}{'_ckpt' if ckpt else ''}",
            "model": "py:lora_models.py:lora", "batch": batch, "seq": seq, "mode": "train", "amp": amp,
            "param_dtype": "fp32", "optim": optim,
            "model_kwargs": {"config": config, "r": r, "dropout": dropout, "targets": targets},
            "vramscope": {"config": config, "args": ["--lora", str(r), "--lora-targets", targets,
                                                     "--lora-dropout", str(dropout)]}}
    if ckpt:
        case["checkpoint"] = True
    return case


def qlora_spec(i, mt, cfg, rng, config):
    """A random causal LM loaded in 4 bits (NF4, double quantization or not) with QLoRA adapters
    on random targets, or without adapters for inference (validation/qlora_models.py:qlora), as a
    truth case whose `vramscope` entry runs `estimate --qlora R` / `--load-in-4bit`."""
    names = LORA_TARGETS.get(mt, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    batch, seq = rng.choice([1, 2, 4]), rng.choice([2048, 4096, 8192] if LARGE else [512, 1000, 2048] if MEDIUM else [64, 128, 200, 256])
    seq = within_positions(mt, cfg, seq)
    dq = rng.random() < 0.5
    infer = rng.random() < 0.25
    # the 4-bit weights' dtype before quantization (from_pretrained's dtype) and the recipe
    amp, pdt = rng.choice([("fp32", "bf16"), ("fp32", "bf16"), ("bf16", "fp32"), ("fp16", "fp32"),
                           ("fp32", "fp16")])
    kwargs = {"config": config, "double_quant": dq}
    args = ["--double-quant"] if dq else []
    if infer:
        kwargs["lora"] = False
        args = ["--load-in-4bit", *args]
        name = f"{mt.replace('-', '_')}_4bit{'_dq' if dq else ''}_b{batch}_s{seq}_infer_{amp}_p{pdt}"
        case = {"mode": "infer", "optim": "adamw"}
        ckpt = False
    else:
        targets = ",".join(rng.sample(names, rng.randint(1, len(names))))
        r, dropout = rng.choice([4, 8, 16, 64]), rng.choice([0.0, 0.0, 0.1])
        kwargs.update(r=r, dropout=dropout, targets=targets)
        args = ["--qlora", str(r), "--lora-targets", targets, "--lora-dropout", str(dropout), *args]
        optim = rng.choice(["adamw", "sgd"])
        ckpt = rng.random() < 0.3 and mt != "mixtral"
        name = (f"{mt.replace('-', '_')}_qlora{r}{'_dq' if dq else ''}_b{batch}_s{seq}_{amp}_p{pdt}_{optim}"
                f"{'_ckpt' if ckpt else ''}")
        case = {"mode": "train", "optim": optim}
    case = {"name": name, "model": "py:qlora_models.py:qlora", "batch": batch, "seq": seq, **case, "amp": amp,
            "param_dtype": pdt, "model_kwargs": kwargs, "vramscope": {"config": config, "args": args}}
    if ckpt:
        case["checkpoint"] = True
    return case


# substrings of parameter names `--freeze` sweeps draw from (those that name some but not all of
# a model's parameters): modules of every family, layer indices, biases and norms
FREEZE_PATTERNS = ["embed", "wte", "wpe", "embed_positions", "layers.0.", "h.0.", ".1.", "self_attn", "attn.",
                   "mlp", "norm", "ln_", "layer_norm", "q_proj", "k_proj", "v_proj", "o_proj", "out_proj",
                   "qkv_proj", "gate_proj", "up_proj", "gate_up_proj", "down_proj", "fc1", "fc2", "c_attn",
                   "c_proj", "c_fc", "experts", "mlp.gate.", "lm_head", "bias", "input_layernorm"]


_BUILD = threading.Lock()


def parameter_names(config):
    """`named_parameters()` of the causal LM transformers builds from `config` (a file), on the
    meta device (one build at a time: transformers' lazy imports are not thread-safe)."""
    with _BUILD:
        import torch
        import transformers
        cfg = transformers.AutoConfig.from_pretrained(config)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(cfg)
        return [n for n, _ in model.named_parameters()]


def freeze_spec(i, mt, cfg, rng, config):
    """A random causal LM trained with random parameters frozen (validation/lora_models.py:freeze:
    `requires_grad_(False)` on every parameter whose name holds one of 1-3 random patterns) as a
    truth case whose `vramscope` entry runs `estimate --freeze PATTERNS`."""
    names = parameter_names(config)
    pool = [p for p in FREEZE_PATTERNS if any(p in n for n in names)]
    while True:
        chosen = rng.sample(pool, rng.randint(1, 3))
        if not all(any(p in n for p in chosen) for n in names):
            break
    patterns = ",".join(chosen)
    batch, seq = rng.choice([1, 2, 4]), rng.choice([2048, 4096, 8192] if LARGE else [512, 1000, 2048] if MEDIUM else [64, 128, 200, 256])
    seq = within_positions(mt, cfg, seq)
    amp = rng.choice(["fp32", "bf16", "fp16"])
    pdt = "fp32" if amp != "fp32" else rng.choice(["fp32", "fp32", "bf16"])
    optim = rng.choice(["adamw", "sgd", "sgdm"])
    ckpt = rng.random() < 0.3 and mt != "mixtral"
    case = {"name": f"{mt.replace('-', '_')}_freeze_b{batch}_s{seq}_{amp}{'' if pdt == 'fp32' else '_p' + pdt}"
                    f"_{optim}{'_ckpt' if ckpt else ''}",
            "model": "py:lora_models.py:freeze", "batch": batch, "seq": seq, "mode": "train", "amp": amp,
            "param_dtype": pdt, "optim": optim, "model_kwargs": {"config": config, "patterns": patterns},
            "vramscope": {"config": config, "args": ["--freeze", patterns]}}
    if ckpt:
        case["checkpoint"] = True
    return case


def padded_spec(i, mt, cfg, rng, config):
    """A random causal LM's step on a padded batch (validation/padding_models.py:causal_lm, SDPA or
    eager attention) as a truth case whose `vramscope` entry runs `estimate --padded`."""
    batch, seq, mode, amp, pdt, optim, ckpt = random_step(rng)
    batch = max(batch, 2)  # a padding collator pads the shorter sequences of a batch
    seq = within_positions(mt, cfg, seq)
    attn = "eager" if mt == "gemma2" or rng.random() < 0.4 else "sdpa"
    if mt == "mixtral":
        ckpt = False
    case = {"name": f"{mt.replace('-', '_')}_padded_{attn}_b{batch}_s{seq}_{mode}_{amp}"
                    f"{'' if pdt == 'fp32' else '_p' + pdt}_{optim}{'_ckpt' if ckpt else ''}",
            "model": "py:padding_models.py:causal_lm", "batch": batch, "seq": seq, "mode": mode, "amp": amp,
            "param_dtype": pdt, "optim": optim, "model_kwargs": {"config": config, "attn": attn},
            "vramscope": {"config": config, "args": ["--padded", "--attn-implementation", attn]}}
    if ckpt:
        case["checkpoint"] = True
    return case


# the sweeps of random causal LMs: their case maker and whether it builds with SDPA only
SPECS = {"eager": (eager_spec, False), "lora": (lora_spec, True), "qlora": (qlora_spec, True),
         "padded": (padded_spec, False), "freeze": (freeze_spec, True)}
# their flags' help: `--NAME`, "with --truth K: K random causal LMs ... instead"
SPEC_HELP = {
    "eager": "under attn_implementation=eager (validation/generate_models.py:eager)",
    "lora": "with LoRA adapters on random targets (validation/lora_models.py:lora)",
    "qlora": "loaded in 4 bits, with QLoRA adapters on random targets or for inference "
             "(validation/qlora_models.py:qlora)",
    "padded": "on a padded batch, SDPA or eager (validation/padding_models.py:causal_lm)",
    "freeze": "trained with the parameters of 1-3 random name patterns frozen "
              "(validation/lora_models.py:freeze)",
}


def spec_case(spec, i, mt, cfg, rng, tmp):
    """Measures the case `spec` makes for a random config with ../shared/truth and vramscope."""
    path = os.path.join(tmp, f"c{i}.json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    case = spec(i, mt, cfg, rng, path)
    what = f"{i} {case['name']}"
    if "targets" in case["model_kwargs"]:
        what += f" ({case['model_kwargs']['targets']}, dropout {case['model_kwargs']['dropout']})"
    if "patterns" in case["model_kwargs"]:
        what += f" (--freeze {case['model_kwargs']['patterns']})"
    cmd = [sys.executable, MEASURE, "--spec-json", json.dumps({k: v for k, v in case.items() if k != "vramscope"}),
           "--base-dir", HERE, "--json"]
    optim = {"sgdm": "sgd-momentum"}.get(case["optim"], case["optim"])
    amp, pdt = case["amp"], case["param_dtype"]
    precision = precision_flag(amp, pdt)
    args = [path, "-b", str(case["batch"]), "--seq-len", str(case["seq"]), "--mode", case["mode"],
            "--precision", precision, "--optimizer", optim, *case["vramscope"]["args"]]
    if case.get("checkpoint"):
        args.append("--gradient-checkpointing")
    return measured_against(what, cmd, args)


def truth_sweep(seed, k, jobs, tmp, generate=False, heads=False, t5=False, causal=None):
    if causal:
        spec, sdpa_only = SPECS[causal]
        run = lambda c: spec_case(spec, *c)  # noqa: E731
        cases = causal_cases(seed, k, tmp, sdpa_only)
    elif t5:
        run = (lambda c: t5_generate_case(*c)) if generate else (lambda c: t5_case(*c))  # noqa: E731
        cases = t5_cases(seed, k, tmp)
    elif heads:
        run = lambda c: head_case(*c)  # noqa: E731
        cases = head_cases(seed, k, tmp)
    elif generate:
        run = lambda c: generate_case(*c)  # noqa: E731
        cases = generate_cases(seed, k, tmp)
    else:
        run = lambda c: truth_case(*c)  # noqa: E731
        cases = [(*c, tmp) for c in truth_cases(seed, k)]
    worst, bad, refused = 0.0, 0, 0
    with cf.ThreadPoolExecutor(jobs) as ex:
        for what, res in ex.map(run, cases):
            if isinstance(res, str):
                print(f"{what}: {res}")
                if "vramscope refuses it too" in res:
                    refused += 1
                else:
                    bad += 1
                continue
            e1, e2, e3 = res
            worst = max(worst, abs(e1))
            flag = "  <-- over 2%" if abs(e1) > 2 else "  <-- a phase over 3%" if e3 > 3 else ""
            bad += abs(e1) > 2 or e3 > 3
            print(f"{what}: peak {e1:+.2f}%, reserved {e2:+.2f}%, worst phase {e3:.2f}%{flag}")
    print(f"{k} configs measured: worst peak error {worst:.2f}%, {bad} over 2% (a phase over 3%) or failed, "
          f"{refused} refused by transformers and by vramscope")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("seed", nargs="?", type=int, default=0)
    ap.add_argument("n", nargs="?", type=int, default=40)
    ap.add_argument("--truth", type=int, metavar="K", help="measure K configs with ../shared/truth instead")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--only", metavar="I,J", help="with --t5 --write-cases: only these case numbers")
    ap.add_argument("--write-cases", metavar="NAME", help="with --truth K: commit the K configs and "
                    "validation/cases_NAME.jsonl (measured by validation/make_random_fixtures.sh) instead")
    ap.add_argument("--generate", action="store_true",
                    help="with --truth K: K random causal LMs' model.generate() instead")
    ap.add_argument("--heads", action="store_true",
                    help="with --truth K: K random token-classification, question-answering and bare "
                         "models (validation/encoder_head_models.py) instead")
    ap.add_argument("--knobs", action="store_true",
                    help="draw memory-relevant fields the built-in configs leave at their defaults (activations, "
                         "GPT-2's attention scaling, OPT's LayerNorm affine and biases, Mixtral's router logits and "
                         "jitter, rope scaling)")
    ap.add_argument("--dropouts", action="store_true",
                    help="draw every dropout probability (0 or 0.1; classifier dropouts also unset)")
    ap.add_argument("--windows", action="store_true",
                    help="with --generate: Gemma2 too, eager attention in half the cases, a sliding window of "
                         "24 to 80 in most; with --eager, --lora, ...: the window only")
    ap.add_argument("--half", action="store_true",
                    help="pure float16 / bfloat16 models (no autocast) in the training and inference steps")
    ap.add_argument("--moe", action="store_true",
                    help="draw every config from the Mixture-of-Experts families (Mixtral, Qwen2-MoE, Qwen3-MoE)")
    ap.add_argument("--nulls", action="store_true",
                    help="set one optional field to null in a third of the configs")
    ap.add_argument("--medium", action="store_true",
                    help="checkpoint-like widths (512 to 4096) and sequence lengths (512 to 2048)")
    ap.add_argument("--large", action="store_true",
                    help="full-size widths (4096 to 8192), vocabularies (128k to 256k) and sequence lengths "
                         "(2048 to 8192)")
    ap.add_argument("--pad", action="store_true",
                    help="with --generate, --heads or --t5: half the cases with a batch of 2 or more "
                         "on a padded batch (--padded)")
    ap.add_argument("--odd-heads", action="store_true",
                    help="head dims 4 to 100 that are not multiples of 8 (and a head_dim of 264): "
                         "padded flash attention, the math fallback, repeat_kv past 256")
    ap.add_argument("--no-cache", action="store_true",
                    help="with --generate: every generation from a config with use_cache false (no KV "
                         "cache: every step reruns the whole sequence), vramscope with --use-cache false")
    ap.add_argument("--t5", action="store_true",
                    help="with --truth K: K random T5 / mT5 / UMT5 steps (validation/t5_models.py) instead; "
                         "with --generate, their model.generate")
    ap.add_argument("--optimizers", action="store_true",
                    help="with --truth K: training steps under Adam, Adagrad, RMSprop, Adafactor and fused "
                         "Adam / AdamW (validation/measure_more_optimizers.py), parameters in fp32 or bf16")
    for name in SPECS:
        ap.add_argument(f"--{name}", action="store_true",
                        help=f"with --truth K: K random causal LMs {SPEC_HELP[name]} instead")
    a = ap.parse_args()
    causal = next((m for m in SPECS if getattr(a, m)), None)
    global MEDIUM, NULLS, PAD, OPTIMIZERS, LARGE, KNOBS, DROPOUTS
    MEDIUM, NULLS, PAD, OPTIMIZERS, LARGE, KNOBS = a.medium, a.nulls, a.pad, a.optimizers, a.large, a.knobs
    DROPOUTS = a.dropouts
    global WINDOWS, HALF, MOE, NO_CACHE
    WINDOWS, HALF, MOE, NO_CACHE = a.windows, a.half, a.moe, a.no_cache
    global ODD_HEADS
    ODD_HEADS = a.odd_heads
    tmp = tempfile.mkdtemp(prefix="vramscope_random_configs_")
    if a.truth and a.write_cases:
        only = {int(x) for x in a.only.split(",")} if a.only else None
        write_cases(a.seed, a.truth, a.write_cases, causal, a.t5, only)
    elif a.truth:
        truth_sweep(a.seed, a.truth, a.jobs, tmp, a.generate, a.heads, a.t5, causal)
    else:
        parameter_counts(a.seed, a.n, tmp)


if __name__ == "__main__":
    main()
