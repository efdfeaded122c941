//! `vramscope watch` and `vramscope run` without a GPU: a scripted fake GPU
//! (`VRAMSCOPE_FAKE_GPU`), real child processes for exit codes, and a missing NVML library for the
//! no-driver error.

use std::path::{Path, PathBuf};

use crate::scratch;
use std::process::{Command, Output};

use serde_json::Value;

const GIB: u64 = 1 << 30;

/// Runs vramscope with the fake GPU script `script` (or, with `None`, an NVML library that does
/// not exist: no driver, whatever the machine has).
fn monitor(script: Option<&Path>, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_vramscope"));
    c.args(args).env_remove("VRAMSCOPE_FAKE_GPU");
    match script {
        Some(p) => c.env("VRAMSCOPE_FAKE_GPU", p),
        None => c.env("VRAMSCOPE_NVML_LIB", "/nonexistent/libnvidia-ml.so.1"),
    };
    c.output().expect("the vramscope binary runs")
}

fn gpu(used_gib: u64, procs: &[(u32, Option<u64>)]) -> Value {
    serde_json::json!({
        "index": 0, "name": "NVIDIA H100 80GB HBM3",
        "memory_used_bytes": used_gib * GIB, "memory_total_bytes": 80 * GIB,
        "utilization_percent": 41, "temperature_c": 38, "power_milliwatts": 312_000,
        "processes": procs.iter().map(|(pid, b)| serde_json::json!({"pid": pid, "used_bytes": b}))
            .collect::<Vec<_>>(),
    })
}

/// Writes a script: one sample per entry, each with the GPU above and a second GPU that reports
/// nothing but its index.
fn script(dir: &Path, samples: &[Value]) -> PathBuf {
    let ticks: Vec<Value> = samples
        .iter()
        .map(|g| serde_json::json!([g, {"index": 1}]))
        .collect();
    let p = dir.join("script.json");
    std::fs::write(&p, serde_json::to_string(&ticks).unwrap()).unwrap();
    p
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn no_driver_is_a_clear_error_for_every_command() {
    let dir = scratch("nodriver");
    let marker = dir.join("ran");
    let marker_cmd = format!("touch {}", marker.display());
    let cases: [&[&str]; 4] = [
        &["watch", "--once"],
        &["watch", "--once", "--json"],
        &["watch", "--count", "2"],
        &["run", "--", "sh", "-c", &marker_cmd],
    ];
    let mut messages = Vec::new();
    for args in cases {
        let o = monitor(None, args);
        let e = err(&o);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {e}");
        assert!(!e.contains("panicked"), "{args:?}: {e}");
        assert!(o.stdout.is_empty(), "{args:?}");
        messages.push(e);
    }
    assert!(
        !marker.exists(),
        "run must not start the command without a driver"
    );
    assert!(messages.windows(2).all(|w| w[0] == w[1]), "{messages:?}");
    insta::assert_snapshot!(messages[0]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn watch_once_json_reports_values_nulls_and_processes() {
    let dir = scratch("watchjson");
    let me = std::process::id();
    let gone = 4_194_305; // above Linux's largest pid_max: never a live process
    let s = script(&dir, &[gpu(12, &[(me, Some(10 * GIB)), (gone, None)])]);
    let o = monitor(Some(&s), &["watch", "--once", "--json"]);
    assert!(o.status.success(), "{}", err(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["source"].as_str().unwrap().contains("script.json"));
    let g0 = &v["gpus"][0];
    assert_eq!(g0["memory_used_bytes"], 12 * GIB);
    assert_eq!(g0["memory_total_bytes"], 80 * GIB);
    assert_eq!(g0["power_milliwatts"], 312_000);
    let p = &g0["processes"];
    assert_eq!(p[0]["pid"], me);
    assert_eq!(p[0]["used_bytes"], 10 * GIB);
    if p[0]["unresolved"].is_null() {
        let exe = std::env::current_exe().unwrap();
        let name = exe.file_name().unwrap().to_str().unwrap();
        assert!(p[0]["command"].as_str().unwrap().contains(name), "{p}");
        assert!(p[0]["user"].is_string());
    } else {
        assert_eq!(p[0]["unresolved"], "other PID namespace");
    }
    assert_eq!(p[1]["used_bytes"], Value::Null);
    assert_eq!(p[1]["command"], Value::Null);
    assert!(p[1]["unresolved"].is_string());
    // the second GPU reports nothing: nulls, not zeros
    let g1 = &v["gpus"][1];
    for k in [
        "name",
        "memory_used_bytes",
        "utilization_percent",
        "temperature_c",
    ] {
        assert_eq!(g1[k], Value::Null, "{k}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn watch_text_refreshes_and_marks_what_is_unknown() {
    let dir = scratch("watchtext");
    let s = script(&dir, &[gpu(40, &[(4_194_305, Some(GIB))]), gpu(20, &[])]);
    let o = monitor(Some(&s), &["watch", "--interval", "10ms", "--count", "3"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", err(&o));
    assert_eq!(out.matches("vramscope watch ·").count(), 3, "{out}");
    assert!(out.contains("40.00 GiB / 80.00 GiB"), "{out}");
    assert!(out.contains("20.00 GiB / 80.00 GiB"), "{out}");
    assert!(
        out.contains("██████████░░░░░░░░░░"),
        "a half-full bar: {out}"
    );
    assert!(out.contains("38°C") && out.contains("312 W") && out.contains("41%"));
    assert!(out.contains("? (exited)") || out.contains("? (other PID namespace)"));
    assert!(out.contains("n/a / n/a"), "the second GPU: {out}");
    // one JSON object per line
    let o = monitor(
        Some(&s),
        &["watch", "--interval", "10ms", "--count", "2", "--json"],
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[1]["gpus"][0]["memory_used_bytes"], 20 * GIB);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn run_forwards_the_exit_code() {
    let dir = scratch("exit");
    let s = script(&dir, &[gpu(1, &[])]);
    for (cmd, code) in [
        ("exit 0", 0),
        ("exit 3", 3),
        ("exit 255", 255),
        ("kill -9 $$", 137),
    ] {
        let o = monitor(Some(&s), &["run", "--", "sh", "-c", cmd]);
        assert_eq!(o.status.code(), Some(code), "{cmd}: {}", err(&o));
        assert!(
            err(&o).contains(&format!("exited with code {code}")),
            "{}",
            err(&o)
        );
    }
    let o = monitor(Some(&s), &["run", "--", "/nonexistent/command"]);
    assert_eq!(o.status.code(), Some(127));
    assert!(
        err(&o).contains("starting `/nonexistent/command`"),
        "{}",
        err(&o)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn run_reports_peak_baseline_and_samples() {
    let dir = scratch("runjson");
    // baseline 2 GiB; the command's device memory rises to 11 GiB, then falls
    let s = script(
        &dir,
        &[
            gpu(2, &[]),
            gpu(3, &[]),
            gpu(7, &[]),
            gpu(11, &[]),
            gpu(4, &[]),
            gpu(2, &[]),
        ],
    );
    let o = monitor(
        Some(&s),
        &[
            "run",
            "--interval",
            "20ms",
            "--json",
            "--",
            "sh",
            "-c",
            "sleep 0.5; exit 4",
        ],
    );
    assert_eq!(o.status.code(), Some(4), "{}", err(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["exit_code"], 4);
    assert_eq!(v["command"][2], "sleep 0.5; exit 4");
    let sum = &v["summary"];
    assert_eq!(sum["attribution"], "device-delta");
    assert_eq!(sum["baseline_device_bytes"], 2 * GIB);
    assert_eq!(sum["peak_bytes"], 9 * GIB);
    assert_eq!(sum["peak_device_used_bytes"], 11 * GIB);
    let samples = v["samples"].as_array().unwrap();
    assert!(
        samples.len() >= 6,
        "{} samples in 0.5 s at 20 ms",
        samples.len()
    );
    let bytes: Vec<u64> = samples
        .iter()
        .map(|s| s["bytes"].as_u64().unwrap() / GIB)
        .collect();
    assert_eq!(bytes[..5], [1, 5, 9, 2, 0]);
    let t: Vec<f64> = samples.iter().map(|s| s["t_s"].as_f64().unwrap()).collect();
    assert!(t.windows(2).all(|w| w[0] <= w[1]) && t[0] >= 0.0);
    assert_eq!(sum["peak_at_s"], t[2]);
    let e = err(&o);
    assert!(e.contains("peak       9.00 GiB at"), "{e}");
    assert!(e.contains("baseline   2.00 GiB"), "{e}");
    assert!(e.contains("change in device memory"), "{e}");
    assert!(e.contains("timeline   ▂▅█▃▁"), "{e}");

    // the same as CSV, into a file
    let csv = dir.join("samples.csv");
    let o = monitor(
        Some(&s),
        &[
            "run",
            "--interval",
            "20ms",
            "--csv",
            "-o",
            csv.to_str().unwrap(),
            "--",
            "true",
        ],
    );
    assert!(o.status.success(), "{}", err(&o));
    assert!(o.stdout.is_empty());
    let text = std::fs::read_to_string(&csv).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("t_s,bytes,process_bytes,device_used_bytes,gpu_processes")
    );
    let first: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(
        first[1..],
        [&GIB.to_string(), "", &(3 * GIB).to_string(), "0"]
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn run_expect_prints_the_prediction_beside_the_measurement() {
    let dir = scratch("expect");
    let s = script(&dir, &[gpu(1, &[]), gpu(2, &[])]);
    let o = monitor(
        Some(&s),
        &[
            "run",
            "--json",
            "--expect",
            "resnet18 -b 8",
            "--",
            "sleep",
            "0.2",
        ],
    );
    assert!(o.status.success(), "{}", err(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    // the same numbers `estimate` prints
    let est = crate::estimate_json(&["resnet18", "-b", "8"]);
    assert_eq!(v["expected"]["device_bytes"], est["peak"]["device_bytes"]);
    assert_eq!(
        v["expected"]["allocated_bytes"],
        est["peak"]["allocated_bytes"]
    );
    let e = err(&o);
    assert!(e.contains("for `estimate resnet18 -b 8`"), "{e}");
    let predicted = est["peak"]["device_bytes"].as_u64().unwrap();
    let pct = 100.0 * (GIB as f64 - predicted as f64) / predicted as f64;
    assert!(e.contains("measured   1.00 GiB: "), "{e}");
    assert!(
        e.contains(&format!("({pct:+.1}% of the prediction)")),
        "{e}"
    );

    // bad --expect arguments: an error before anything runs
    let marker = dir.join("ran");
    let o = monitor(
        Some(&s),
        &[
            "run",
            "--expect",
            "resnet5",
            "--",
            "touch",
            marker.to_str().unwrap(),
        ],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).contains("--expect \"resnet5\""), "{}", err(&o));
    assert!(err(&o).contains("did you mean `resnet50`"), "{}", err(&o));
    assert!(!marker.exists());
    let o = monitor(
        Some(&s),
        &["run", "--expect", "resnet18 --bogus", "--", "true"],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).contains("--bogus"), "{}", err(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_interval_and_bad_script_are_clear_errors() {
    let o = monitor(None, &["watch", "--interval", "fast"]);
    assert_eq!(o.status.code(), Some(2), "clap's usage error");
    assert!(
        err(&o).contains("expected a duration such as 50ms"),
        "{}",
        err(&o)
    );
    let dir = scratch("badscript");
    let p = dir.join("script.json");
    std::fs::write(&p, "{").unwrap();
    let o = monitor(Some(&p), &["watch", "--once"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(err(&o).contains("fake GPU script"), "{}", err(&o));
    std::fs::remove_dir_all(&dir).unwrap();
}
