//! Snapshots (insta) of what users and scripts read: the text report, the JSON report and error
//! messages. A change to any of them shows up as a reviewable diff.

use crate::vramscope;

fn stdout(args: &[&str]) -> String {
    let out = vramscope(args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(args: &[&str]) -> String {
    let out = vramscope(args);
    assert!(!out.status.success());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn text_report_resnet18() {
    insta::assert_snapshot!(stdout(&[
        "estimate",
        "resnet18",
        "--batch-size",
        "8",
        "--layers",
        "12"
    ]));
}

#[test]
fn json_report_mobilenet_v3_small_amp() {
    let json: serde_json::Value = serde_json::from_str(&stdout(&[
        "estimate",
        "mobilenet_v3_small",
        "-b",
        "4",
        "--precision",
        "amp-bf16",
        "--optimizer",
        "adamw",
        "--json",
    ]))
    .expect("JSON");
    insta::assert_json_snapshot!(json);
}

#[test]
fn text_report_gpt2_generate() {
    insta::assert_snapshot!(stdout(&[
        "estimate",
        "gpt2",
        "--mode",
        "generate",
        "--prompt-len",
        "512",
        "--new-tokens",
        "64",
        "--batch-size",
        "8",
        "--precision",
        "bf16",
        "--layers",
        "8"
    ]));
}

/// An encoder-decoder's generation: the encoder once, the decoder's self-attention cache by
/// decoder position and its cross-attention cache over the prompt.
#[test]
fn text_report_t5_generate() {
    insta::assert_snapshot!(stdout(&[
        "estimate",
        "t5-small",
        "--mode",
        "generate",
        "--prompt-len",
        "512",
        "--new-tokens",
        "64",
        "--batch-size",
        "8",
        "--precision",
        "bf16",
    ]));
}

#[test]
fn error_messages() {
    let text = [
        stderr(&["estimate", "resnet5"]),
        stderr(&["estimate", "vgg16", "--input", "3x16x16"]),
        stderr(&["estimate", "resnet18", "--checkpoint", "layer9"]),
        stderr(&["estimate", "resnet18", "--precision", "fp8"]),
    ]
    .join("");
    insta::assert_snapshot!(text);
}

#[test]
fn gpu_table() {
    insta::assert_snapshot!(stdout(&["gpus"]));
}

#[test]
fn gpu_table_json() {
    let json: serde_json::Value = serde_json::from_str(&stdout(&["gpus", "--json"])).expect("JSON");
    insta::assert_json_snapshot!(json);
}

#[test]
fn fit_resnet50_t4() {
    insta::assert_snapshot!(stdout(&[
        "fit",
        "resnet50",
        "--gpu",
        "t4",
        "--optimizer",
        "adamw"
    ]));
}

/// A transformer without `--seq-len`: the largest batch per sequence length.
#[test]
fn fit_gpt2_t4_by_sequence_length() {
    insta::assert_snapshot!(stdout(&[
        "fit",
        "gpt2",
        "--gpu",
        "t4",
        "--optimizer",
        "adamw"
    ]));
}

#[test]
fn fit_reverse_vit_b_32() {
    insta::assert_snapshot!(stdout(&["fit", "vit_b_32", "--batch-size", "64"]));
}

#[test]
fn tricks_resnet18() {
    insta::assert_snapshot!(stdout(&[
        "tricks",
        "resnet18",
        "-b",
        "16",
        "--optimizer",
        "adam"
    ]));
}

#[test]
fn advice_error_messages() {
    let text = [
        stderr(&["fit", "resnet18", "--gpu", "h1000"]),
        stderr(&["fit", "resnet18", "--gpu", "t4", "--margin", "120%"]),
        stderr(&["tricks", "resnet5"]),
    ]
    .join("");
    insta::assert_snapshot!(text);
}

#[test]
fn explain_resnet18_adam() {
    let text = stdout(&[
        "estimate",
        "resnet18",
        "-b",
        "4",
        "--optimizer",
        "adam",
        "--explain",
    ]);
    let explain = text
        .split("What each phase allocated and freed")
        .nth(1)
        .expect("--explain prints the per-phase explanation");
    insta::assert_snapshot!(explain);
}
