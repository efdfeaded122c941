//! Speed of a `fit` search: the largest batch of a zoo model that fits a GPU, every simulation
//! included (what `vramscope fit MODEL --gpu NAME` does besides printing).
//! Run: `cargo bench -p vramscope-advice`. Results are recorded in docs/advice.md.

use vramscope_advice::{fit_search, Target};
use vramscope_core::sim::StepConfig;
use vramscope_formats::zoo::{self, ZooInput};
use vramscope_report::find_gpu;

fn main() {
    vramscope_core::heap::keep_freed_memory();
    divan::main();
}

#[divan::bench(args = ["resnet50", "mobilenet_v3_large", "vit_b_16", "efficientnet_b0"])]
fn fit_h100(bencher: divan::Bencher, name: &str) {
    let gpu = find_gpu("h100").expect("table has the H100");
    let target = Target { gpu, margin: 0.05 };
    let cfg = StepConfig::default();
    bencher.bench(|| {
        fit_search(
            "batch_size",
            |b| {
                zoo::build(divan::black_box(name), &ZooInput::imagenet(b))
                    .map_err(|e| e.to_string())
            },
            &cfg,
            &target,
        )
        .expect("searches")
        .size
    });
}

#[divan::bench(args = ["resnet50", "vit_b_16"])]
fn fit_t4(bencher: divan::Bencher, name: &str) {
    let gpu = find_gpu("t4").expect("table has the T4");
    let target = Target { gpu, margin: 0.05 };
    let cfg = StepConfig::default();
    bencher.bench(|| {
        fit_search(
            "batch_size",
            |b| {
                zoo::build(divan::black_box(name), &ZooInput::imagenet(b))
                    .map_err(|e| e.to_string())
            },
            &cfg,
            &target,
        )
        .expect("searches")
        .size
    });
}
