//! The `--json` field names of DESIGN.md, which scripts depend on, and their internal consistency.

use crate::estimate_json;

#[test]
fn contract_fields_exist() {
    let r = estimate_json(&["resnet18", "--batch-size", "4"]);
    for path in [
        "/model/name",
        "/model/source",
        "/model/parameters",
        "/model/trainable_parameters",
        "/model/parameter_bytes",
        "/model/buffer_bytes",
        "/config/mode",
        "/config/batch_size",
        "/config/precision",
        "/config/optimizer",
        "/peak/allocated_bytes",
        "/peak/reserved_bytes",
        "/peak/device_bytes",
        "/peak/phase",
        "/phases/0/name",
        "/phases/0/allocated_after_bytes",
        "/phases/0/peak_allocated_bytes",
        "/phases/0/peak_reserved_bytes",
        "/breakdown_at_peak/parameters",
        "/breakdown_at_peak/buffers",
        "/breakdown_at_peak/gradients",
        "/breakdown_at_peak/optimizer_states",
        "/breakdown_at_peak/activations",
        "/breakdown_at_peak/temporaries",
        "/breakdown_at_peak/inputs",
        "/breakdown_at_peak/kv_cache",
        "/layers/0/name",
        "/layers/0/op",
        "/layers/0/output_shape",
        "/layers/0/parameters",
        "/layers/0/saved_bytes",
        "/overheads/cuda_context_bytes",
        "/overheads/library_workspace_bytes",
        "/gpu/name",
        "/gpu/memory_bytes",
        "/gpu/fits",
        "/gpu/headroom_bytes",
    ] {
        assert!(r.pointer(path).is_some(), "missing {path}");
    }
    assert_eq!(r["model"]["parameters"], 11_689_512);
    assert_eq!(r["config"]["optimizer"], "sgd-momentum");
    assert_eq!(r["layers"][0]["name"], "conv1");
    assert_eq!(
        r["layers"][0]["output_shape"],
        serde_json::json!([4, 64, 112, 112])
    );
}

#[test]
fn phases_are_the_canonical_ones() {
    let train = estimate_json(&["resnet18", "--batch-size", "2"]);
    let names: Vec<&str> = train["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "init",
            "model",
            "optimizer",
            "it1.data",
            "it1.forward",
            "it1.loss",
            "it1.zero_grad",
            "it1.backward",
            "it1.step",
            "it2.data",
            "it2.forward",
            "it2.loss",
            "it2.zero_grad",
            "it2.backward",
            "it2.step"
        ]
    );
    let infer = estimate_json(&["resnet18", "--batch-size", "2", "--mode", "infer"]);
    let names: Vec<&str> = infer["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "init",
            "model",
            "it1.data",
            "it1.forward",
            "it2.data",
            "it2.forward"
        ]
    );
    assert!(infer["config"]["optimizer"].is_null());
}

#[test]
fn peak_is_consistent_with_phases_and_breakdown() {
    let r = estimate_json(&[
        "resnet50",
        "--batch-size",
        "8",
        "--optimizer",
        "adam",
        "--precision",
        "amp-bf16",
    ]);
    let peak = r["peak"]["allocated_bytes"].as_u64().unwrap();
    let max_phase = r["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["peak_allocated_bytes"].as_u64().unwrap())
        .max()
        .unwrap();
    assert_eq!(peak, max_phase);
    let b = &r["breakdown_at_peak"];
    let sum: u64 = [
        "parameters",
        "buffers",
        "gradients",
        "optimizer_states",
        "activations",
        "temporaries",
        "inputs",
    ]
    .iter()
    .map(|k| b[k].as_u64().unwrap())
    .sum();
    assert_eq!(sum, peak, "the breakdown adds up to the peak");
    assert!(r["peak"]["reserved_bytes"].as_u64().unwrap() >= peak);
    assert_eq!(
        r["peak"]["device_bytes"].as_u64().unwrap(),
        r["peak"]["reserved_bytes"].as_u64().unwrap()
            + r["overheads"]["cuda_context_bytes"].as_u64().unwrap()
            + r["overheads"]["library_workspace_bytes"].as_u64().unwrap()
    );
}

#[test]
fn more_batch_more_memory_and_infer_less_than_train() {
    let peak = |args: &[&str]| {
        estimate_json(args)["peak"]["allocated_bytes"]
            .as_u64()
            .unwrap()
    };
    let b8 = peak(&["resnet34", "--batch-size", "8"]);
    let b16 = peak(&["resnet34", "--batch-size", "16"]);
    let inf = peak(&["resnet34", "--batch-size", "16", "--mode", "infer"]);
    let ckpt = peak(&[
        "resnet34",
        "--batch-size",
        "16",
        "--checkpoint",
        "layer1,layer2,layer3,layer4",
    ]);
    assert!(b16 > b8);
    assert!(inf < b16);
    assert!(ckpt < b16);
}

#[test]
fn text_report_has_the_sections() {
    let out = crate::vramscope(&["estimate", "resnet18", "--batch-size", "2"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "layer1.0.conv1",
        "it2.forward",
        "<- peak",
        "parameters",
        "largest tensors alive at the peak",
        "fits on H100",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}

/// A layer-table row of functional ops inside a module (a transformer's attention core between
/// its projections) is named by the op that saved the most for backward, not by its first op (a
/// head-splitting `view`); each row's saved bytes are unchanged by the naming.
#[test]
fn functional_rows_are_named_by_their_largest_saver() {
    let cfg = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/hf/configs/llama32_1b_2l.json"
    );
    // eager attention: `q @ k.T` saves q and k, the softmax its output (larger from some length
    // on); at 128 tokens the first matmul saves the most
    for (attention, core) in [
        ("sdpa", "scaled_dot_product_attention"),
        ("eager", "matmul"),
    ] {
        let r = estimate_json(&[
            cfg,
            "--seq-len",
            "128",
            "-b",
            "2",
            "--attn-implementation",
            attention,
        ]);
        let rows: Vec<&serde_json::Value> = r["layers"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|l| l["name"].as_str().unwrap().ends_with(".self_attn"))
            .collect();
        let saving: Vec<&str> = rows
            .iter()
            .filter(|l| l["saved_bytes"].as_u64().unwrap() > 0)
            .map(|l| l["op"].as_str().unwrap())
            .collect();
        assert_eq!(saving, [core, core], "{attention}: {rows:?}");
        // the rows that save nothing keep their first op's name
        assert!(
            rows.iter()
                .filter(|l| l["saved_bytes"] == 0)
                .all(|l| l["op"] == "view"),
            "{attention}: {rows:?}"
        );
    }
}

#[test]
fn fit_json_gives_the_batch_size_and_both_estimates() {
    let v = crate::vramscope_json(&["fit", "resnet18", "--gpu", "a100", "--json"]);
    let b = v["batch_size"].as_u64().expect("batch_size");
    assert!(b > 100);
    assert_eq!(v["at_size"]["size"].as_u64(), Some(b));
    assert_eq!(v["next_size"]["size"].as_u64(), Some(b + 1));
    assert_eq!(v["at_size"]["fits"].as_bool(), Some(true));
    assert_eq!(v["next_size"]["fits"].as_bool(), Some(false));
    assert_eq!(v["verified"].as_bool(), Some(true));
    // the estimate at that batch is what `estimate` reports; where it fits only with the
    // allocator's cache released (capped at the budget), `estimate` agrees that it runs
    let e = crate::estimate_json(&["resnet18", "-b", &b.to_string(), "--gpu", "a100"]);
    let at = &v["at_size"];
    assert_eq!(e["peak"]["allocated_bytes"], at["allocated_bytes"]);
    if at["cache_released"] == true {
        assert!(
            e["gpu"]["fits"] == true || e["gpu"]["with_cache_release"]["fits"] == true,
            "{}",
            e["gpu"]
        );
    } else {
        assert_eq!(e["peak"]["device_bytes"], at["device_bytes"]);
        assert_eq!(e["gpu"]["fits"].as_bool(), Some(true));
    }
}

/// Built-in transformer names resolve through the config zoo, with transformers' parameter counts.
#[test]
fn builtin_transformers_by_name() {
    let r = estimate_json(&[
        "gpt2",
        "--seq-len",
        "1024",
        "--batch-size",
        "2",
        "--precision",
        "amp-bf16",
    ]);
    assert_eq!(r["model"]["parameters"], 124439808);
    assert_eq!(r["model"]["source"], "zoo");
    let r = estimate_json(&[
        "llama-3-8b",
        "--seq-len",
        "2048",
        "--batch-size",
        "1",
        "--mode",
        "infer",
        "--precision",
        "bf16",
    ]);
    assert_eq!(r["model"]["parameters"], 8030261248u64);
    let out = crate::vramscope(&["models"]);
    let list = String::from_utf8_lossy(&out.stdout);
    for n in [
        "resnet50",
        "gpt2",
        "llama-3-8b",
        "roberta-base",
        "phi-3-mini",
        "t5-small",
        "flan-t5-base",
    ] {
        assert!(list.lines().any(|l| l == n), "{n} not listed");
    }
}

/// `--lora R` on GPT-2, whose projections are transformers' `Conv1D` (weight `[in, out]`): PEFT's
/// default target `c_attn`, and `--lora-targets` naming the other Conv1D layers.
#[test]
fn lora_adapts_gpt2_conv1d_layers() {
    let base = ["gpt2", "--batch-size", "8", "--seq-len", "1024"];
    let r = estimate_json(&[&base[..], &["--lora", "8"]].concat());
    // 12 blocks, c_attn 768 -> 2304: lora_A [8, 768] + lora_B [2304, 8]
    let adapters = 12 * (8 * 768 + 2304 * 8);
    assert_eq!(r["model"]["trainable_parameters"], adapters);
    assert_eq!(r["model"]["parameters"], 124439808 + adapters);
    let layers: Vec<&str> = r["layers"]
        .as_array()
        .expect("layers")
        .iter()
        .filter_map(|l| l["name"].as_str())
        .collect();
    assert!(layers.contains(&"transformer.h.0.attn.c_attn.base_layer"));
    assert!(layers.contains(&"transformer.h.11.attn.c_attn.lora_B.default"));
    let all = [
        &base[..],
        &["--lora", "8", "--lora-targets", "c_attn,c_proj,c_fc"],
    ]
    .concat();
    let r = estimate_json(&all);
    // c_attn, attn.c_proj (768 -> 768), mlp.c_fc (768 -> 3072), mlp.c_proj (3072 -> 768)
    let per_block = 8 * (768 + 2304) + 8 * (768 + 768) + 2 * 8 * (768 + 3072);
    assert_eq!(r["model"]["trainable_parameters"], 12 * per_block);
}

/// `--lora R` on Phi-3, which PEFT has no default targets for: the attention's fused `qkv_proj`.
#[test]
fn lora_defaults_to_phi3_fused_qkv_projection() {
    let cfg = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/hf/configs/phi3_mini_2l.json"
    );
    let r = estimate_json(&[cfg, "--seq-len", "64", "--lora", "8"]);
    // 2 layers, qkv_proj 3072 -> 3 x 3072: lora_A [8, 3072] + lora_B [9216, 8]
    assert_eq!(r["model"]["trainable_parameters"], 2 * 8 * (3072 + 9216));
    let adapted: Vec<&str> = r["layers"]
        .as_array()
        .expect("layers")
        .iter()
        .filter_map(|l| l["name"].as_str())
        .filter(|n| n.contains(".lora_A."))
        .collect();
    assert_eq!(
        adapted,
        [
            "model.layers.0.self_attn.qkv_proj.lora_A.default",
            "model.layers.1.self_attn.qkv_proj.lora_A.default"
        ]
    );
}

/// `--lora R` on the built-in checkpoints takes the defaults of their model type, not of the
/// zoo name the report shows (`roberta-base`: PEFT's `query` / `value`; `phi-3-mini`: the fused
/// `qkv_proj`; `xlm-roberta-base` as RoBERTa).
#[test]
fn lora_on_zoo_checkpoints_uses_their_model_types_defaults() {
    for (model, per_layer, layers) in [
        // query and value: 768 -> 768 each, lora_A [8, 768] + lora_B [768, 8]
        ("roberta-base", 2 * 8 * (768 + 768), 12),
        ("xlm-roberta-base", 2 * 8 * (768 + 768), 12),
        // qkv_proj 3072 -> 9216
        ("phi-3-mini", 8 * (3072 + 9216), 32),
    ] {
        let r = estimate_json(&[model, "--seq-len", "64", "--lora", "8"]);
        assert_eq!(r["model"]["name"], model);
        assert_eq!(
            r["model"]["trainable_parameters"],
            per_layer * layers,
            "{model}"
        );
    }
}

/// `fit --search seq-len`: the longest sequence that fits, checked against `estimate` (no
/// `--seq-len` needed: the search supplies it).
#[test]
fn fit_searches_the_sequence_length_of_a_transformer() {
    let v = crate::vramscope_json(&[
        "fit",
        "gpt2",
        "-b",
        "16",
        "--gpu",
        "t4",
        "--search",
        "seq-len",
        "--optimizer",
        "adamw",
        "--json",
    ]);
    let s = v["seq_len"].as_u64().expect("seq_len");
    assert!(s > 16 && s < 1024, "{s}");
    assert_eq!(v["batch_size"].as_u64(), Some(16));
    // the estimates at the answer and past it are `estimate`'s (the allocated peak; the
    // reserved one may be the run capped at the budget, the allocator's cache released)
    let allocated = |seq: u64| {
        let e = crate::estimate_json(&[
            "gpt2",
            "--seq-len",
            &seq.to_string(),
            "-b",
            "16",
            "--gpu",
            "t4",
            "--optimizer",
            "adamw",
        ]);
        e["peak"]["allocated_bytes"].clone()
    };
    for (key, seq, fits) in [("at_size", s, true), ("next_size", s + 1, false)] {
        assert_eq!(v[key]["fits"].as_bool(), Some(fits), "{v}");
        assert_eq!(v[key]["allocated_bytes"], allocated(seq), "{key}");
    }
    assert!(v["at_size"]["device_bytes"].as_u64() <= v["budget_bytes"].as_u64());
}

/// T5: `input_ids` `[B, S]` and `labels` `[B, T]`; the labels' length moves the decoder's and
/// the loss's memory only, and the loss is computed in the forward phase (the loss phase only
/// reads it).
#[test]
fn t5_target_length_and_loss_in_forward() {
    let run = |target: &str| {
        estimate_json(&[
            "t5-small",
            "--seq-len",
            "256",
            "--target-len",
            target,
            "--batch-size",
            "4",
            "--optimizer",
            "adamw",
        ])
    };
    let short = run("32");
    let long = run("128");
    assert_eq!(short["model"]["parameters"], 60506624);
    assert_eq!(short["config"]["input_shape"], serde_json::json!([256]));
    let peak = |r: &serde_json::Value| r["peak"]["allocated_bytes"].as_u64().unwrap();
    assert!(peak(&long) > peak(&short));
    let phase = |r: &serde_json::Value, name: &str| {
        r["phases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == name)
            .unwrap()
            .clone()
    };
    // the [B*T, vocab] log-probabilities are made in the forward phase, not the loss phase
    let fwd = phase(&long, "it1.forward")["allocated_after_bytes"]
        .as_u64()
        .unwrap();
    let loss = phase(&long, "it1.loss")["allocated_after_bytes"]
        .as_u64()
        .unwrap();
    assert_eq!(fwd, loss);
    assert!(
        fwd > 4 * 128 * 32128 * 4,
        "logits and log-probabilities: {fwd}"
    );
    // without --target-len the labels are as long as the inputs
    let same = estimate_json(&["t5-small", "--seq-len", "128", "--batch-size", "4"]);
    let explicit = estimate_json(&[
        "t5-small",
        "--seq-len",
        "128",
        "--target-len",
        "128",
        "--batch-size",
        "4",
    ]);
    assert_eq!(same["peak"], explicit["peak"]);
}

/// `tricks` on a transformer leaves checkpointing "every block" to its own
/// `gradient_checkpointing_enable()` row (the same layers), and offers no `checkpoint_sequential`
/// over a module that is not an `nn.Sequential` (a transformer passes masks and positions to its
/// layers). A `ModuleList` named with `--checkpoint`, which Python never calls (its
/// recomputation keeps what it reads), still simulates.
#[test]
fn tricks_leave_a_transformers_layers_to_its_own_checkpointing() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/hf/configs/");
    let names = |args: &[&str]| -> Vec<String> {
        let rows = crate::vramscope_json(args);
        rows.as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    let t5 = format!("{dir}t5_small_2l.json");
    let t5_step = [
        t5.as_str(),
        "--seq-len",
        "32",
        "--target-len",
        "16",
        "-b",
        "2",
    ];
    let qwen = format!("{dir}qwen2_small_2l.json");
    for args in [
        [&["tricks"][..], &t5_step, &["--json"]].concat(),
        vec!["tricks", &qwen, "--seq-len", "128", "-b", "2", "--json"],
        // already on: checkpointing every layer again would save nothing
        vec![
            "tricks",
            &qwen,
            "--seq-len",
            "128",
            "-b",
            "2",
            "--gradient-checkpointing",
            "--json",
        ],
    ] {
        let names = names(&args);
        assert!(
            names.iter().any(|n| n.starts_with("checkpoint ")),
            "{args:?}: {names:?}"
        );
        assert!(
            !names.iter().any(|n| n.starts_with("checkpoint every block")
                || n.starts_with("checkpoint_sequential")),
            "{args:?}: {names:?}"
        );
    }
    let t5_names = names(&[&["tricks"][..], &t5_step, &["--json"]].concat());
    assert!(
        t5_names
            .iter()
            .any(|n| n == "gradient_checkpointing_enable()"),
        "{t5_names:?}"
    );
    let by_hand = crate::vramscope_json(
        &[
            &["estimate"][..],
            &t5_step,
            &["--checkpoint", "encoder.block,decoder.block", "--json"],
        ]
        .concat(),
    );
    assert!(by_hand["peak"]["allocated_bytes"].as_u64().unwrap() > 0);
    // an ONNX file's containers are of unknown class: both rows are offered there
    let onnx = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/onnx/resnet50.onnx"
    );
    let onnx_names = names(&["tricks", onnx, "-b", "8", "--json"]);
    for row in ["checkpoint every block", "checkpoint_sequential layer2:"] {
        assert!(
            onnx_names.iter().any(|n| n.starts_with(row)),
            "{row}: {onnx_names:?}"
        );
    }
}

/// A generation without a KV cache (`--use-cache false`, as a config saved after training with
/// gradient checkpointing says) is offered the cache, re-simulated: it lowers the reserved
/// memory its growing steps fragment. A generation with the cache is not offered it.
#[test]
fn tricks_offer_the_kv_cache_to_a_generation_without_one() {
    let t5 = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/hf/configs/t5_small_2l.json"
    );
    let args = |cache: &'static str| {
        vec![
            "tricks",
            t5,
            "-b",
            "4",
            "--mode",
            "generate",
            "--prompt-len",
            "128",
            "--new-tokens",
            "300",
            "--use-cache",
            cache,
            "--json",
        ]
    };
    let row = |rows: &serde_json::Value| {
        rows.as_array()
            .unwrap()
            .iter()
            .find(|r| r["change"]["FineTuning"] == "KvCache")
            .cloned()
    };
    let without = crate::vramscope_json(&args("false"));
    let cache = row(&without).expect("the KV cache offered");
    let reserved = |peak: &serde_json::Value| peak["reserved_bytes"].as_u64().unwrap();
    assert!(
        reserved(&cache["after"]) * 4 < reserved(&cache["before"]),
        "{cache}"
    );
    assert!(cache["how"].as_str().unwrap().contains("use_cache=True"));
    assert!(row(&crate::vramscope_json(&args("true"))).is_none());
}

/// A step that does not fit only because of the allocator's cache is simulated again on an
/// allocator capped at the GPU's memory, which frees its cached segments and retries as PyTorch
/// does: a long T5 generation without a KV cache reserves 60 times its allocated peak, more than
/// an H100 holds, and runs there with its reserved memory under the cap. A model whose allocated
/// peak does not fit gets no second simulation.
#[test]
fn a_verdict_failed_by_the_cache_alone_is_simulated_with_the_cache_released() {
    let fragmented = [
        "estimate",
        "t5-small",
        "--mode",
        "generate",
        "--prompt-len",
        "128",
        "--new-tokens",
        "300",
        "--use-cache",
        "false",
    ];
    let json = crate::vramscope_json(&[&fragmented[..], &["--json"]].concat());
    let gpu = &json["gpu"];
    assert_eq!(gpu["fits"], false, "{gpu}");
    let released = &gpu["with_cache_release"];
    assert_eq!(released["fits"], true, "{gpu}");
    let cap = gpu["memory_bytes"].as_u64().unwrap()
        - json["overheads"]["cuda_context_bytes"].as_u64().unwrap()
        - json["overheads"]["library_workspace_bytes"]
            .as_u64()
            .unwrap();
    let capped = released["peak_reserved_bytes"].as_u64().unwrap();
    assert!(capped <= cap && capped >= json["peak"]["allocated_bytes"].as_u64().unwrap());
    let text = String::from_utf8(crate::vramscope(&fragmented).stdout).expect("UTF-8");
    assert!(
        text.contains("does NOT fit") && text.contains("but it runs"),
        "{text}"
    );
    let too_big = crate::vramscope_json(&[
        "estimate",
        "llama-3-70b",
        "--seq-len",
        "512",
        "-b",
        "1",
        "--precision",
        "bf16",
        "--json",
    ]);
    assert_eq!(too_big["gpu"]["fits"], false);
    assert!(too_big["gpu"].get("with_cache_release").is_none());
}

/// `fit` counts a size that fits only with the allocator freeing its cached segments (capped at
/// the budget, as PyTorch retries before raising out-of-memory) as fitting, and says so: a
/// generation without a KV cache, whose reserved memory is several times its allocated peak.
#[test]
fn fit_lets_the_allocator_release_its_cache() {
    let t5 = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/hf/configs/t5_small_2l.json"
    );
    let fit = crate::vramscope_json(&[
        "fit",
        t5,
        "--mode",
        "generate",
        "--prompt-len",
        "64",
        "--new-tokens",
        "60",
        "--use-cache",
        "false",
        "--gpu",
        "rtx3080",
        "--json",
    ]);
    let at = &fit["at_size"];
    assert_eq!(at["fits"], true, "{fit}");
    assert_eq!(at["cache_released"], true, "{fit}");
    assert!(
        at["device_bytes"].as_u64() <= fit["budget_bytes"].as_u64(),
        "{fit}"
    );
    assert_eq!(fit["next_size"]["fits"], false, "{fit}");
}

/// `tricks`' code for a transformers model loads it in the dtype and calls it on the batch, its
/// loss its own: token ids are never cast to bf16 (an image model's input is), and no row calls
/// `model(x)`.
#[test]
fn tricks_precision_code_fits_the_model() {
    // (name, how) of every row
    let rows = |args: &[&str]| -> Vec<(String, String)> {
        crate::vramscope_json(args)
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let text = |k: &str| r[k].as_str().unwrap().to_string();
                (text("name"), text("how"))
            })
            .collect()
    };
    let precision = |rows: &[(String, String)]| -> Vec<String> {
        rows.iter()
            .filter(|(name, _)| name.starts_with("precision "))
            .map(|(_, how)| how.clone())
            .collect()
    };
    let cfg = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/hf/configs/qwen2_small_2l.json"
    );
    for mode in ["train", "infer"] {
        let all = rows(&[
            "tricks",
            cfg,
            "--seq-len",
            "64",
            "-b",
            "2",
            "--mode",
            mode,
            "--json",
        ]);
        let how = precision(&all);
        assert_eq!(how.len(), 3, "{mode}: {how:?}");
        assert!(how.iter().all(|h| !h.contains("x.to(")), "{mode}: {how:?}");
        assert!(
            how.iter()
                .any(|h| h.contains("from_pretrained(path, dtype=torch.bfloat16)")),
            "{mode}: {how:?}"
        );
        assert!(
            how.iter().any(|h| h.contains("model(**batch)")),
            "{mode}: {how:?}"
        );
        for (name, how) in &all {
            assert!(!how.contains("model(x"), "{mode}: {name}: {how}");
        }
    }
    let how = precision(&rows(&["tricks", "resnet18", "-b", "2", "--json"]));
    assert!(
        how.iter().any(|h| h.contains("x = x.to(torch.bfloat16)")),
        "{how:?}"
    );
}

/// `tricks` on a sequence model shortens its sequences (three quarters of `--seq-len`), re-simulated
/// exactly as `estimate --seq-len` at that length, and offers no image resize.
#[test]
fn tricks_shorten_sequences_not_images() {
    let rows = crate::vramscope_json(&[
        "tricks",
        "bert-base-uncased",
        "--seq-len",
        "128",
        "-b",
        "4",
        "--json",
    ]);
    let rows = rows.as_array().unwrap();
    assert!(
        !rows
            .iter()
            .any(|r| r["change"].get("SmallerInput").is_some()),
        "an image resize for a text model"
    );
    let shorter = rows
        .iter()
        .find(|r| r["change"].get("ShorterSequence").is_some())
        .expect("a shorter-sequence row");
    assert_eq!(shorter["change"]["ShorterSequence"], 96);
    let direct = estimate_json(&["bert-base-uncased", "--seq-len", "96", "-b", "4"]);
    assert_eq!(
        shorter["after"]["allocated_bytes"],
        direct["peak"]["allocated_bytes"]
    );
    assert_eq!(
        shorter["after"]["reserved_bytes"],
        direct["peak"]["reserved_bytes"]
    );
}

/// `--mode generate` adds `generation` (and only then); the KV cache at the peak is its own
/// category, and the cache at the end is what its shape and dtype say.
#[test]
fn generation_fields() {
    let r = estimate_json(&[
        "mistral-7b",
        "--mode",
        "generate",
        "--prompt-len",
        "100",
        "--new-tokens",
        "20",
        "--batch-size",
        "2",
        "--precision",
        "bf16",
    ]);
    assert_eq!(r["config"]["mode"], "generate");
    assert!(r["config"]["optimizer"].is_null());
    let g = &r["generation"];
    for f in [
        "prompt_len",
        "new_tokens",
        "decode_steps",
        "simulated_decode_steps",
        "skeleton_decode_steps",
        "skeleton_stride",
        "kv_cache_bytes",
        "kv_cache_bytes_per_token",
        "kv_key_dtype",
        "kv_value_dtype",
    ] {
        assert!(!g[f].is_null(), "generation.{f} missing: {g}");
    }
    assert_eq!(g["decode_steps"], 19);
    assert_eq!(g["simulated_decode_steps"], 19);
    // 32 layers x (keys + values) x batch 2 x 8 KV heads x 128 dims x 2 bytes, for 119 positions
    let per_token = 32 * 2 * 2 * 8 * 128 * 2;
    assert_eq!(g["kv_cache_bytes_per_token"], per_token);
    assert_eq!(g["kv_cache_bytes"], per_token * 119);
    assert_eq!(g["kv_key_dtype"], "bfloat16");
    let kv = r["breakdown_at_peak"]["kv_cache"].as_u64().unwrap();
    assert!(kv > 0, "{r}");
    let train = estimate_json(&["gpt2", "--seq-len", "64", "--batch-size", "1"]);
    assert!(train.get("generation").is_none());
    assert_eq!(train["breakdown_at_peak"]["kv_cache"], 0);
}

/// `fit` on a transformer without `--seq-len`: the largest batch at 512 and 1024 tokens (GPT-2's
/// `n_positions` stops the list there), each verified, fewer at the longer length, and the longest
/// sequence at batch size 1 (the model's limit).
#[test]
fn fit_without_a_sequence_length_lists_the_largest_batch_per_length() {
    let v = crate::vramscope_json(&[
        "fit",
        "gpt2",
        "--gpu",
        "t4",
        "--optimizer",
        "adamw",
        "--json",
    ]);
    let rows = v["by_seq_len"].as_array().expect("by_seq_len");
    let lens: Vec<u64> = rows
        .iter()
        .map(|r| r["seq_len"].as_u64().unwrap())
        .collect();
    assert_eq!(lens, [512, 1024]);
    let batches: Vec<u64> = rows
        .iter()
        .map(|r| r["batch_size"].as_u64().unwrap())
        .collect();
    assert!(batches[0] > batches[1] && batches[1] > 0, "{batches:?}");
    for r in rows {
        assert_eq!(r["verified"].as_bool(), Some(true));
        assert_eq!(r["at_size"]["fits"].as_bool(), Some(true));
        assert_eq!(r["next_size"]["fits"].as_bool(), Some(false));
        // the answer is what `estimate` says at that batch and length
        let e = crate::estimate_json(&[
            "gpt2",
            "--seq-len",
            &r["seq_len"].to_string(),
            "-b",
            &r["batch_size"].to_string(),
            "--optimizer",
            "adamw",
        ]);
        assert_eq!(e["peak"]["reserved_bytes"], r["at_size"]["reserved_bytes"]);
    }
    assert_eq!(
        v["longest_seq_len_at_batch_size_1"]["size"].as_u64(),
        Some(1024)
    );

    let out = crate::vramscope(&["fit", "resnet50", "--gpu", "t4", "--search", "seq-len"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("`resnet50` is not one"));
}

/// `tricks` in inference speaks of inference: data parallelism without DDP's gradients, `del
/// out` without a loss, precision costs without loss scaling or lost updates.
#[test]
fn tricks_in_inference_name_no_training_machinery() {
    let rows = crate::vramscope_json(&[
        "tricks",
        "gpt2",
        "--seq-len",
        "128",
        "-b",
        "8",
        "--mode",
        "infer",
        "--gpus",
        "2",
        "--json",
    ]);
    let text = rows.to_string();
    for training in [
        "DDP",
        "loss.item()",
        "GradScaler",
        "Kahan",
        "del out, loss",
        "ZeRO",
    ] {
        assert!(!text.contains(training), "{training} in an inference row");
    }
    let names: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert!(
        names.contains(&"data parallel over 2 GPUs (batch 4 per GPU)"),
        "{names:?}"
    );
}

/// `tricks` on a transformer's training step offers its own remedies, each re-simulated exactly
/// as `estimate` with the flag (`--gradient-checkpointing`, `--lora 16`, `--qlora 16`; in
/// inference `--load-in-4bit`), none of them over a step that already uses it.
#[test]
fn tricks_offer_a_transformers_checkpointing_lora_and_qlora() {
    let cfg = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/hf/configs/qwen2_small_2l.json"
    );
    let step = [
        cfg,
        "--seq-len",
        "128",
        "-b",
        "2",
        "--precision",
        "amp-bf16",
    ];
    let tricks = |extra: &[&str]| {
        let mut args = vec!["tricks"];
        args.extend_from_slice(&step);
        args.extend_from_slice(extra);
        args.push("--json");
        let rows = crate::vramscope_json(&args);
        rows.as_array().unwrap().clone()
    };
    let fine_tuning = |rows: &[serde_json::Value], kind: &str| {
        rows.iter()
            .find(|r| {
                let c = &r["change"]["FineTuning"];
                c == kind || c.get(kind).is_some()
            })
            .cloned()
    };
    let rows = tricks(&[]);
    for (kind, flag) in [
        ("GradientCheckpointing", &["--gradient-checkpointing"][..]),
        ("Lora", &["--lora", "16"][..]),
        ("Qlora", &["--qlora", "16"][..]),
    ] {
        let row = fine_tuning(&rows, kind).unwrap_or_else(|| panic!("no {kind} row"));
        let mut args = step.to_vec();
        args.extend_from_slice(flag);
        let direct = estimate_json(&args);
        assert_eq!(
            row["after"]["reserved_bytes"], direct["peak"]["reserved_bytes"],
            "{kind}"
        );
        assert_eq!(
            row["after"]["allocated_bytes"], direct["peak"]["allocated_bytes"],
            "{kind}"
        );
    }
    // already made: not offered again
    let rows = tricks(&["--gradient-checkpointing", "--lora", "8"]);
    for kind in ["GradientCheckpointing", "Lora", "Qlora"] {
        assert!(fine_tuning(&rows, kind).is_none(), "{kind} offered again");
    }
    // in inference: the weights in 4 bits, the training remedies left out
    let rows = tricks(&["--mode", "infer"]);
    let four_bit = fine_tuning(&rows, "LoadIn4bit").expect("a 4-bit row in inference");
    let mut args = step.to_vec();
    args.extend_from_slice(&["--mode", "infer", "--load-in-4bit"]);
    let direct = estimate_json(&args);
    assert_eq!(
        four_bit["after"]["reserved_bytes"],
        direct["peak"]["reserved_bytes"]
    );
    for kind in ["GradientCheckpointing", "Lora", "Qlora"] {
        assert!(fine_tuning(&rows, kind).is_none(), "{kind} in inference");
    }
    // a checkpoint saved in 4 bits: no 4-bit loading or QLoRA offered on top
    let mut saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(cfg).unwrap()).unwrap();
    saved["quantization_config"] = serde_json::json!({"quant_method": "bitsandbytes",
        "load_in_4bit": true, "bnb_4bit_quant_type": "nf4"});
    let path = crate::scratch("tricks-4bit").join("config.json");
    std::fs::write(&path, saved.to_string()).unwrap();
    let path = path.to_string_lossy().to_string();
    for mode in ["train", "infer"] {
        let rows = crate::vramscope_json(&[
            "tricks",
            &path,
            "--seq-len",
            "128",
            "-b",
            "2",
            "--mode",
            mode,
            "--json",
        ]);
        let rows = rows.as_array().unwrap();
        for kind in ["LoadIn4bit", "Qlora"] {
            assert!(
                fine_tuning(rows, kind).is_none(),
                "{kind} over a 4-bit checkpoint"
            );
        }
    }
}

/// When not even the smallest size fits, `fit` says so and points at `tricks`.
#[test]
fn fit_that_fails_points_at_tricks() {
    let out = crate::vramscope(&[
        "fit",
        "llama-3-8b",
        "--seq-len",
        "2048",
        "--precision",
        "amp-bf16",
        "--optimizer",
        "adamw",
        "--gpu",
        "h100",
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("nothing fits"), "{text}");
    assert!(text.contains("`vramscope tricks`"), "{text}");
    // and `tricks` takes the same flags (`--gpu`, `--margin` included) at batch size 1
    let rows = crate::vramscope_json(&[
        "tricks",
        "llama-3-8b",
        "--seq-len",
        "2048",
        "-b",
        "1",
        "--precision",
        "amp-bf16",
        "--optimizer",
        "adamw",
        "--gpu",
        "h100",
        "--margin",
        "5%",
        "--json",
    ]);
    let rows = rows.as_array().unwrap();
    assert_eq!(rows[0]["before"]["fits"], false);
    // LoRA brings an 8B model's training onto one H100
    let lora = rows
        .iter()
        .find(|r| r["change"]["FineTuning"].get("Lora").is_some())
        .expect("a LoRA row");
    assert_eq!(lora["after"]["fits"], true, "{lora}");
}

/// An estimate that does not fit its `--gpu` says what to run next; one that fits does not, and
/// the largest tensors name their category as the breakdown does.
#[test]
fn estimate_that_does_not_fit_points_at_tricks() {
    let args = |gpu: &'static str| {
        [
            "estimate",
            "llama-3-8b",
            "--seq-len",
            "2048",
            "-b",
            "1",
            "--precision",
            "amp-bf16",
            "--optimizer",
            "adamw",
            "--gpu",
            gpu,
        ]
    };
    let out = crate::vramscope(&args("a100"));
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("does NOT fit on A100 40GB"), "{text}");
    assert!(
        text.contains(
            "what to change: `vramscope tricks` with the same model and flags (--gpu included)"
        ),
        "{text}"
    );
    assert!(text.contains("┆ optimizer states ┆"), "{text}");
    let out = crate::vramscope(&["estimate", "resnet18", "-b", "8", "--gpu", "h100"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("fits on H100"), "{text}");
    assert!(!text.contains("what to change"), "{text}");
}

/// `tricks --gpu` (DESIGN.md's `vramscope tricks vit_b_16 --batch-size 128 --gpu v100-16gb`)
/// says whether the step fits as given and after each simulated trick, in the text and the JSON
/// (`fits` in `before` / `after`, absent without `--gpu` and on rows with nothing simulated);
/// bf16 rows on a GPU without bf16 tensor cores say what it costs there.
#[test]
fn tricks_on_a_gpu_say_what_fits() {
    let args = [
        "tricks",
        "vit_b_16",
        "--batch-size",
        "128",
        "--gpu",
        "v100-16gb",
    ];
    let out = crate::vramscope(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("on V100 16GB (15.78 GiB), margin 5%: device memory may use 14.99 GiB; as given the step does NOT fit"),
        "{text}"
    );
    assert!(text.contains("┆ fits ┆"), "{text}");
    let mut json_args = args.to_vec();
    json_args.push("--json");
    let rows = crate::vramscope_json(&json_args);
    let rows = rows.as_array().unwrap();
    for r in rows {
        assert_eq!(r["before"]["fits"], false, "{r}");
        let after = &r["after"];
        assert_eq!(after.is_null(), after["fits"].is_null(), "{r}");
        // a row fits exactly when `estimate` of its change says so (checked on two rows)
    }
    let fits = |name: &str| {
        rows.iter()
            .find(|r| r["name"].as_str().unwrap().starts_with(name))
            .unwrap_or_else(|| panic!("no row {name}"))["after"]["fits"]
            .clone()
    };
    assert_eq!(fits("evaluate under torch.no_grad()"), true);
    assert_eq!(fits("optimizer sgd"), false);
    let bf16 = rows
        .iter()
        .find(|r| r["name"] == "precision amp-bf16")
        .unwrap();
    assert!(
        bf16["cost"]
            .as_str()
            .unwrap()
            .contains("compute capability 7.0"),
        "{bf16}"
    );
    // without --gpu: no verdicts
    let rows = crate::vramscope_json(&["tricks", "vit_b_16", "--batch-size", "128", "--json"]);
    assert!(rows
        .as_array()
        .unwrap()
        .iter()
        .all(|r| r["before"].get("fits").is_none()));
}

/// `config.checkpoint` names the modules really checkpointed, `--gradient-checkpointing`'s
/// layers included; `config.padded` is there for Hugging Face models only; the text header says
/// both.
#[test]
fn config_names_checkpointed_layers_and_padding() {
    let cfg = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/hf/configs/qwen2_small_2l.json"
    );
    let step = [cfg, "--seq-len", "64", "-b", "2"];
    let json =
        crate::estimate_json(&[&step[..], &["--gradient-checkpointing", "--padded"]].concat());
    assert_eq!(
        json["config"]["checkpoint"],
        serde_json::json!(["model.layers.0", "model.layers.1"])
    );
    assert_eq!(json["config"]["padded"], true);
    assert_eq!(crate::estimate_json(&step)["config"]["padded"], false);
    let vision = crate::estimate_json(&["resnet18", "--checkpoint", "layer3"]);
    assert_eq!(
        vision["config"]["checkpoint"],
        serde_json::json!(["layer3"])
    );
    assert!(
        vision["config"].get("padded").is_none(),
        "{}",
        vision["config"]
    );
    let out = crate::vramscope(
        &[
            &["estimate"][..],
            &step,
            &["--gradient-checkpointing", "--padded"],
        ]
        .concat(),
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let header = text.lines().next().unwrap_or_default();
    assert!(
        header.contains(", padded") && header.contains("checkpointing 2 modules"),
        "{header}"
    );
    // `fit` names the step the same way, a transformer's many layers counted, not listed
    let out = crate::vramscope(&[
        "fit",
        "llama-3.2-1b",
        "--gpu",
        "a100",
        "--seq-len",
        "256",
        "--gradient-checkpointing",
        "--padded",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    let header = text.lines().next().unwrap_or_default();
    assert!(
        header.starts_with(
            "llama-3.2-1b (train, fp32, padded, sgd-momentum, checkpointing 16 modules)"
        ),
        "{header}"
    );
}

/// A 4-bit load of an MoE model says on stderr that its fused experts stay unquantized (what
/// transformers 5 does), once, and stdout stays one JSON object; a dense model gets no note.
#[test]
fn four_bit_moe_notes_its_unquantized_experts_on_stderr() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/hf/configs/");
    let run = |config: &str| {
        let path = format!("{root}{config}");
        let out = crate::vramscope(&[
            "estimate",
            &path,
            "--seq-len",
            "64",
            "-b",
            "1",
            "--qlora",
            "8",
            "--json",
        ]);
        assert!(out.status.success(), "{config}");
        let _: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
        String::from_utf8(out.stderr).unwrap()
    };
    let moe = run("mixtral_small_2l.json");
    assert_eq!(
        moe.matches("note: 4-bit loading leaves").count(),
        1,
        "{moe}"
    );
    assert!(
        moe.contains("model.layers.0.mlp.experts.gate_up_proj")
            && moe.contains("bitsandbytes issue #1849"),
        "{moe}"
    );
    assert!(!run("llama32_1b_2l.json").contains("note: 4-bit loading"));
}

/// `sdpa_backends` names the kernels PyTorch runs on an H100, head dims included, and the math
/// fallback (whose scores grow with the square of the sequence) comes with a note on stderr.
#[test]
fn sdpa_backends_follow_the_head_dim() {
    let config = |name: &str| {
        format!(
            "{}/../../fixtures/hf/configs/{name}.json",
            env!("CARGO_MANIFEST_DIR")
        )
    };
    let cases = [
        ("llama_head_dim_12", "amp-bf16", "flash"),
        ("llama_head_dim_12", "fp32", "efficient"),
        ("llama_head_dim_6", "fp32", "math"),
        ("qwen2_head_dim_264", "amp-bf16", "efficient"),
        ("gpt2_head_dim_10", "fp32", "math"),
    ];
    for (name, precision, backend) in cases {
        let path = config(name);
        let args = [
            "estimate",
            &path,
            "--seq-len",
            "64",
            "-b",
            "2",
            "--precision",
            precision,
        ];
        let out = crate::vramscope(&[&args[..], &["--json"]].concat());
        assert!(out.status.success(), "{name} {precision}");
        let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            r["sdpa_backends"],
            serde_json::json!([backend]),
            "{name} {precision}"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            stderr.contains("SDPA math fallback"),
            backend == "math",
            "{name} {precision}: {stderr}"
        );
    }
}

/// `tricks` says when half precision takes attention off the math fallback (a float32 head dim
/// of 6 runs it; flash attention pads it in bf16), and only then.
#[test]
fn precision_tricks_name_the_math_fallback_they_leave() {
    let note_of = |name: &str| {
        let path = format!(
            "{}/../../fixtures/hf/configs/{name}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let args = [
            "tricks",
            &path,
            "--seq-len",
            "256",
            "-b",
            "2",
            "--precision",
            "fp32",
            "--json",
        ];
        let rows = crate::vramscope_json(&args);
        let row = rows
            .as_array()
            .and_then(|r| r.iter().find(|t| t["name"] == "precision amp-bf16"))
            .cloned()
            .expect("an amp-bf16 row");
        row["note"].as_str().unwrap_or_default().to_string()
    };
    assert!(note_of("llama_head_dim_6").contains("math fallback"));
    assert!(!note_of("llama_head_dim_12").contains("math fallback"));
}
