#!/usr/bin/env python3
"""Every field a supported config class declares `| None`, set to null in a small config of the
class, run by transformers (a training forward and backward, an eval forward and, for the decoders,
`generate`, on CPU: tiny models, real tensors) and by `vramscope estimate` (`--mode train`,
`--mode infer`, `--mode generate`): prints each
field where the two disagree, that is where transformers fails and vramscope estimates, or the
other way round. Fields the class types without None are the types table's
(`validation/config_type_cases.py`); this finds the Optional ones that fail later, in the model.

    cargo build --release
    ~/.venvs/truth/bin/python validation/null_fields.py [--only MODEL_TYPE,...] [--write]
    ~/.venvs/truth/bin/python validation/null_fields.py --head seq-cls   # or token-cls, qa

`--bools` sets each `bool` field the class declares (not the base class's) to the opposite of its
default instead of a `| None` field to null.

`--head` runs each family's `{X}ForSequenceClassification` / `ForTokenClassification` /
`ForQuestionAnswering` instead of its language-model head (the families vramscope builds that
head for; train and infer), with vramscope's `--task`. A sequence classifier without a pad token
at batch 2, which transformers refuses, agrees when vramscope notes it on stderr (it estimates
the step as with one set).

`--write` also writes transformers' verdicts to fixtures/hf/null_field_cases.json (each small
config, its null field, the mode and whether transformers runs it), which the test
`null_fields_are_read_as_transformers_runs_them` (crates/vramscope-formats/tests/hf_config.rs)
holds vramscope's builds to without transformers.
"""
import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import typing
import warnings

import torch
import transformers

warnings.filterwarnings("ignore")
transformers.logging.set_verbosity_error()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hf_config_defaults import MODEL_TYPES, rust_type  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "fixtures", "hf", "null_field_cases.json")
BIN = os.environ.get("VRAMSCOPE_BIN", os.path.join(ROOT, "target", "release", "vramscope"))
DECODER = dict(vocab_size=100, hidden_size=64, intermediate_size=128, num_attention_heads=4,
               num_key_value_heads=2, head_dim=16, num_hidden_layers=2, max_position_embeddings=128,
               pad_token_id=0)
SMALL = {
    "gpt2": dict(vocab_size=100, n_embd=64, n_head=4, n_layer=2, n_positions=128, pad_token_id=0),
    "opt": dict(vocab_size=100, hidden_size=64, ffn_dim=128, num_attention_heads=4, num_hidden_layers=2,
                word_embed_proj_dim=64, max_position_embeddings=128, pad_token_id=1),
    "mixtral": dict(DECODER, num_local_experts=2, num_experts_per_tok=1),
    "qwen2_moe": dict(DECODER, num_experts=2, num_experts_per_tok=1, moe_intermediate_size=32,
                      shared_expert_intermediate_size=32),
    "qwen3_moe": dict(DECODER, num_experts=2, num_experts_per_tok=1, moe_intermediate_size=32),
    "distilbert": dict(vocab_size=100, dim=64, hidden_dim=128, n_heads=4, n_layers=2, max_position_embeddings=128,
                       pad_token_id=0),
    "t5": dict(vocab_size=100, d_model=64, d_kv=16, d_ff=128, num_heads=4, num_layers=2, decoder_start_token_id=0),
}
ENCODER = dict(vocab_size=100, hidden_size=64, intermediate_size=128, num_attention_heads=4, num_hidden_layers=2,
               max_position_embeddings=130, pad_token_id=1)
for mt in ("bert", "roberta", "xlm-roberta", "camembert"):
    SMALL[mt] = ENCODER
for mt in ("mt5", "umt5"):
    SMALL[mt] = SMALL["t5"]
HEAD = {"gpt2": "GPT2LMHeadModel", "opt": "OPTForCausalLM", "bert": "BertForMaskedLM",
        "roberta": "RobertaForMaskedLM", "xlm-roberta": "XLMRobertaForMaskedLM",
        "camembert": "CamembertForMaskedLM", "distilbert": "DistilBertForMaskedLM",
        "t5": "T5ForConditionalGeneration", "mt5": "MT5ForConditionalGeneration",
        "umt5": "UMT5ForConditionalGeneration", "llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM",
        "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "phi3": "Phi3ForCausalLM",
        "gemma": "GemmaForCausalLM", "gemma2": "Gemma2ForCausalLM", "gemma3_text": "Gemma3ForCausalLM",
        "mixtral": "MixtralForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM"}
# fields of the base class every family shares, which no model reads
SKIP = {"transformers_version", "architectures", "output_hidden_states", "return_dict", "dtype",
        "id2label", "label2id", "problem_type", "chunk_size_feed_forward", "is_encoder_decoder",
        "tokenizer_class", "prefix", "bos_token_id", "eos_token_id", "sep_token_id",
        "decoder_start_token_id", "task_specific_params", "finetuning_task"}


def optional_fields(cls):
    return [f.name for f in dataclasses.fields(cls)
            if f.name not in SKIP and "Null" in rust_type(f.type) and rust_type(f.type) != "Any"]


def bool_fields(cls):
    """`(field, the opposite of its default)` for each field the class declares `bool`."""
    return [(f.name, not f.default) for f in dataclasses.fields(cls)
            if f.name not in SKIP and rust_type(f.type) == "Bool" and isinstance(f.default, bool)]


MODES = ("train", "infer", "generate")
HEAD_CLASSES = {"seq-cls": "ForSequenceClassification", "token-cls": "ForTokenClassification",
                "qa": "ForQuestionAnswering"}


def head_class(mt, head):
    """The class of `head` for model type `mt` (its language-model head's prefix), if any."""
    if head is None:
        return HEAD[mt]
    prefix = HEAD[mt].split("For")[0].removesuffix("LMHeadModel")
    name = prefix + HEAD_CLASSES[head]
    return name if hasattr(transformers, name) else None


def transformers_runs(mt, cfg_dict, mode, head=None):
    cls = getattr(transformers, head_class(mt, head))
    try:
        cfg = transformers.CONFIG_MAPPING[mt].from_dict(dict(cfg_dict))
        attn = "eager" if mt == "gemma2" else "sdpa"
        model = cls._from_config(cfg, attn_implementation=attn)
        train = mode == "train"
        model.train(train)
        ids = torch.randint(2, 100, (2, 8))
        if mode == "generate":
            with torch.no_grad():
                model.generate(ids, max_new_tokens=2, do_sample=False)
            return None
        kwargs = {"input_ids": ids}
        if head == "seq-cls" and train:
            kwargs["labels"] = torch.zeros(2, dtype=torch.long)
        elif head == "token-cls" and train:
            kwargs["labels"] = ids % 2
        elif head == "qa":
            # the forward computes the loss from the positions, as a Trainer runs it
            kwargs["start_positions"] = kwargs["end_positions"] = torch.zeros(2, dtype=torch.long)
        elif head is None and (train or mt in ("t5", "mt5", "umt5")):
            # vramscope's T5 steps take labels in eval too (the loss of an evaluation step)
            kwargs["labels"] = ids
        out = model(**kwargs)
        if train:
            out.loss.backward()
        return None
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"


def vramscope_runs(path, mode, head=None):
    shape = ["--prompt-len", "8", "--new-tokens", "2"] if mode == "generate" else ["--seq-len", "8"]
    task = ["--task", head] if head else []
    r = subprocess.run([BIN, "estimate", path, *shape, *task, "-b", "2", "--mode", mode, "--json"],
                       capture_output=True, text=True)
    if r.returncode == 0:
        # a sequence classifier without a pad token at batch 2 is estimated as with one, noted
        return "noted" if "no pad_token_id" in r.stderr else None
    return (r.stderr.strip().splitlines() or ["?"])[-1][:160]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--only")
    ap.add_argument("--write", action="store_true", help=f"write transformers' verdicts to {OUT}")
    ap.add_argument("--head", choices=sorted(HEAD_CLASSES))
    ap.add_argument("--bools", action="store_true", help="flip each bool field instead of nulls")
    a = ap.parse_args()
    if a.write and (a.head or a.bools):
        sys.exit("--write records the null fields of the language-model heads only")
    cases = []
    types = a.only.split(",") if a.only else MODEL_TYPES
    checked, wrong = 0, 0
    with tempfile.TemporaryDirectory(prefix="vramscope_null_fields_") as tmp:
        for mt in types:
            cls = head_class(mt, a.head)
            if cls is None:
                continue
            base = dict(SMALL.get(mt, DECODER), model_type=mt, architectures=[cls])
            if a.head:
                path = os.path.join(tmp, f"{mt}.json")
                with open(path, "w") as f:
                    json.dump(base, f)
                if vramscope_runs(path, "train", a.head) is not None:
                    continue  # a head vramscope does not build for this family
            config_class = transformers.CONFIG_MAPPING[mt]
            values = (bool_fields(config_class) if a.bools
                      else [(f, None) for f in optional_fields(config_class)])
            for field, value in values:
                cfg = dict(base, **{field: value})
                path = os.path.join(tmp, f"{mt}_{field}.json")
                with open(path, "w") as f:
                    json.dump(cfg, f)
                # generation: the decoders (vramscope's T5 generate is checked by its fixtures)
                modes = MODES if cls.endswith(("ForCausalLM", "LMHeadModel")) else MODES[:2]
                for mode in modes:
                    theirs = transformers_runs(mt, cfg, mode, a.head)
                    ours = vramscope_runs(path, mode, a.head)
                    if ours == "noted":
                        # what transformers refuses ("Cannot handle batch sizes > 1 ...") is said
                        ours = None if theirs is None else "noted"
                    cases.append({"config": cfg, "field": field, "mode": mode, "transformers_runs": theirs is None})
                    checked += 1
                    if (theirs is None) != (ours is None):
                        wrong += 1
                        print(f"{mt}.{field} = {json.dumps(value)}, {mode}: transformers "
                              f"{'runs' if theirs is None else 'fails (' + theirs + ')'}, vramscope "
                              f"{'estimates' if ours is None else 'refuses (' + ours + ')'}")
    print(f"{checked} runs compared: {wrong} disagree")
    if a.write:
        with open(OUT, "w") as f:
            f.write(f'{{"transformers_version": {json.dumps(transformers.__version__)}, "cases": [\n')
            f.write(",\n".join(json.dumps(c, separators=(",", ":")) for c in cases))
            f.write("\n]}\n")
        print(f"{OUT}: {len(cases)} cases")


if __name__ == "__main__":
    main()
