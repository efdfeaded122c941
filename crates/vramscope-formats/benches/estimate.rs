//! Speed of an estimate: building a zoo graph and simulating the two-iteration training step
//! (what `vramscope estimate MODEL` does besides printing). Run: `cargo bench -p vramscope-formats`.
//! Results are recorded in docs/performance.md.

use vramscope_core::optim::Optimizer;
use vramscope_core::sim::{simulate, Mode, StepConfig};
use vramscope_core::Precision;
use vramscope_formats::zoo::{self, ZooInput};

fn main() {
    // as the CLI does: the bench times estimates, not the kernel refilling pages glibc returned
    vramscope_core::heap::tune_for_estimates();
    divan::main();
}

fn estimate(name: &str, mode: Mode, precision: Precision) -> u64 {
    let g = zoo::build(name, &ZooInput::imagenet(32)).expect("zoo model builds");
    let cfg = StepConfig {
        mode,
        precision,
        optimizer: Optimizer::AdamW,
        ..StepConfig::default()
    };
    simulate(&g, &cfg).expect("simulates").peak_allocated
}

#[divan::bench(args = ["resnet50", "resnet152", "vit_l_16", "densenet201", "efficientnet_b7", "swin_t"])]
fn train_fp32(bencher: divan::Bencher, name: &str) {
    if zoo::build(name, &ZooInput::imagenet(1)).is_err() {
        return;
    }
    bencher.bench(|| estimate(divan::black_box(name), Mode::Train, Precision::Fp32));
}

#[divan::bench(args = ["resnet50", "vit_l_16"])]
fn train_amp_bf16(bencher: divan::Bencher, name: &str) {
    if zoo::build(name, &ZooInput::imagenet(1)).is_err() {
        return;
    }
    bencher.bench(|| estimate(divan::black_box(name), Mode::Train, Precision::AmpBf16));
}

#[divan::bench(args = ["resnet50", "vit_l_16"])]
fn infer(bencher: divan::Bencher, name: &str) {
    if zoo::build(name, &ZooInput::imagenet(1)).is_err() {
        return;
    }
    bencher.bench(|| estimate(divan::black_box(name), Mode::Infer, Precision::Fp32));
}

/// A built-in config and the input of one of the transformer benches (sdpa, no task override).
fn hf_case(
    name: &str,
    batch: u64,
    seq: u64,
    precision: Precision,
    new_tokens: Option<u64>,
) -> (
    vramscope_formats::hf::HfConfig,
    vramscope_formats::hf::HfInput,
) {
    use vramscope_formats::{hf, hf_zoo};
    let text = hf_zoo::config(name).expect("a built-in config");
    let cfg = hf::HfConfig::parse(name, text).expect("parses");
    let input = hf::HfInput {
        batch,
        seq,
        task: None,
        precision,
        generate: new_tokens.map(|new_tokens| hf::Generation { new_tokens }),
        attn: hf::AttnImplementation::Sdpa,
        target_seq: None,
        gradient_checkpointing: false,
        padded: false,
        four_bit: false,
    };
    (cfg, input)
}

fn estimate_hf(name: &str, batch: u64, seq: u64, precision: Precision) -> u64 {
    let (cfg, input) = hf_case(name, batch, seq, precision, None);
    let m = vramscope_formats::hf::build(&cfg, &input).expect("builds");
    let step = StepConfig {
        mode: Mode::Train,
        precision,
        optimizer: Optimizer::AdamW,
        ..StepConfig::default()
    };
    simulate(&m.graph, &step).expect("simulates").peak_allocated
}

/// Built-in transformer configs, one training step at the given batch and sequence length.
#[divan::bench(args = [("gpt2", 8, 1024), ("llama-3-8b", 1, 4096), ("llama-3-70b", 1, 4096)])]
fn transformer_train_amp_bf16(bencher: divan::Bencher, (name, batch, seq): (&str, u64, u64)) {
    bencher.bench(|| estimate_hf(divan::black_box(name), batch, seq, Precision::AmpBf16));
}

/// All that `vramscope estimate NAME --seq-len S -b B --precision amp-bf16 --json` computes, in
/// one process: the config parsed, the graph built, the two iterations simulated (AdamW), the
/// report made and written as its pretty-printed JSON (into memory, not to a terminal). What a
/// CLI process adds beyond this is its start-up and exit (docs/performance.md).
#[divan::bench(args = [("gpt2", 8, 1024), ("llama-3-8b", 1, 4096), ("llama-3-70b", 1, 4096)])]
fn transformer_estimate_json(bencher: divan::Bencher, (name, batch, seq): (&str, u64, u64)) {
    use vramscope_report::{find_gpu, EstimateReport, ReportInput};
    let gpu = find_gpu("h100").expect("a known GPU");
    let mut out = Vec::with_capacity(1 << 20);
    bencher.bench_local(|| {
        let (cfg, input) = hf_case(divan::black_box(name), batch, seq, Precision::AmpBf16, None);
        let m = vramscope_formats::hf::build(&cfg, &input).expect("builds");
        let step = StepConfig {
            mode: Mode::Train,
            precision: Precision::AmpBf16,
            optimizer: Optimizer::AdamW,
            ..StepConfig::default()
        };
        let sim = simulate(&m.graph, &step).expect("simulates");
        let report = EstimateReport::new(
            &ReportInput {
                graph: &m.graph,
                source: "zoo",
                batch_size: batch,
                mode: step.mode,
                precision: step.precision,
                optimizer: step.optimizer,
                checkpoint: Vec::new(),
                padded: None,
                gpu,
                generation: None,
            },
            &sim,
        );
        out.clear();
        vramscope_report::report_to_writer_pretty(&mut out, &report).expect("serialises");
        out.len()
    });
}

/// `model.generate` with the KV cache (`--mode generate`): prompt, new tokens. Long generations
/// jump over the middle decode steps (hf/generate.rs), so the cost is the prefill's and about
/// four decode steps'.
#[divan::bench(args = [("gpt2", 4, 128, 32), ("llama-3-8b", 4, 512, 256), ("llama-3-70b", 1, 2000, 2000)])]
fn transformer_generate_bf16(
    bencher: divan::Bencher,
    (name, batch, prompt, new_tokens): (&str, u64, u64, u64),
) {
    use vramscope_formats::hf;
    let (cfg, input) = hf_case(name, batch, prompt, Precision::Bf16, Some(new_tokens));
    let step = StepConfig {
        mode: Mode::Generate,
        precision: Precision::Bf16,
        ..StepConfig::default()
    };
    bencher.bench(|| {
        let m = hf::build(&cfg, divan::black_box(&input)).expect("builds");
        simulate(&m.graph, &step).expect("simulates").peak_allocated
    });
}

/// Building the generation graph alone (the rest of `transformer_generate_bf16` is the
/// simulation).
#[divan::bench(args = [("llama-3-70b", 1, 2000, 2000)])]
fn transformer_generate_graph_only(
    bencher: divan::Bencher,
    (name, batch, prompt, new_tokens): (&str, u64, u64, u64),
) {
    use vramscope_formats::hf;
    let (cfg, input) = hf_case(name, batch, prompt, Precision::Bf16, Some(new_tokens));
    bencher.bench(|| {
        hf::build(&cfg, divan::black_box(&input))
            .expect("builds")
            .graph
            .nodes
            .len()
    });
}
