//! One benchmark case of `benches/estimate.rs` as a plain program, for profilers that want a
//! process rather than divan's loop (docs/performance.md):
//!
//! ```text
//! cargo build --release -p vramscope-formats --example estimate_once
//! valgrind --tool=callgrind target/release/examples/estimate_once llama-3-70b
//! target/release/examples/estimate_once llama-3-70b 50   # wall time, min and median of 50
//! ```
//!
//! A torchvision model is the bench's `train_fp32` case (batch 32, 224×224, AdamW); a built-in
//! transformer config is its `transformer_train_amp_bf16` case (AMP bf16, AdamW, 8 × 1024 for
//! gpt2, 1 × 4096 otherwise).

use std::time::Instant;

use vramscope_core::optim::Optimizer;
use vramscope_core::sim::{simulate, Mode, StepConfig};
use vramscope_core::Precision;
use vramscope_formats::zoo::{self, ZooInput};
use vramscope_formats::{hf, hf_zoo};

/// Builds and simulates `name` once; returns the peak.
fn estimate(name: &str) -> Result<u64, String> {
    let (graph, precision) = match hf_zoo::config(name) {
        Some(text) => {
            let cfg = hf::HfConfig::parse(name, text).map_err(|e| e.to_string())?;
            let (batch, seq) = if name == "gpt2" { (8, 1024) } else { (1, 4096) };
            let input = hf::HfInput::new(batch, seq, Precision::AmpBf16);
            let model = hf::build(&cfg, &input).map_err(|e| e.to_string())?;
            (model.graph, Precision::AmpBf16)
        }
        None => (
            zoo::build(name, &ZooInput::imagenet(32)).map_err(|e| e.to_string())?,
            Precision::Fp32,
        ),
    };
    let step = StepConfig {
        mode: Mode::Train,
        precision,
        optimizer: Optimizer::AdamW,
        ..StepConfig::default()
    };
    let sim = simulate(&graph, &step).map_err(|e| e.to_string())?;
    Ok(sim.peak_allocated)
}

fn main() -> Result<(), String> {
    vramscope_core::heap::tune_for_estimates();
    let mut args = std::env::args().skip(1);
    let name = args.next().ok_or("usage: estimate_once MODEL [RUNS]")?;
    let runs: usize = match args.next() {
        Some(n) => n
            .parse()
            .map_err(|_| format!("RUNS: expected a count, got `{n}`"))?,
        None => 1,
    };
    let mut ms = Vec::with_capacity(runs);
    let mut peak = 0;
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        peak = estimate(&name)?;
        ms.push(t.elapsed().as_secs_f64() * 1e3);
    }
    ms.sort_by(f64::total_cmp);
    println!(
        "{name}: peak {peak} B; {} run(s): min {:.3} ms, median {:.3} ms",
        ms.len(),
        ms[0],
        ms[ms.len() / 2]
    );
    Ok(())
}
