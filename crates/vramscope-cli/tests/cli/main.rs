//! The one integration-test binary: runs the real `vramscope` executable.

mod accuracy;
mod errors;
mod inspect;
mod json_contract;
mod monitor;
mod snapshots;
mod startup;
mod weights_dtype;

use std::path::PathBuf;
use std::process::{Command, Output};

/// A scratch directory for one test (`vramscope-cli-NAME-PID` in the system's temp dir).
pub fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("vramscope-cli-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Runs `vramscope ARGS...`.
pub fn vramscope(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_vramscope"))
        .args(args)
        .output()
        .expect("the vramscope binary runs")
}

/// Runs `vramscope ARGS...` (which include `--json`), checks it succeeds and parses its output.
pub fn vramscope_json(args: &[&str]) -> serde_json::Value {
    let out = vramscope(args);
    assert!(
        out.status.success(),
        "vramscope {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("--json prints one JSON object")
}

/// Runs `vramscope estimate ARGS... --json` and parses the report.
pub fn estimate_json(args: &[&str]) -> serde_json::Value {
    let mut all = vec!["estimate"];
    all.extend_from_slice(args);
    all.push("--json");
    vramscope_json(&all)
}
