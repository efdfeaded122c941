//! `simulate` runs the caching-allocator model on a second thread for a large graph; that must
//! give exactly what `simulate_on_this_thread` gives (every phase, peak, live tensor and event),
//! for every built-in transformer and a spread of torchvision models, in training (with and
//! without checkpointing), inference and generation. The thread is forced here, whatever the
//! graph's size and the CPUs of the machine the test runs on.

use vramscope_core::optim::Optimizer;
use vramscope_core::sim::{
    simulate_on_this_thread, simulate_with_allocator_thread, Checkpoint, Mode, StepConfig,
};
use vramscope_core::{Graph, Precision};
use vramscope_formats::zoo::{self, ZooInput};
use vramscope_formats::{hf, hf_zoo};

/// Both ways, with the event trace on.
fn assert_same(what: &str, graph: &Graph, step: &StepConfig) {
    let step = StepConfig {
        record_events: true,
        ..step.clone()
    };
    let threaded = simulate_with_allocator_thread(graph, &step).expect("simulates");
    let here = simulate_on_this_thread(graph, &step).expect("simulates");
    assert!(!here.events.is_empty(), "{what}: no events recorded");
    // Debug prints every field, the events included
    assert!(
        format!("{threaded:?}") == format!("{here:?}"),
        "{what}: the threaded simulation differs"
    );
}

#[test]
fn the_allocator_thread_changes_nothing() {
    let train = StepConfig {
        mode: Mode::Train,
        precision: Precision::AmpBf16,
        optimizer: Optimizer::AdamW,
        ..StepConfig::default()
    };
    let mut compared = 0;
    for name in hf_zoo::names() {
        let cfg = hf::HfConfig::parse(name, hf_zoo::config(name).unwrap()).unwrap();
        let base = hf::HfInput::new(2, 64, Precision::AmpBf16);
        let cases = [
            (base.clone(), train.clone()),
            (
                hf::HfInput {
                    gradient_checkpointing: true,
                    ..base.clone()
                },
                train.clone(),
            ),
            (
                hf::HfInput {
                    generate: Some(hf::Generation { new_tokens: 3 }),
                    precision: Precision::Bf16,
                    ..base
                },
                StepConfig {
                    mode: Mode::Generate,
                    precision: Precision::Bf16,
                    ..StepConfig::default()
                },
            ),
        ];
        for (input, step) in cases {
            let Ok(model) = hf::build(&cfg, &input) else {
                continue;
            };
            let mut step = step;
            if input.gradient_checkpointing {
                step.checkpoint = model
                    .checkpoint_layers
                    .iter()
                    .map(|m| Checkpoint::Module(m.clone()))
                    .collect();
            }
            let what = format!("{name} {input:?}");
            assert_same(&what, &model.graph, &step);
            compared += 1;
        }
    }
    for name in ["resnet50", "vit_b_16", "densenet121", "swin_t"] {
        let graph = zoo::build(name, &ZooInput::imagenet(8)).expect("builds");
        let fp32 = StepConfig {
            optimizer: Optimizer::AdamW,
            ..StepConfig::default()
        };
        assert_same(name, &graph, &fp32);
        let checkpointed = StepConfig {
            checkpoint: vec![Checkpoint::Module(graph.modules[1].path.clone())],
            ..fp32.clone()
        };
        assert_same(name, &graph, &checkpointed);
        let infer = StepConfig {
            mode: Mode::Infer,
            precision: Precision::AmpFp16,
            ..StepConfig::default()
        };
        assert_same(name, &graph, &infer);
    }
    // every built-in config builds its training graphs at least
    assert!(
        compared >= 2 * hf_zoo::names().len(),
        "{compared} transformer cases compared"
    );
}
