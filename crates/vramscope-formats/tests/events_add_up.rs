//! The event stream behind `--trace` and `--explain` adds up to the phase timeline: per phase, the
//! allocated and freed block bytes of its events equal the phase's totals, and the running value
//! after its last event is the phase's allocated-after.

use vramscope_core::optim::Optimizer;
use vramscope_core::sim::{simulate, Mode, StepConfig};
use vramscope_core::Precision;
use vramscope_formats::zoo::{self, ZooInput};

#[test]
fn events_add_up_to_the_phases() {
    for (name, precision, optimizer, checkpoint) in [
        ("resnet18", Precision::Fp32, Optimizer::Adam, vec![]),
        (
            "mobilenet_v3_small",
            Precision::AmpFp16,
            Optimizer::SgdMomentum,
            vec![],
        ),
        (
            "resnet18",
            Precision::AmpBf16,
            Optimizer::AdamW,
            vec![vramscope_core::sim::Checkpoint::Module("layer2".into())],
        ),
    ] {
        let g = zoo::build(name, &ZooInput::imagenet(4)).expect("builds");
        let cfg = StepConfig {
            mode: Mode::Train,
            precision,
            optimizer,
            checkpoint,
            record_events: true,
            ..StepConfig::default()
        };
        let sim = simulate(&g, &cfg).expect("simulates");
        let mut before = 0u64;
        for (i, p) in sim.phases.iter().enumerate() {
            let events: Vec<_> = sim
                .events
                .iter()
                .filter(|e| e.phase as usize == i)
                .collect();
            let allocated: u64 = events.iter().filter(|e| e.alloc).map(|e| e.block).sum();
            let freed: u64 = events.iter().filter(|e| !e.alloc).map(|e| e.block).sum();
            assert_eq!(allocated, p.allocated_bytes, "{name} {}", p.name);
            assert_eq!(freed, p.freed_bytes, "{name} {}", p.name);
            assert_eq!(
                before + allocated - freed,
                p.allocated_after,
                "{name} {}",
                p.name
            );
            if let Some(last) = events.last() {
                assert_eq!(last.allocated, p.allocated_after, "{name} {}", p.name);
            }
            let peak = events
                .iter()
                .map(|e| e.allocated)
                .max()
                .unwrap_or(0)
                .max(before);
            assert_eq!(peak, p.peak_allocated, "{name} {}", p.name);
            before = p.allocated_after;
        }
    }
}
