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
