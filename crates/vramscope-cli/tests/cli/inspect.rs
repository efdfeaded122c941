//! `vramscope inspect` on the committed weight fixtures (fixtures/weights/, made by
//! validation/make_weight_fixtures.py): snapshots of the inventory tables, the JSON and the error
//! message of every corrupt variant. Runs from the repository root so printed paths are stable.

use std::path::Path;
use std::process::{Command, Output};

fn inspect(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .arg("inspect")
        .args(args)
        .current_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."))
        .output()
        .expect("the vramscope binary runs")
}

fn stdout(args: &[&str]) -> String {
    let out = inspect(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn inspect_single_safetensors() {
    insta::assert_snapshot!(stdout(&["fixtures/weights/tiny.safetensors"]));
}

#[test]
fn inspect_sharded_folder() {
    let folder = stdout(&["fixtures/weights/sharded"]);
    // the index json itself gives the same inventory
    assert_eq!(
        folder,
        stdout(&["fixtures/weights/sharded/model.safetensors.index.json"])
    );
    insta::assert_snapshot!(folder);
}

#[test]
fn inspect_gguf() {
    insta::assert_snapshot!(stdout(&["fixtures/weights/tiny.gguf"]));
}

#[test]
fn inspect_gguf_json() {
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&["fixtures/weights/tiny-v2.gguf", "--json"])).expect("JSON");
    let total: u64 = json["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(json["bytes"], total);
    insta::assert_json_snapshot!(json);
}

/// A checkpoint saved in bitsandbytes 4-bit (fixtures/weights/llama-bnb4): the packed weights
/// count two parameters a byte, as transformers' `num_parameters()` reports for the loaded model
/// (90,432), and the quantization state and its CPU-side JSON are told apart.
#[test]
fn inspect_bnb_4bit_checkpoint() {
    let text = stdout(&["fixtures/weights/llama-bnb4"]);
    assert!(
        text.contains("bitsandbytes 4-bit (nf4): 90432 parameters as transformers counts them"),
        "{text}"
    );
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&["fixtures/weights/llama-bnb4", "--json"])).expect("JSON");
    let q = &json["bitsandbytes_4bit"];
    assert_eq!(q["parameters"], 90_432);
    assert_eq!(q["packed_tensors"], 14);
    assert_eq!(q["state_tensors"], 56);
    // what vramscope loads onto the device for them (the estimate's quantization state)
    assert_eq!(q["state_bytes"].as_u64().unwrap() + 14 * 4, 16_496);
    // an unquantized checkpoint has no such entry
    let plain: serde_json::Value =
        serde_json::from_str(&stdout(&["fixtures/weights/sharded", "--json"])).expect("JSON");
    assert!(plain.get("bitsandbytes_4bit").is_none());
}

#[test]
fn inspect_safetensors_json_totals() {
    let json: serde_json::Value =
        serde_json::from_str(&stdout(&["fixtures/weights/sharded", "--json"])).expect("JSON");
    assert_eq!(json["format"], "safetensors");
    assert_eq!(json["parameters"], 6736);
    assert_eq!(json["by_dtype"]["BF16"]["bytes"], 13472);
    assert_eq!(json["files"].as_array().unwrap().len(), 2);
}

#[test]
fn inspect_error_messages() {
    let mut cases: Vec<String> = std::fs::read_dir(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/weights/corrupt"),
    )
    .expect("corrupt fixtures")
    .map(|e| {
        format!(
            "fixtures/weights/corrupt/{}",
            e.unwrap().file_name().to_string_lossy()
        )
    })
    .collect();
    cases.sort();
    cases.extend([
        "fixtures/weights/missing.safetensors".into(),
        "Cargo.toml".into(),
        "crates".into(),
    ]);
    let mut text = String::new();
    for case in &cases {
        let out = inspect(&[case]);
        assert!(!out.status.success(), "{case} should fail");
        assert!(out.stdout.is_empty(), "{case}: nothing printed on stdout");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(case.as_str()),
            "{case}: the error names the file: {err}"
        );
        text.push_str(&err);
    }
    insta::assert_snapshot!(text);
}
