//! Bad input gets a clear error naming what was wrong, a non-zero exit code, and never a panic.

use crate::vramscope;

fn fails_with(args: &[&str], needles: &[&str]) {
    let out = vramscope(args);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{args:?} should fail");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{args:?}: a clean error exit, not a panic: {err}"
    );
    assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    assert!(out.stdout.is_empty(), "{args:?} printed a half report");
    for n in needles {
        assert!(err.contains(n), "{args:?}: expected {n:?} in: {err}");
    }
}

/// Runs `vramscope ARGS...` and asserts that it succeeds, showing its stderr otherwise (the
/// other side of [`fails_with`], for the inputs next to a refused one that must still run).
fn succeeds(args: &[&str]) {
    let out = vramscope(args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A name that is neither a file nor a built-in model says so before any flag is judged, with
/// the closest built-in name (also for a Hub id) and what to do; built-in names ignore case.
#[test]
fn unknown_model() {
    fails_with(
        &["estimate", "resnet5"],
        &[
            "resnet5: no such file or folder, and not a built-in model",
            "did you mean `resnet50`",
            "vramscope models",
        ],
    );
    // a transformer name with --seq-len: the name's error, not the flag's
    fails_with(
        &["estimate", "llama-3-9b", "--seq-len", "64"],
        &["llama-3-9b: no such file", "did you mean `llama-3-8b`"],
    );
    fails_with(
        &["estimate", "meta-llama/Meta-Llama-3-8B", "--seq-len", "64"],
        &[
            "did you mean `llama-3-8b`",
            "reads no network",
            "hf download meta-llama/Meta-Llama-3-8B config.json",
        ],
    );
    fails_with(
        &["estimate", "no/such/config.json", "--seq-len", "64"],
        &["no/such/config.json: no such file or folder"],
    );
    let dir = crate::scratch("folder-without-config");
    fails_with(
        &["estimate", dir.to_str().unwrap(), "--seq-len", "64"],
        &["a folder without a config.json", "vramscope inspect"],
    );
    let not_a_model = dir.join("weights.bin");
    std::fs::write(&not_a_model, "x").unwrap();
    fails_with(
        &["estimate", not_a_model.to_str().unwrap()],
        &["weights.bin: not a model file"],
    );
    std::fs::remove_dir_all(&dir).ok();
    // the built-in names, as typed on a model card
    let typed = crate::estimate_json(&["Llama-3-8B", "--seq-len", "64", "-b", "1"]);
    let exact = crate::estimate_json(&["llama-3-8b", "--seq-len", "64", "-b", "1"]);
    assert_eq!(typed, exact);
    assert_eq!(typed["model"]["name"], "llama-3-8b");
    let typed = crate::estimate_json(&["ResNet50", "-b", "2"]);
    assert_eq!(typed["model"]["name"], "resnet50");
}

#[test]
fn bad_precision_optimizer_mode_gpu() {
    fails_with(
        &["estimate", "resnet18", "--precision", "fp8"],
        &["--precision", "fp8", "amp-bf16"],
    );
    fails_with(
        &["estimate", "resnet18", "--optimizer", "lion"],
        &["--optimizer", "lion", "adamw"],
    );
    fails_with(
        &["estimate", "resnet18", "--mode", "serve"],
        &["--mode", "train, infer or generate"],
    );
    fails_with(
        &["estimate", "resnet18", "--gpu", "voodoo5"],
        &["--gpu", "voodoo5", "h100"],
    );
}

#[test]
fn bad_input_shape() {
    fails_with(
        &["estimate", "resnet18", "--input", "3x224"],
        &["--input", "CxHxW"],
    );
    fails_with(
        &["estimate", "resnet18", "--input", "axbxc"],
        &["--input", "CxHxW"],
    );
    fails_with(
        &["estimate", "resnet18", "--batch-size", "0"],
        &["positive"],
    );
}

#[test]
fn absurd_sizes_are_refused_not_wrapped() {
    fails_with(
        &[
            "estimate",
            "resnet50",
            "--batch-size",
            "4611686018427387904",
        ],
        &["more than 2^45 elements", "batch size"],
    );
    fails_with(
        &["estimate", "resnet50", "--input", "3x99999999x99999999"],
        &["more than 2^45 elements"],
    );
}

/// A config whose dimensions are each below 2^32 but whose weights are not is refused at the
/// first too-large parameter, naming it, rather than counted with sums that wrap.
#[test]
fn absurd_config_dimensions_are_refused_not_wrapped() {
    let dir = crate::scratch("huge-config");
    let cfg = config_file(
        &dir,
        "huge.json",
        r#"{"model_type": "llama", "hidden_size": 1000000000, "num_hidden_layers": 2}"#,
    );
    fails_with(
        &["estimate", &cfg, "--seq-len", "8"],
        &[
            "huge.json",
            "model.layers.0.self_attn.q_proj",
            "`weight`",
            "more than 2^45 elements",
            "dimensions",
        ],
    );
}

/// `--trace` writes its file whole or not at all: a missing folder is named with the path given
/// and leaves nothing behind, and the temporary file never takes a name a user's file could have.
#[test]
fn trace_files_are_written_whole_or_not_at_all() {
    let scratch = crate::scratch("trace-files");
    let dir = &scratch;
    let missing = dir.as_path().join("no/such/folder/events.jsonl");
    fails_with(
        &[
            "estimate",
            "gpt2",
            "--seq-len",
            "8",
            "--trace",
            missing.to_str().unwrap(),
        ],
        &["writing trace", missing.to_str().unwrap(), "No such file"],
    );
    fails_with(
        &[
            "estimate",
            "gpt2",
            "--seq-len",
            "8",
            "--trace",
            dir.as_path().to_str().unwrap(),
        ],
        &["writing trace", "a directory"],
    );
    // a user's `events.tmp` beside the trace is left as it was
    let mine = dir.as_path().join("events.tmp");
    std::fs::write(&mine, "mine").unwrap();
    let trace = dir.as_path().join("events.jsonl");
    succeeds(&[
        "estimate",
        "gpt2",
        "--seq-len",
        "8",
        "--trace",
        trace.to_str().unwrap(),
    ]);
    assert_eq!(std::fs::read_to_string(&mine).unwrap(), "mine");
    let names: Vec<String> = std::fs::read_dir(dir.as_path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names.len(),
        2,
        "only the trace and the user's file: {names:?}"
    );
    assert!(std::fs::read_to_string(&trace).unwrap().lines().count() > 100);
}

#[test]
fn image_too_small_names_the_module() {
    fails_with(
        &["estimate", "vgg16", "--input", "3x16x16"],
        &["vgg16", "features.", "too small"],
    );
}

#[test]
fn checkpoint_of_a_missing_module() {
    fails_with(
        &["estimate", "resnet18", "--checkpoint", "layer9"],
        &["--checkpoint layer9", "layer1"],
    );
    fails_with(
        &["estimate", "resnet18", "--checkpoint", "layer1:x"],
        &["segment count"],
    );
}

#[test]
fn bad_flag_is_a_usage_error() {
    let out = vramscope(&["estimate", "resnet18", "--frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--frobnicate"));
}

/// Writes `text` to `dir/name` (a config for one case) and returns the path as an argument.
fn config_file(dir: &std::path::Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_string_lossy().to_string()
}

/// Every built-in transformer config builds now; a config of a family the front-end does not
/// build (or one that only looks like a supported family), Gemma3's vision-language model with
/// another vision tower or class, and a class whose head is not built get clear errors naming the
/// file and the way out.
#[test]
fn unsupported_transformer_configs() {
    let dir = crate::scratch("unsupported");
    let mamba = config_file(
        &dir,
        "mamba.json",
        r#"{"model_type": "mamba", "architectures": ["MambaForCausalLM"]}"#,
    );
    fails_with(
        &["estimate", &mamba, "--seq-len", "512"],
        &[
            "mamba.json",
            "mamba",
            "not supported",
            "supported model types",
        ],
    );
    // said before --seq-len is asked for: no sequence length makes that model build
    fails_with(
        &["estimate", &mamba],
        &["mamba.json", "not supported", "supported model types"],
    );
    // Gemma3's vision-language model builds with a SigLIP tower; another tower does not
    let vlm = config_file(
        &dir,
        "gemma3.json",
        r#"{"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
            "text_config": {"hidden_size": 2560, "num_hidden_layers": 34},
            "vision_config": {"model_type": "clip_vision_model"}}"#,
    );
    fails_with(
        &["estimate", &vlm, "--seq-len", "512"],
        &[
            "gemma3.json",
            "vision_config.model_type",
            "siglip_vision_model",
        ],
    );
    let vlm_other = config_file(
        &dir,
        "gemma3_other.json",
        r#"{"model_type": "gemma3", "architectures": ["Gemma3ForImageTextToText"],
            "text_config": {"hidden_size": 2560, "num_hidden_layers": 34}}"#,
    );
    fails_with(
        &["estimate", &vlm_other, "--seq-len", "512"],
        &[
            "gemma3_other.json",
            "Gemma3ForConditionalGeneration",
            "Gemma3ForCausalLM",
        ],
    );
    // a look-alike of a supported family is not built as that family
    let llama4 = config_file(
        &dir,
        "llama4.json",
        r#"{"model_type": "llama4_text", "architectures": ["Llama4ForCausalLM"],
            "hidden_size": 64, "num_hidden_layers": 1, "num_attention_heads": 4,
            "intermediate_size": 128, "vocab_size": 100}"#,
    );
    fails_with(
        &["estimate", &llama4, "--seq-len", "64"],
        &["llama4.json", "\"llama4_text\"", "not supported"],
    );
    // a bare encoder (sentence-embedding checkpoints) runs in inference; training it is refused
    let bare = config_file(
        &dir,
        "minilm.json",
        r#"{"model_type": "bert", "architectures": ["BertModel"], "hidden_size": 384,
            "num_hidden_layers": 6, "num_attention_heads": 12, "intermediate_size": 1536,
            "vocab_size": 30522, "max_position_embeddings": 512}"#,
    );
    fails_with(
        &["estimate", &bare, "--seq-len", "128"],
        &[
            "minilm.json",
            "BertModel",
            "no loss",
            "--mode infer",
            "--task",
        ],
    );
    for extra in [&["--mode", "infer"][..], &["--task", "token-cls"][..]] {
        let mut argv = vec!["estimate", &bare, "--seq-len", "128"];
        argv.extend(extra);
        succeeds(&argv);
    }
    // GPT-2's bare model runs in inference and is refused for training; its double-heads
    // class is not built: the refusal names the heads that are
    let gpt2 = config_file(
        &dir,
        "gpt2_model.json",
        r#"{"model_type": "gpt2", "architectures": ["GPT2Model"], "n_embd": 64, "n_layer": 1,
            "n_head": 4, "vocab_size": 100, "n_positions": 128}"#,
    );
    succeeds(&["estimate", &gpt2, "--seq-len", "64", "--mode", "infer"]);
    fails_with(
        &["estimate", &gpt2, "--seq-len", "64"],
        &[
            "gpt2_model.json",
            "GPT2Model",
            "has no loss",
            "--mode infer",
        ],
    );
    let double_heads = config_file(
        &dir,
        "gpt2_double_heads.json",
        r#"{"model_type": "gpt2", "architectures": ["GPT2DoubleHeadsModel"], "n_embd": 64,
            "n_layer": 1, "n_head": 4, "vocab_size": 100, "n_positions": 128}"#,
    );
    fails_with(
        &[
            "estimate",
            &double_heads,
            "--seq-len",
            "64",
            "--mode",
            "infer",
        ],
        &[
            "gpt2_double_heads.json",
            "GPT2DoubleHeadsModel",
            "--task causal-lm",
            "--task feature-extraction",
        ],
    );
    std::fs::remove_dir_all(&dir).ok();
    // with a length the model takes (GPT-2 has 1024 positions)
    fails_with(
        &["estimate", "gpt2"],
        &[
            "gpt2",
            "needs --seq-len",
            "--seq-len 1024",
            "1024 positions",
        ],
    );
}

#[test]
fn bad_lora_and_freeze_flags() {
    let cfg = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/hf/configs/qwen2_small_2l.json"
    );
    fails_with(
        &[
            "estimate",
            cfg,
            "--seq-len",
            "64",
            "--lora",
            "8",
            "--lora-targets",
            "c_attn",
        ],
        &["--lora-targets c_attn", "q_proj", "down_proj"],
    );
    fails_with(
        &["estimate", cfg, "--seq-len", "64", "--lora", "0"],
        &["--lora", "positive"],
    );
    fails_with(
        &["estimate", cfg, "--seq-len", "64", "--qlora", "0"],
        &["--qlora:", "positive"],
    );
    // the default targets (no --lora-targets) matching nothing: said as such, with the names
    fails_with(
        &["estimate", "resnet50", "--lora", "8"],
        &[
            "default targets",
            "`resnet50`",
            "q_proj,v_proj",
            "--lora-targets",
            "fc",
        ],
    );
    fails_with(
        &["estimate", cfg, "--seq-len", "64", "--freeze", "encoder"],
        &["--freeze encoder", "model.embed_tokens.weight"],
    );
    // the examples are parameters, not buffers such as the rotary embedding's inv_freq
    let out = vramscope(&["estimate", cfg, "--seq-len", "64", "--freeze", "encoder"]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("inv_freq"));
    fails_with(
        &[
            "estimate",
            cfg,
            "--seq-len",
            "64",
            "--lora-targets",
            "q_proj",
        ],
        &["--lora-targets needs --lora"],
    );
    fails_with(
        &["estimate", cfg, "--seq-len", "64", "--lora-dropout", "0.1"],
        &["--lora-dropout need --lora"],
    );
}

/// A config that names neither `model_type` nor `architectures` (an old one, whose family
/// transformers guessed from the checkpoint's name) is refused naming the field to add.
#[test]
fn config_without_model_type_or_architectures() {
    let dir = crate::scratch("untyped");
    let old = config_file(
        &dir,
        "old_gpt2.json",
        r#"{"n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 21128}"#,
    );
    fails_with(
        &["estimate", &old, "--seq-len", "64"],
        &["old_gpt2.json", "model_type", "gpt2"],
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// Gemma 3's vision-language class on text: what is not modelled is refused, naming why.
#[test]
fn gemma3_vision_language_limits() {
    let cfg = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/hf/configs/gemma3_4b_it_6l.json"
    );
    fails_with(
        &["estimate", cfg, "--seq-len", "64", "--task", "seq-cls"],
        &["causal LM on text", "Gemma3ForCausalLM"],
    );
}

#[test]
fn bad_4bit_flags() {
    let cfg = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/hf/configs/qwen2_small_2l.json"
    );
    fails_with(
        &["estimate", cfg, "--seq-len", "64", "--double-quant"],
        &["--double-quant", "--load-in-4bit or --qlora"],
    );
    fails_with(
        &[
            "estimate",
            cfg,
            "--seq-len",
            "64",
            "--qlora",
            "8",
            "--lora-targets",
            "lm_head.decoder",
        ],
        &["--lora-targets lm_head.decoder", "q_proj"],
    );
    // ResNet's only nn.Linear is its head, which 4-bit loading leaves alone
    fails_with(
        &["estimate", "resnet18", "--load-in-4bit"],
        &["--load-in-4bit", "no nn.Linear layer to quantize"],
    );
}

#[test]
fn target_len_belongs_to_encoder_decoders() {
    fails_with(
        &["estimate", "resnet18", "--target-len", "32"],
        &["--target-len", "Hugging Face models", "resnet18"],
    );
    fails_with(
        &["estimate", "gpt2", "--seq-len", "64", "--target-len", "32"],
        &["--target-len", "encoder-decoder", "gpt2"],
    );
    fails_with(
        &[
            "estimate",
            "t5-small",
            "--seq-len",
            "64",
            "--target-len",
            "0",
        ],
        &["--target-len", "positive"],
    );
    fails_with(
        &[
            "estimate",
            "t5-small",
            "--seq-len",
            "64",
            "--task",
            "causal-lm",
        ],
        &["t5", "no causal-lm head"],
    );
}

#[test]
fn use_cache_belongs_to_encoder_decoders() {
    fails_with(
        &["estimate", "resnet18", "--use-cache", "false"],
        &["--use-cache", "Hugging Face models", "resnet18"],
    );
    fails_with(
        &["estimate", "gpt2", "--seq-len", "64", "--use-cache", "true"],
        &["--use-cache", "encoder-decoder", "gpt2"],
    );
    // a decoder's sequence classifier runs without a cache; its per-token heads follow the flag
    fails_with(
        &[
            "estimate",
            "qwen2.5-0.5b",
            "--seq-len",
            "64",
            "--task",
            "seq-cls",
            "--use-cache",
            "false",
        ],
        &["--use-cache", "token-classification", "qwen2.5-0.5b"],
    );
}

/// `estimate MODEL --mode generate --prompt-len 16 --new-tokens 4 EXTRA...`.
fn generate_args(model: &str, extra: &[&str]) -> Vec<String> {
    let gen = [
        "--mode",
        "generate",
        "--prompt-len",
        "16",
        "--new-tokens",
        "4",
    ];
    ["estimate", model]
        .iter()
        .chain(&gen)
        .chain(extra)
        .map(|s| s.to_string())
        .collect()
}

#[test]
fn bad_generation_flags() {
    let with = generate_args;
    let run = |args: Vec<String>, needles: &[&str]| {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        fails_with(&argv, needles);
    };
    run(
        with("resnet18", &[]),
        &["--mode generate needs a Hugging Face causal LM", "resnet18"],
    );
    run(
        with("bert-base-uncased", &[]),
        &["--mode generate needs a causal LM", "encoder"],
    );
    // the encoders' eager forward is modelled, their generation is not (with either attention)
    run(
        with("bert-base-uncased", &["--attn-implementation", "eager"]),
        &["--mode generate needs a causal LM", "encoder"],
    );
    run(
        with("gpt2", &["--seq-len", "16"]),
        &["--prompt-len", "instead of --seq-len"],
    );
    run(
        with("gpt2", &["--gradient-checkpointing"]),
        &["--gradient-checkpointing", "training"],
    );
    fails_with(
        &[
            "estimate",
            "gpt2",
            "--mode",
            "generate",
            "--new-tokens",
            "4",
        ],
        &["--mode generate needs --prompt-len"],
    );
    fails_with(
        &[
            "estimate",
            "gpt2",
            "--mode",
            "generate",
            "--prompt-len",
            "4",
        ],
        &["--mode generate needs --new-tokens"],
    );
    fails_with(
        &[
            "estimate",
            "gpt2",
            "--mode",
            "generate",
            "--prompt-len",
            "4",
            "--new-tokens",
            "0",
        ],
        &["--new-tokens must be at least 1"],
    );
    fails_with(
        &["estimate", "gpt2", "--prompt-len", "4", "--new-tokens", "4"],
        &["add --mode generate"],
    );
    fails_with(
        &[
            "estimate",
            "gpt2",
            "--mode",
            "generate",
            "--prompt-len",
            "1000",
            "--new-tokens",
            "100",
        ],
        &["--prompt-len 1000 + --new-tokens 100", "n_positions = 1024"],
    );
}

/// An encoder-decoder generates with its LM head, from its decoder start token, with the cache
/// its `use_cache` keeps, and with as many cache layers as decoder layers: what transformers
/// refuses or fails on is refused by name.
#[test]
fn encoder_decoder_generation_limits() {
    let run = |model: &str, extra: &[&str], needles: &[&str]| {
        let args = generate_args(model, extra);
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        fails_with(&argv, needles);
    };
    run(
        "t5-small",
        &["--target-len", "8"],
        &["--target-len", "one token at a time"],
    );
    run(
        "t5-small",
        &["--task", "feature-extraction"],
        &["needs a model with an LM head", "seq2seq-lm"],
    );
    // the fixture's decoder is deeper than its encoder (IndexError in transformers' generate)
    let root = env!("CARGO_MANIFEST_DIR").to_string() + "/../../fixtures/hf/configs/";
    run(
        &(root.clone() + "mt5_small_2l.json"),
        &[],
        &[
            "mt5_small_2l.json",
            "num_decoder_layers",
            "num_layers = 2",
            "got 3",
        ],
    );
    let dir = crate::scratch("t5_generate");
    let t5 = |name: &str, extra: &str| {
        config_file(
            &dir,
            name,
            &format!(
                r#"{{"model_type": "t5", "d_model": 64, "d_kv": 16, "d_ff": 128, "num_heads": 4,
                "num_layers": 2, "vocab_size": 1000 {extra}}}"#
            ),
        )
    };
    // a config saved with `use_cache: false`: generate() keeps no cache (estimated, below)
    let no_cache = t5(
        "no_cache.json",
        r#", "decoder_start_token_id": 0, "use_cache": false"#,
    );
    let llama = config_file(
        &dir,
        "llama_no_cache.json",
        r#"{"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 1000, "use_cache": false}"#,
    );
    run(
        &t5("no_start.json", ""),
        &[],
        &["no_start.json", "decoder_start_token_id", "bos_token_id"],
    );
    // what estimates: the T5 and Llama configs without a cache and with one (`--use-cache
    // true`), a T5 config with its start token
    let ok = t5("start.json", r#", "decoder_start_token_id": 0"#);
    for (model, extra) in [
        (&no_cache, &[][..]),
        (&no_cache, &["--use-cache", "true"]),
        (&llama, &[]),
        (&llama, &["--use-cache", "true"]),
        (&ok, &[]),
    ] {
        let args = generate_args(model, extra);
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        succeeds(&argv);
    }
    // the text report says that the generation keeps no cache, and what that costs
    for model in [&llama, &no_cache] {
        let args = generate_args(model, &[]);
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let text = String::from_utf8(crate::vramscope(&argv).stdout).expect("UTF-8");
        assert!(
            text.contains("no KV cache (use_cache false")
                && text.contains(
                    "generate() without a KV cache: every step reruns the whole sequence"
                ),
            "{text}"
        );
    }
}

/// A config that names a half dtype gets a note when no --precision is given: transformers 5's
/// from_pretrained loads it in that dtype by default, the estimate follows --precision (fp32).
#[test]
fn config_dtype_is_noted_without_precision() {
    let args = [
        "estimate",
        "llama-3-8b",
        "--seq-len",
        "64",
        "-b",
        "1",
        "--json",
    ];
    let out = crate::vramscope(&args);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("`torch_dtype` is bfloat16")
            && stderr.contains("--precision fp32 (the default)")
            && stderr.contains("--precision bf16 estimates the model as loaded"),
        "{stderr}"
    );
    let _: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    // no note once --precision is given, nor for a config without a dtype (GPT-2's)
    for args in [
        &[
            "estimate",
            "llama-3-8b",
            "--seq-len",
            "64",
            "-b",
            "1",
            "--precision",
            "fp32",
        ][..],
        &["estimate", "gpt2", "--seq-len", "64", "-b", "1"][..],
    ] {
        let out = crate::vramscope(args);
        assert!(out.status.success());
        assert!(
            out.stderr.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A reader that goes away early (`vramscope estimate ... --json | head`) ends the output
/// quietly: exit 0, no error and no panic on stderr.
#[test]
fn closed_stdout_ends_quietly() {
    use std::io::Read;
    use std::process::{Command, Stdio};
    for args in [
        // outputs larger than a pipe's buffer, so that writing them fails
        // (--precision given: without it a note says the config's dtype is bfloat16)
        &[
            "estimate",
            "llama-3-70b",
            "--seq-len",
            "4096",
            "--precision",
            "bf16",
            "--json",
        ][..],
        &[
            "estimate",
            "llama-3-70b",
            "--seq-len",
            "4096",
            "--precision",
            "bf16",
        ][..],
        &["models"][..],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_vramscope"))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the vramscope binary runs");
        let mut first = [0u8; 1];
        let mut stdout = child.stdout.take().expect("piped stdout");
        stdout.read_exact(&mut first).expect("some output");
        drop(stdout);
        let out = child.wait_with_output().expect("vramscope exits");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
    }
}

/// A `.gguf` MODEL: refused architectures are named with what is built, a file whose tensors do
/// not fit the model its metadata describes is refused as transformers refuses it, and a missing
/// file is an error about that file, not an unknown model name.
#[test]
fn bad_gguf_models() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/weights");
    let path = |p: &str| format!("{dir}/{p}");
    fails_with(
        &[
            "estimate",
            &path("gguf/refused/bloom.gguf"),
            "--seq-len",
            "16",
        ],
        &[
            "bloom.gguf",
            "general.architecture",
            "\"bloom\"",
            "qwen3moe",
        ],
    );
    fails_with(
        &[
            "estimate",
            &path("gguf/refused/mystery.gguf"),
            "--seq-len",
            "16",
        ],
        &[
            "mystery.gguf",
            "general.architecture",
            "\"mystery\"",
            "gemma3",
        ],
    );
    fails_with(
        &[
            "estimate",
            &path("gguf/refused/llama-experts.gguf"),
            "--seq-len",
            "16",
        ],
        &[
            "llama-experts.gguf",
            "llama.expert_count",
            "8 experts",
            "config.json",
        ],
    );
    // tiny.gguf's metadata has no sizes, so transformers builds LlamaConfig's default model
    fails_with(
        &["estimate", &path("tiny.gguf"), "--seq-len", "16"],
        &["tiny.gguf", "6476288000 parameters", "2112 elements"],
    );
    fails_with(
        &[
            "estimate",
            &path("corrupt/truncated.gguf"),
            "--seq-len",
            "16",
        ],
        &["truncated.gguf", "truncated or corrupt"],
    );
    fails_with(
        &["estimate", "no/such/model.gguf", "--seq-len", "16"],
        &["no/such/model.gguf", "No such file"],
    );
    fails_with(
        &["estimate", &path("gguf/llama.gguf")],
        &["llama.gguf", "--seq-len"],
    );
    fails_with(
        &[
            "estimate",
            &path("gguf/llama.gguf"),
            "--seq-len",
            "16",
            "--weights-dtype",
            "from-files",
        ],
        &["GGUF file", "--precision"],
    );
}

/// A GGUF model estimates like its config: the note on stderr says what the file's blocks take
/// and that the model is simulated dequantized; `--json` stays clean on stdout.
#[test]
fn gguf_model_estimates() {
    let model = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/weights/gguf/qwen3.gguf"
    );
    let out = crate::vramscope(&[
        "estimate",
        model,
        "--mode",
        "generate",
        "--prompt-len",
        "32",
        "--new-tokens",
        "4",
        "--precision",
        "bf16",
        "--json",
    ]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "24 tensors, 251.50 KiB as stored (Q4_K 18.00 KiB, Q6_K 26.25 KiB, Q8_0 204.00 KiB)"
        ),
        "{err}"
    );
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["model"]["source"], "gguf");
    assert_eq!(json["model"]["parameters"], 262_976);
}

/// `--padded` with a task the model has no head for is refused as without it (naming `--task`), and
/// on a model that is not a Hugging Face one by name.
#[test]
fn padded_batches_refused_where_not_modelled() {
    fails_with(
        &[
            "estimate",
            "t5-small",
            "--seq-len",
            "64",
            "--padded",
            "--task",
            "causal-lm",
        ],
        &["--task"],
    );
    fails_with(
        &["estimate", "resnet18", "--padded"],
        &["--padded", "resnet18", "Hugging Face"],
    );
    // modelled: the batch's mask is an input, and the estimate is larger than unpadded
    let peak = |extra: &[&str]| {
        let mut args = vec![
            "llama-3.2-1b",
            "--seq-len",
            "1024",
            "-b",
            "4",
            "--precision",
            "amp-bf16",
        ];
        args.extend_from_slice(extra);
        crate::estimate_json(&args)["peak"]["allocated_bytes"]
            .as_u64()
            .unwrap()
    };
    assert!(peak(&["--padded"]) > peak(&[]));
}

/// `"attention_dropout": null` loads where the config class allows None (Llama, Gemma2, Gemma3)
/// and runs in eval, but transformers' training forward hands None to the attention's dropout
/// and fails (checked in the truth venv: SDPA and eager, causal LM and sequence classifier):
/// training is refused naming the field, inference and generation are estimated, and a class
/// that declares `float | int` refuses the null whatever the mode.
#[test]
fn a_null_attention_dropout_trains_nowhere_and_runs_where_the_class_allows_it() {
    let dir = crate::scratch("null-attention-dropout");
    let fields = r#""vocab_size": 100, "hidden_size": 64, "intermediate_size": 128,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "num_hidden_layers": 1, "attention_dropout": null"#;
    for model_type in ["llama", "gemma2", "gemma3_text"] {
        let cfg = config_file(
            &dir,
            &format!("{model_type}.json"),
            &format!(r#"{{"model_type": "{model_type}", {fields}}}"#),
        );
        fails_with(
            &["estimate", &cfg, "--seq-len", "32", "-b", "1"],
            &[&cfg, "`attention_dropout`", "runs in eval", "dropout_p"],
        );
        fails_with(
            &[
                "estimate",
                &cfg,
                "--seq-len",
                "32",
                "-b",
                "1",
                "--lora",
                "4",
            ],
            &["`attention_dropout`"],
        );
        for mode in [
            &["--mode", "infer", "--seq-len", "32"][..],
            &[
                "--mode",
                "generate",
                "--prompt-len",
                "8",
                "--new-tokens",
                "2",
            ],
        ] {
            succeeds(&[&["estimate", cfg.as_str(), "-b", "1"], mode].concat());
        }
    }
    let mistral = config_file(
        &dir,
        "mistral.json",
        &format!(r#"{{"model_type": "mistral", {fields}}}"#),
    );
    fails_with(
        &["estimate", &mistral, "--mode", "infer", "--seq-len", "32"],
        &[
            "`attention_dropout`",
            "MistralConfig declares `float | int`",
            "not null",
        ],
    );
}

/// A decoder's sequence classifier without a `pad_token_id` (GPT-2's and Mistral's configs set
/// none) is refused by transformers for a batch of more than one ("Cannot handle batch sizes > 1
/// if no padding token is defined", checked in the truth venv for Llama, GPT-2, OPT and Gemma
/// configs without one); the estimate is made as with one set, and a note on stderr says so, once,
/// for the batch asked for only. OPT's config class sets one (1): no note.
#[test]
fn a_sequence_classifier_without_a_pad_token_is_noted_for_batches() {
    let note = |model: &str, batch: &str| {
        let args = [
            "estimate",
            model,
            "--task",
            "seq-cls",
            "--seq-len",
            "16",
            "-b",
            batch,
            "--json",
        ];
        let out = crate::vramscope(&args);
        assert!(out.status.success(), "{args:?}");
        let _: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        stderr
            .lines()
            .filter(|l| l.contains("no pad_token_id"))
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    for model in ["gpt2", "mistral-7b"] {
        let lines = note(model, "4");
        assert_eq!(lines.len(), 1, "{model}: {lines:?}");
        assert!(
            lines[0].contains("Cannot handle batch sizes > 1")
                && lines[0].contains("model.config.pad_token_id = tokenizer.eos_token_id"),
            "{lines:?}"
        );
        assert!(note(model, "1").is_empty(), "{model} at batch 1");
    }
    assert!(note("opt-125m", "4").is_empty());
}
