//! Speed of a `fit` search: the largest batch of a zoo model that fits a GPU, every simulation
//! included (what `vramscope fit MODEL --gpu NAME` does besides printing).
//! Run: `cargo bench -p vramscope-advice`. Results are recorded in docs/advice.md.

use vramscope_advice::{fit_by_seq_len, fit_search, Target, SEQ_LENS};
use vramscope_core::sim::StepConfig;
use vramscope_formats::zoo::{self, ZooInput};
use vramscope_report::find_gpu;

fn main() {
    vramscope_core::heap::tune_for_estimates();
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

/// A transformer without a sequence length (`vramscope fit MODEL --gpu NAME` with no
/// `--seq-len`): a batch search at each of 512 ... 16384 tokens until batch 1 no longer fits or
/// the config refuses the length, then the longest sequence at batch 1. GPT-2 on a T4, and
/// Llama-3-8B with LoRA r=16 on an A100 80GB (fp32, `--lora 16` as the CLI applies it).
#[divan::bench(args = ["gpt2 t4", "llama-3-8b a100-80gb lora16"])]
fn fit_transformer_by_seq_len(bencher: divan::Bencher, case: &str) {
    use vramscope_core::passes::{apply_lora, LoraConfig};
    use vramscope_core::{DType, Precision};
    use vramscope_formats::{hf, hf_zoo};
    let mut words = case.split(' ');
    let (name, gpu) = (words.next().unwrap(), words.next().unwrap());
    let lora = words.next().is_some();
    let gpu = find_gpu(gpu).expect("table has the GPU");
    let target = Target { gpu, margin: 0.05 };
    let cfg = StepConfig::default();
    let config = hf::HfConfig::parse(name, hf_zoo::config(name).expect("built in")).unwrap();
    let lora_cfg = LoraConfig {
        rank: 16,
        alpha: 8.0,
        dropout: 0.0,
        targets: None,
        autocast: false,
        param_dtype: DType::F32,
        upcast_adapters: true,
    };
    bencher.bench(|| {
        fit_by_seq_len(
            &SEQ_LENS,
            |seq, batch| {
                let g = hf::build(&config, &hf::HfInput::new(batch, seq, Precision::Fp32))
                    .map_err(|e| e.to_string())?
                    .graph;
                if lora {
                    apply_lora(&g, &lora_cfg).map_err(|e| e.to_string())
                } else {
                    Ok(g)
                }
            },
            &cfg,
            &target,
        )
        .expect("searches")
        .by_seq_len
        .len()
    });
}
