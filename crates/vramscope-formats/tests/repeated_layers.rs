//! Front-ends record a transformer's first layer and copy it for the others
//! (`GraphBuilder::module_repeated`): the copy must be exactly the graph that building every layer
//! gives, for every built-in model.

use vramscope_core::builder::without_module_replay;
use vramscope_core::Precision;
use vramscope_formats::zoo::{self, ZooInput};
use vramscope_formats::{hf, hf_zoo};

/// The inputs every built-in config is built with: short and past-the-window sequences (masks
/// per layer kind), eager attention, checkpointing, a padded batch (the families that model it;
/// the others refuse it alike), generation (which records layers one by one).
fn inputs() -> Vec<hf::HfInput> {
    let base = hf::HfInput::new(2, 5, Precision::AmpBf16);
    vec![
        base.clone(),
        hf::HfInput {
            seq: 4200,
            precision: Precision::Bf16,
            ..base.clone()
        },
        hf::HfInput {
            attn: hf::AttnImplementation::Eager,
            ..base.clone()
        },
        hf::HfInput {
            gradient_checkpointing: true,
            precision: Precision::Fp32,
            ..base.clone()
        },
        hf::HfInput {
            padded: true,
            ..base.clone()
        },
        hf::HfInput {
            generate: Some(hf::Generation { new_tokens: 3 }),
            precision: Precision::Bf16,
            ..base
        },
    ]
}

/// The built-in configs, then the hand-made ones of the truth fixtures (small sliding windows,
/// per-layer sliding layers, MoE layer grids).
fn configs() -> Vec<(String, String)> {
    let mut all: Vec<(String, String)> = hf_zoo::names()
        .iter()
        .map(|n| (n.to_string(), hf_zoo::config(n).unwrap().to_string()))
        .collect();
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fixtures/hf/configs");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    for f in files {
        all.push((
            f.display().to_string(),
            std::fs::read_to_string(&f).unwrap(),
        ));
    }
    all
}

#[test]
fn replayed_layers_give_the_graph_built_layer_by_layer() {
    let mut compared = 0;
    for (name, text) in configs() {
        let Ok(cfg) = hf::HfConfig::parse(&name, &text) else {
            continue;
        };
        for input in inputs() {
            let replayed = hf::build(&cfg, &input);
            let built = without_module_replay(|| hf::build(&cfg, &input));
            match (replayed, built) {
                (Ok(r), Ok(b)) => {
                    // Debug prints every field of the graph, ops included
                    assert!(
                        format!("{:?}", r.graph) == format!("{:?}", b.graph),
                        "{name} {input:?}: replayed graph differs"
                    );
                    compared += 1;
                }
                (Err(r), Err(b)) => assert_eq!(r.to_string(), b.to_string(), "{name}"),
                (r, b) => panic!("{name}: {:?} vs {:?}", r.err(), b.err()),
            }
        }
    }
    assert!(compared >= 100, "only {compared} graphs compared");
}

#[test]
fn decoder_layers_are_copied_not_rebuilt() {
    // the copies share the first layer's op objects (so the simulator asks each op once)
    let cfg = hf::HfConfig::parse("llama-3-8b", hf_zoo::config("llama-3-8b").unwrap()).unwrap();
    let input = inputs().remove(0);
    let g = hf::build(&cfg, &input).unwrap().graph;
    let o_proj = |g: &vramscope_core::Graph, layer: u32| {
        let path = format!("model.layers.{layer}.self_attn.o_proj");
        let n = g.nodes.iter().find(|n| g.module_path(n.module) == path);
        n.expect("an o_proj node").op.clone()
    };
    assert!(std::sync::Arc::ptr_eq(&o_proj(&g, 1), &o_proj(&g, 31)));
    let built = without_module_replay(|| hf::build(&cfg, &input))
        .unwrap()
        .graph;
    assert!(!std::sync::Arc::ptr_eq(
        &o_proj(&built, 1),
        &o_proj(&built, 31)
    ));
}

#[test]
fn replayed_zoo_blocks_give_the_graph_built_block_by_block() {
    for name in zoo::names() {
        let input = ZooInput::imagenet(2);
        let replayed = zoo::build(name, &input).expect("zoo model builds");
        let built = without_module_replay(|| zoo::build(name, &input)).expect("zoo model builds");
        assert!(
            format!("{replayed:?}") == format!("{built:?}"),
            "{name}: replayed graph differs"
        );
    }
}
