//! `--weights-dtype from-files`: parameter dtypes from a model folder's safetensors headers
//! (fixtures/weights/llama-*, made by validation/make_weight_fixtures.py), read from headers alone.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::{estimate_json, vramscope};

fn fixture(rel: &str) -> String {
    format!(
        "{}/../../fixtures/weights/{rel}",
        env!("CARGO_MANIFEST_DIR")
    )
}

/// Exact bytes of the tensors a safetensors file's header lists (8-byte length, then JSON).
fn header_bytes(path: &Path) -> u64 {
    let data = std::fs::read(path).expect("fixture");
    let n = u64::from_le_bytes(data[..8].try_into().expect("8 bytes")) as usize;
    let header: Value = serde_json::from_slice(&data[8..8 + n]).expect("header json");
    header
        .as_object()
        .expect("object")
        .iter()
        .filter(|(k, _)| *k != "__metadata__")
        .map(|(_, v)| {
            v["data_offsets"][1].as_u64().unwrap() - v["data_offsets"][0].as_u64().unwrap()
        })
        .sum()
}

fn infer(folder: &str, extra: &[&str]) -> Value {
    let dir = fixture(folder);
    let mut args = vec![
        dir.as_str(),
        "--seq-len",
        "256",
        "-b",
        "4",
        "--mode",
        "infer",
    ];
    args.extend_from_slice(extra);
    estimate_json(&args)
}

#[test]
fn a_bf16_checkpoint_runs_in_bf16_and_holds_exactly_its_bytes() {
    let r = infer("llama-bf16", &["--weights-dtype", "from-files"]);
    // no --precision: the files' dtype, as from_pretrained(dtype="auto")
    assert_eq!(r["config"]["precision"], "bf16");
    let file = header_bytes(&PathBuf::from(fixture("llama-bf16/model.safetensors")));
    assert_eq!(r["model"]["parameter_bytes"].as_u64(), Some(file));
    // the same as telling the precision
    let by_flag = infer("llama-bf16", &["--precision", "bf16"]);
    assert_eq!(r["peak"], by_flag["peak"]);
    // without the flag, --precision decides (fp32 by default): twice the bytes
    let fp32 = infer("llama-bf16", &[]);
    assert_eq!(fp32["model"]["parameter_bytes"].as_u64(), Some(2 * file));
}

#[test]
fn mixed_dtypes_are_kept_tensor_by_tensor() {
    let r = infer(
        "llama-mixed",
        &["--weights-dtype", "from-files", "--precision", "amp-bf16"],
    );
    let file = header_bytes(&PathBuf::from(fixture("llama-mixed/model.safetensors")));
    assert_eq!(r["model"]["parameter_bytes"].as_u64(), Some(file));
    let bf16 = infer("llama-bf16", &["--weights-dtype", "from-files"]);
    assert!(r["model"]["parameter_bytes"].as_u64() > bf16["model"]["parameter_bytes"].as_u64());
}

#[test]
fn names_that_do_not_line_up_are_warned_about() {
    let dir = fixture("llama-partial");
    let out = vramscope(&[
        "estimate",
        &dir,
        "--seq-len",
        "64",
        "--mode",
        "infer",
        "--weights-dtype",
        "from-files",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("1 parameter(s) of the model are not in") && err.contains("lm_head.weight"),
        "{err}"
    );
    assert!(
        err.contains("match no parameter") && err.contains("rotary_emb.inv_freq"),
        "{err}"
    );
    // mixing dtypes without autocast is flagged too
    let out = vramscope(&[
        "estimate",
        &fixture("llama-mixed"),
        "--seq-len",
        "64",
        "--weights-dtype",
        "from-files",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("the weights mix"), "{err}");
}

#[test]
fn wrong_shapes_and_missing_files_are_errors_naming_the_tensor() {
    let cases: [(String, &[&str]); 3] = [
        (
            fixture("llama-wrong-shape"),
            &[
                "model.layers.0.mlp.gate_proj.weight",
                "shape [32, 16] in the file",
                "[48, 16]",
            ],
        ),
        (
            format!(
                "{}/../../fixtures/hf/configs/qwen2_small_2l.json",
                env!("CARGO_MANIFEST_DIR")
            ),
            &["--weights-dtype from-files", "expected model.safetensors"],
        ),
        (
            "resnet18".to_string(),
            &["--weights-dtype from-files", "not one"],
        ),
    ];
    for (model, needles) in cases {
        let out = vramscope(&[
            "estimate",
            &model,
            "--seq-len",
            "64",
            "--weights-dtype",
            "from-files",
        ]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{model}: {err}");
        assert!(!err.contains("panicked"), "{err}");
        for n in needles {
            assert!(err.contains(n), "{model}: expected {n:?} in {err}");
        }
    }
}

struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A 2-layer Llama with Llama-3-70B's widths: config.json and a 7.6 GB model.safetensors whose data
/// is never written (a sparse file), read through the header-only reader.
#[test]
fn a_sparse_multi_gigabyte_checkpoint_is_estimated_from_its_header() {
    let dir = TempDir(
        std::env::temp_dir().join(format!("vramscope-{}-sparse-llama", std::process::id())),
    );
    std::fs::create_dir_all(&dir.0).expect("temp dir");
    let (h, i, v, kv) = (8192u64, 28672u64, 128256u64, 1024u64);
    let config = serde_json::json!({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": h,
        "intermediate_size": i, "num_hidden_layers": 2, "num_attention_heads": 64,
        "num_key_value_heads": 8, "vocab_size": v, "max_position_embeddings": 8192,
        "hidden_act": "silu", "tie_word_embeddings": false, "rms_norm_eps": 1e-5
    });
    std::fs::write(dir.0.join("config.json"), config.to_string()).expect("config");
    let mut shapes: Vec<(String, Vec<u64>)> =
        vec![("model.embed_tokens.weight".into(), vec![v, h])];
    for l in 0..2 {
        let p = format!("model.layers.{l}");
        shapes.push((format!("{p}.input_layernorm.weight"), vec![h]));
        shapes.push((format!("{p}.self_attn.q_proj.weight"), vec![h, h]));
        shapes.push((format!("{p}.self_attn.k_proj.weight"), vec![kv, h]));
        shapes.push((format!("{p}.self_attn.v_proj.weight"), vec![kv, h]));
        shapes.push((format!("{p}.self_attn.o_proj.weight"), vec![h, h]));
        shapes.push((format!("{p}.post_attention_layernorm.weight"), vec![h]));
        shapes.push((format!("{p}.mlp.gate_proj.weight"), vec![i, h]));
        shapes.push((format!("{p}.mlp.up_proj.weight"), vec![i, h]));
        shapes.push((format!("{p}.mlp.down_proj.weight"), vec![h, i]));
    }
    shapes.push(("model.norm.weight".into(), vec![h]));
    shapes.push(("lm_head.weight".into(), vec![v, h]));
    let mut header = serde_json::Map::new();
    let mut at = 0u64;
    for (name, shape) in &shapes {
        let bytes = shape.iter().product::<u64>() * 2;
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": "BF16", "shape": shape, "data_offsets": [at, at + bytes]}),
        );
        at += bytes;
    }
    let mut text = serde_json::to_vec(&header).expect("json");
    while !text.len().is_multiple_of(8) {
        text.push(b' ');
    }
    let mut f = std::fs::File::create(dir.0.join("model.safetensors")).expect("file");
    f.write_all(&(text.len() as u64).to_le_bytes())
        .expect("write");
    f.write_all(&text).expect("write");
    f.set_len(8 + text.len() as u64 + at).expect("sparse");
    drop(f);
    let path = dir.0.to_string_lossy().into_owned();
    let r = estimate_json(&[
        &path,
        "--seq-len",
        "128",
        "-b",
        "1",
        "--mode",
        "infer",
        "--weights-dtype",
        "from-files",
    ]);
    assert_eq!(r["model"]["parameter_bytes"].as_u64(), Some(at));
    assert_eq!(r["config"]["precision"], "bf16");
}

/// A checkpoint saved already quantized (fixtures/weights/llama-bnb4: the tiny Llama loaded with
/// bitsandbytes NF4 and double quantization on the CPU and saved again, as unsloth's `-bnb-4bit`
/// repositories are) loads 4-bit unasked, as `from_pretrained` does: transformers 5.23 then holds
/// 53,568 parameters in 70,272 bytes and 16,496 bytes of quantization state (`quant_state`'s
/// absmax, code, state2.absmax, state2.code and offset of its 14 `Linear4bit`s), all of which
/// the files name; only their packed JSON `quant_state.bitsandbytes__nf4` stays on the CPU.
#[test]
fn a_checkpoint_saved_in_4bit_loads_its_packed_weights_and_state() {
    let from_files = ["--weights-dtype", "from-files"];
    let r = infer("llama-bnb4", &from_files);
    assert_eq!(r["model"]["parameters"], 53_568);
    assert_eq!(r["model"]["parameter_bytes"], 70_272);
    // the quantization state plus the rotary embedding's two inverse frequencies, float32 as
    // transformers makes them (32 + 32 bytes)
    assert_eq!(r["model"]["buffer_bytes"], 16_496 + 64);
    // every file tensor is matched (no warning), and the layers are 4-bit
    let dir = fixture("llama-bnb4");
    let out = vramscope(&[
        "estimate",
        &dir,
        "--seq-len",
        "64",
        from_files[0],
        from_files[1],
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !err.contains("warning"), "{err}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("Linear4bit"));
    // from the config alone: the same 4-bit layers, where the unquantized model holds 2.6 times the bytes
    let config_only = infer("llama-bnb4/config.json", &["--precision", "bf16"]);
    assert_eq!(config_only["model"]["parameter_bytes"], 70_272);
    let unquantized = infer("llama-bf16", &from_files);
    assert_eq!(unquantized["model"]["parameter_bytes"], 180_864);
}

/// `--qlora R` on a checkpoint saved in 4-bit adds the adapters to its 4-bit layers (no second
/// quantization), and `--double-quant` cannot contradict what the checkpoint saved.
#[test]
fn qlora_on_a_4bit_checkpoint_keeps_its_quantization() {
    let dir = fixture("llama-bnb4");
    let r = estimate_json(&[
        &dir,
        "--seq-len",
        "64",
        "-b",
        "1",
        "--qlora",
        "8",
        "--precision",
        "amp-bf16",
    ]);
    // q_proj (64 -> 64) and v_proj (64 -> 32) of 2 layers: A [8, in] and B [out, 8] each
    let adapters = 2 * ((64 + 64) * 8 + (64 + 32) * 8);
    assert_eq!(r["model"]["trainable_parameters"], adapters);
    assert_eq!(r["model"]["parameters"], 53_568 + adapters);
    // the packed weights and their state as saved; the embeddings, head and norms (33,408
    // bytes in bfloat16) in amp-bf16's float32; float32 adapters
    assert_eq!(
        r["model"]["parameter_bytes"],
        70_272 + 33_408 + 4 * adapters
    );
    let out = vramscope(&[
        "estimate",
        &format!("{dir}/config.json"),
        "--seq-len",
        "64",
        "--load-in-4bit",
        "--double-quant",
    ]);
    assert!(out.status.success());
    let saved_without = tempdir_config(&dir, |q| {
        q["bnb_4bit_use_double_quant"] = false.into();
    });
    let out = vramscope(&[
        "estimate",
        &saved_without,
        "--seq-len",
        "64",
        "--double-quant",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("bnb_4bit_use_double_quant = false"), "{err}");
}

/// The fixture's config.json with its `quantization_config` changed by `edit`, written to a
/// temporary file; returns its path.
fn tempdir_config(dir: &str, edit: impl Fn(&mut Value)) -> String {
    let text = std::fs::read_to_string(format!("{dir}/config.json")).expect("config");
    let mut cfg: Value = serde_json::from_str(&text).expect("json");
    edit(&mut cfg["quantization_config"]);
    let path =
        std::env::temp_dir().join(format!("vramscope-bnb4-{}-config.json", std::process::id()));
    std::fs::write(&path, cfg.to_string()).expect("write");
    path.display().to_string()
}
