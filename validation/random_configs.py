#!/usr/bin/env python3
"""Random configs of the supported families (each built-in config with its sizes, head layout,
kv heads, head_dim, biases, tying, experts and head class drawn at random) built by transformers on
the meta device and by vramscope: the parameter counts must be equal. Prints each difference and
the total; configs go to a temporary folder.

    ~/.venvs/truth/bin/python validation/random_configs.py [SEED] [N]
"""
import json
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from hf_reference import build  # noqa: E402

random.seed(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
N = int(sys.argv[2]) if len(sys.argv) > 2 else 40
BIN = os.path.join(HERE, "..", "target", "release", "vramscope")
Z = os.path.join(HERE, "..", "crates", "vramscope-formats", "data", "hf") + "/"
TMP = tempfile.mkdtemp(prefix="vramscope_random_configs_")
bases = {
 "gpt2": "gpt2.json", "opt": "opt-125m.json", "llama": "llama-3.2-1b.json", "mistral": "mistral-7b.json",
 "qwen2": "qwen2.5-0.5b.json", "qwen3": "qwen3-0.6b.json", "phi3": "phi-3-mini.json", "gemma": None,
 "gemma2": "gemma-2-2b.json", "gemma3_text": "gemma-3-1b.json", "mixtral": "mixtral-8x7b.json",
 "bert": "bert-base-uncased.json", "roberta": "roberta-base.json", "distilbert": "distilbert-base-uncased.json",
 "t5": "t5-small.json", "mt5": "mt5-small.json", "umt5": "umt5-small.json", "xlm-roberta": "xlm-roberta-base.json",
}
heads_for = {
 "gpt2": ["GPT2LMHeadModel", "GPT2ForSequenceClassification", "GPT2ForTokenClassification", "GPT2ForQuestionAnswering", "GPT2Model"],
 "opt": ["OPTForCausalLM", "OPTForSequenceClassification", "OPTForQuestionAnswering", "OPTModel"],
 "bert": ["BertForMaskedLM", "BertForSequenceClassification", "BertForTokenClassification", "BertForQuestionAnswering", "BertModel"],
 "roberta": ["RobertaForMaskedLM", "RobertaForSequenceClassification", "RobertaForTokenClassification", "RobertaForQuestionAnswering", "RobertaModel"],
 "xlm-roberta": ["XLMRobertaForMaskedLM", "XLMRobertaForSequenceClassification", "XLMRobertaModel"],
 "distilbert": ["DistilBertForMaskedLM", "DistilBertForSequenceClassification", "DistilBertForQuestionAnswering", "DistilBertModel"],
 "t5": ["T5ForConditionalGeneration", "T5EncoderModel", "T5Model"], "mt5": ["MT5ForConditionalGeneration", "MT5Model"], "umt5": ["UMT5ForConditionalGeneration", "UMT5EncoderModel"],
}
def pre(mt):
    return {"llama":"Llama","mistral":"Mistral","qwen2":"Qwen2","qwen3":"Qwen3","phi3":"Phi3","gemma2":"Gemma2","gemma3_text":"Gemma3","mixtral":"Mixtral"}.get(mt)
fails = 0
for i in range(N):
    mt = random.choice([k for k, v in bases.items() if v])
    cfg = {k: v for k, v in json.load(open(Z + bases[mt])).items() if not k.startswith("_")}
    heads = random.choice([2, 4, 8])
    hd = random.choice([16, 32])
    hidden = heads * hd
    if mt in ("gpt2",):
        cfg.update(n_embd=hidden, n_head=heads, n_layer=random.choice([1, 2, 3]), vocab_size=random.choice([1000, 1003]), n_inner=random.choice([None, 4 * hidden + 8]))
    elif mt == "opt":
        cfg.update(hidden_size=hidden, num_attention_heads=heads, num_hidden_layers=random.choice([1, 2]), ffn_dim=random.choice([128, 200]), word_embed_proj_dim=random.choice([hidden, hidden // 2]), vocab_size=1000, do_layer_norm_before=random.choice([True, False]))
    elif mt in ("bert", "roberta", "distilbert", "xlm-roberta"):
        if mt == "distilbert":
            cfg.update(dim=hidden, n_heads=heads, n_layers=random.choice([1, 2]), hidden_dim=random.choice([128, 200]), vocab_size=1000)
        else:
            cfg.update(hidden_size=hidden, num_attention_heads=heads, num_hidden_layers=random.choice([1, 2]), intermediate_size=random.choice([128, 200]), vocab_size=1000, num_labels=random.choice([2, 5]))
    elif mt in ("t5", "mt5", "umt5"):
        cfg.update(d_model=hidden, num_heads=heads, d_kv=random.choice([16, 24]), d_ff=random.choice([128, 200]), num_layers=random.choice([1, 2]), num_decoder_layers=random.choice([1, 3]), vocab_size=1000)
    else:
        kv = random.choice([k for k in (1, 2, heads) if heads % k == 0])
        cfg.update(hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv, num_hidden_layers=random.choice([1, 2, 3]), intermediate_size=random.choice([128, 200]), vocab_size=random.choice([1000, 1024]), tie_word_embeddings=random.choice([True, False]))
        if random.random() < 0.4:
            cfg["head_dim"] = random.choice([16, 24, 64])
        if mt in ("llama", "qwen2", "qwen3", "mistral", "mixtral") and random.random() < 0.3:
            cfg["attention_bias"] = True
        if mt == "mixtral":
            cfg.update(num_local_experts=random.choice([2, 4]), num_experts_per_tok=2)
        if mt in ("gemma2", "gemma3_text") and "layer_types" in cfg:
            cfg.pop("layer_types")
        if mt == "phi3":
            cfg.pop("rope_scaling", None)
        if random.random() < 0.3:
            cfg["mlp_bias"] = True
    hl = heads_for.get(mt) or [f"{pre(mt)}ForCausalLM", f"{pre(mt)}ForSequenceClassification", f"{pre(mt)}Model"]
    if mt == "gemma3_text":
        hl = ["Gemma3ForCausalLM", "Gemma3ForSequenceClassification", "Gemma3TextModel"]
    cfg["architectures"] = [random.choice(hl)]
    if cfg["architectures"][0].endswith("ForQuestionAnswering"):
        # a start and an end logit: transformers builds other counts but its forward fails on them
        cfg["num_labels"] = 2
    # token ids of the full-size vocabulary would fall outside the drawn one
    for k in ("pad_token_id", "bos_token_id", "eos_token_id"):
        if isinstance(cfg.get(k), int) and cfg[k] >= 1000:
            cfg[k] = None
    path = os.path.join(TMP, f"c{i}.json")
    json.dump(cfg, open(path, "w"))
    try:
        m = build(cfg)
        ref = sum(p.numel() for p in m.parameters())
        names = {n: list(p.shape) for n, p in m.named_parameters()}
    except Exception as e:
        print(f"{i} {mt} {cfg['architectures'][0]}: transformers refuses: {str(e)[:100]}")
        continue
    r = subprocess.run([BIN, "estimate", path, "--seq-len", "32", "-b", "1", "--mode", "infer", "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        print(f"{i} {mt} {cfg['architectures'][0]}: vramscope error: {r.stderr.strip()[:200]}"); fails += 1; continue
    got = json.loads(r.stdout)["model"]["parameters"]
    if got != ref:
        print(f"{i} {mt} {cfg['architectures'][0]}: params {got} vs transformers {ref}"); fails += 1
print(f"{N} configs, {fails} mismatches/errors")
