#!/usr/bin/env bash
# Measures small training steps with ../shared/truth's --trace and keeps, per case and phase, every
# allocation and free in order, each free with the allocation it releases (its index among the
# phase's events, -1 for one made in an earlier phase): fixtures/truth/events/free_order.jsonl.
# Two traces with the same sizes in the same order can still free different tensors of one size,
# which moves the caching allocator's later choices (validation/free_order.py); the CLI test
# checks which tensor each free releases:
# - GPT-2 (2 layers, float32, batch 2 x 256): `arange(S) + past` made before the sum and freed
#   after it; a block's `attn_output` freed before `feed_forward_hidden_states` when the block
#   returns; gelu_new's `MulBackward0` releasing `other` before `self`; `PowBackward0`'s two
#   temporaries freed last first.
# - GPT-2 medium (2 layers) with eager attention (validation/cases_eager.jsonl's gpt2_2l_b2_s256_fp32_adamw_eager,
#   forward): the mask's `where(mask, tensor(0.0), min)` frees its 0-d `scalar_tensor` inside the
#   call, then the `0.0`, then the boolean mask when `mask` is rebound; the output projection's
#   result (the dropout's argument) goes before the attention's locals.
# - Qwen2-small (2 layers, sequence classification, AMP bf16, batch 4 x 512): rotary's
#   `(q * cos) + (rotate_half(q) * sin)` frees its left operand first; the normed input of a
#   layer goes after the attention's locals (`query_states`), when the layer rebinds it. Its
#   model phase: the rotary module, made after the norm, computes `inv_freq` step by step around
#   its two buffers, and `post_init()` once more (the default rope).
# - Llama 3.2 (2 layers, float32, batch 1 x 32), the model phase: Llama 3's rope smoothing, step
#   by step; Gemma-3-1B (2 layers, the same), its rotary module's two frequency sets.
# - Qwen2-small with eager attention (cases_eager.jsonl's qwen2_2l_b2_s256_fp32_adamw_eager,
#   forward and backward): the model's forward frees its mask before `position_ids`, which its
#   `mask_kwargs` dict (a local bound after `causal_mask_mapping`) keeps; in backward, with fewer
#   KV heads than heads, q's, k's and v's gradients come back heads-first and their projection's
#   `ViewBackward0` copies them. Gemma-2B (2 layers, one KV head, AMP bf16, 2 x 640, eager
#   attention; cases_eager_gemma.jsonl's), its backward: the same copies.
# - With gradient checkpointing (a last column `ckpt`), in backward: a Linear's or a Conv1D's
#   `AddmmBackward0` frees its recomputed input when its `apply` returns, before the engine sums
#   the output's gradient into the bias's (GPT-2, 2 layers; DistilBERT, 2 layers, masked LM,
#   whose model phase also shows `position_ids` registered after the embeddings' children).
# - The model phase of a tied masked-LM head (CamemBERT, and XLM-RoBERTa, whose head is built
#   before the encoder), 2 layers: `__init__` makes the decoder's weight and bias, then the head's
#   zeros; `post_init()` frees the weight, pads the decoder's bias into a copy, frees the bias,
#   frees the copy (the decoder takes the head's bias), then pads the head's bias into the tensor
#   that stays and frees the zeros.
# - The model phase of Qwen2-small (2 layers) held in bfloat16: the rotary module's
#   `inv_freq` buffers stay float32 (`arange(...).float()`), as transformers makes them.
# - The per-token heads' base models fill a cache while training (validation/cases_decoder_heads.jsonl),
#   their backward: flash / cuDNN attention's gradients of the cached k and v (the cache's
#   concatenations) come back heads-first and the projections' `ViewBackward0` copies them, and
#   q's and k's after rotary (Qwen2-small token classification under AMP bf16, Llama 3.2 question
#   answering in float32 with mem-efficient attention, whose v gradient is not copied, and token
#   classification in pure bf16; GPT-2 token classification and OPT question answering, no rotary).
# - The MoE routers' renormalisation `w /= w.sum(-1, keepdim=True)` in backward (Mixtral under AMP
#   bf16, Qwen3-MoE in float32): DivBackward0 makes the divisor's gradient as [T, k] float32
#   pieces, frees the pieces, makes w's gradient, and the engine sums the divisor's to [T, 1].
# - Eager attention's gradient copies (backward): OPT at batch 2 under AMP bf16 copies k's
#   gradient at k_proj's `UnsafeViewBackward0`, after v_proj's backward; a Llama with as many KV
#   heads as heads (a padded batch of 2, AMP bf16) copies q's, k's and v's at their views.
# - LoRA on Gemma3 (float32, batch 2 x 128), backward: the first layer's mem-efficient kernel
#   makes k's and v's gradients though neither needs one, dropped as the node returns; the
#   frozen norms' `1 + weight` product makes no full-size weight gradient.
# - Gemma3 with gradient checkpointing (AMP bf16), backward: GemmaRMSNorm's `1 + weight` product
#   makes the weight's full-size gradient first, and validate_outputs sums it down after the
#   recomputed tensors the node unpacked are gone. Gemma-3-4B-it's model phase: linear rope
#   scaling on the full-attention frequencies, computed from an int64 arange.
# A config with a `/` is a path (less `.json`) instead of a name in fixtures/hf/configs.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-$HOME/.venvs/truth}
mkdir -p .truth/raw
out=fixtures/truth/events/free_order.jsonl
: > "$out"
# config, task, amp (fp32 / bf16, or pbf16: the model in bfloat16), optimizer, batch, sequence length, phases (comma-separated), and
# a case to measure instead of the hf: config, as LIST:NAME for the case NAME of
# validation/cases_LIST.jsonl (eager attention, a per-token head; vramscope then adds the flags
# of the case's `vramscope` entry), or -; then optionally `ckpt` (gradient checkpointing)
while read -r cfg task amp optim batch seq phases eager_case ckpt; do
  if [ "$eager_case" = - ]; then
    trace=".truth/raw/$cfg.$task.$amp.b$batch.s$seq${ckpt:+.$ckpt}.free_order.trace"
    measure=(--model "hf:fixtures/hf/configs/$cfg.json" --task "$task" --batch "$batch" --seq "$seq"
             --amp "$amp" --optim "$optim")
    # pbf16: the model held in bfloat16, no autocast
    if [ "$amp" = pbf16 ]; then measure=("${measure[@]/pbf16/fp32}" --param-dtype bf16); fi
    if [ "$ckpt" = ckpt ]; then measure+=(--checkpoint); fi
  else
    trace=".truth/raw/${eager_case#*:}.free_order.trace"
    measure=(--spec "validation/cases_${eager_case%%:*}.jsonl" --name "${eager_case#*:}"
             --base-dir validation)
  fi
  if [ ! -s "$trace" ]; then
    "$VENV/bin/python" ../shared/truth/measure.py "${measure[@]}" --trace "$trace" --json \
        > "$trace.json"
  fi
  python3 - "$cfg" "$task" "$amp" "$optim" "$batch" "$seq" "$phases" "$trace" "$eager_case" "${ckpt:-}" >> "$out" <<'PY'
import json, sys
cfg, task, amp, optim, batch, seq, phases, trace, eager_case, ckpt = sys.argv[1:11]
precision = {"fp32": "fp32", "bf16": "amp-bf16", "fp16": "amp-fp16", "pbf16": "bf16"}[amp]
optimizer = {"sgdm": "sgd-momentum"}.get(optim, optim)
by_phase, phase, index = {}, None, {}
for line in open(trace):
    e = json.loads(line)
    if e["ev"] == "phase":
        phase = e["phase"]
        index = {}
    elif e["ev"] in ("alloc", "free") and e["bytes"] > 0:
        events = by_phase.setdefault(phase, [])
        if e["ev"] == "alloc":
            index[e["sid"]] = len(events)
            events.append(["alloc", e["bytes"]])
        else:
            events.append(["free", e["bytes"], index.pop(e["sid"], -1)])
args = ["--task", task, "--batch-size", batch, "--seq-len", seq, "--precision", precision,
        "--optimizer", optimizer]
if eager_case != "-":
    # the flags the case list's `vramscope` entry gives (`--attn-implementation eager`, ...)
    name = eager_case.split(":", 1)[1]
    listed = (json.loads(line) for line in open(f"validation/cases_{eager_case.split(':', 1)[0]}.jsonl"))
    args += next(c for c in listed if c["name"] == name)["vramscope"]["args"]
if ckpt == "ckpt":
    args.append("--gradient-checkpointing")
for want in phases.split(","):
    config = f"{cfg}.json" if "/" in cfg else f"fixtures/hf/configs/{cfg}.json"
    case = {"config": config, "args": args, "phase": want,
            "events": by_phase[want]}
    print(json.dumps(case, separators=(",", ":")))
PY
done <<'CASES'
gpt2_2l causal-lm fp32 sgd 2 256 it1.forward,it1.backward,it2.forward,it2.backward -
gpt2_medium_2l causal-lm fp32 adamw 2 256 it1.forward eager:gpt2_2l_b2_s256_fp32_adamw_eager
qwen2_small_2l seq-cls bf16 adamw 4 512 model,it1.forward,it2.forward -
llama32_1b_2l causal-lm fp32 sgd 1 32 model -
gemma3_1b_2l causal-lm fp32 sgd 1 32 model -
qwen2_small_2l causal-lm fp32 adamw 2 256 it1.forward,it1.backward eager:qwen2_2l_b2_s256_fp32_adamw_eager
gemma_2b_2l causal-lm bf16 adamw 2 640 it1.backward eager_gemma:gemma_2l_b2_s640_ampbf16_adamw_eager
gpt2_2l causal-lm fp32 sgd 2 256 it1.backward - ckpt
distilbert_base_2l_untied masked-lm fp32 sgdm 4 128 model,it1.backward - ckpt
camembert_base_2l masked-lm fp32 sgd 1 32 model -
xlm_roberta_base_2l masked-lm fp32 sgd 1 32 model -
qwen2_small_2l causal-lm pbf16 adamw 2 256 model -
qwen2_small_2l token-cls bf16 adamw 8 512 it1.backward decoder_heads:qwen2_small_2l_tokcls_b8_s512_bf16_adamw
llama32_1b_2l qa fp32 sgdm 4 512 it1.backward decoder_heads:llama32_1b_2l_qa_b4_s512_fp32_sgdm
llama32_1b_2l token-cls pbf16 sgd 4 512 it1.backward decoder_heads:llama32_1b_2l_tokcls_b4_s512_pbf16_sgd
gpt2_2l token-cls bf16 adamw 8 512 it1.backward decoder_heads:gpt2_2l_tokcls_b8_s512_bf16_adamw
opt_125m_2l qa bf16 adamw 8 512 it1.backward decoder_heads:opt_125m_2l_qa_b8_s512_bf16_adamw
mixtral_small_2l causal-lm bf16 adamw 2 256 it1.backward -
qwen3_moe_small_2l causal-lm fp32 sgd 2 256 it1.backward -
opt_125m_2l causal-lm bf16 adamw 2 512 it1.backward eager_families:opt_2l_b2_s512_ampbf16_adamw_eager
fixtures/hf/random/s1902_14_llama causal-lm bf16 sgd 2 64 it1.backward random_padded:s1902_14_llama_padded_eager_b2_s64_train_bf16_sgd
fixtures/hf/random/s1726_2_gemma3_text causal-lm fp32 sgd 2 128 it1.backward random_lora:s1726_2_gemma3_text_lora16_b2_s128_fp32_sgd
gemma3_1b_2l causal-lm bf16 sgd 2 256 it1.backward - ckpt
gemma3_4b_it_6l causal-lm bf16 adamw 2 512 model gemma3_multimodal:gemma3_4b_it_6l_b2_s512_ampbf16_adamw
CASES
wc -c "$out"
