//! EfficientNet B0–B7, ConvNeXt T/S/B, RegNetY-400MF, ViT B/16, B/32, L/16 and Swin-T against
//! torchvision 0.29.2 (weights=None): exact parameter counts (hard-coded below, as torchvision
//! reports them), and — from `fixtures/torchvision_reference.json` — every `named_modules()` path
//! and class, every parameter and buffer with its shape, and the output shape of every leaf module
//! the forward calls.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use vramscope_core::ir::{Graph, ParamKind};
use vramscope_formats::zoo::{self, ZooInput};

/// `sum(p.numel() for p in model.parameters())` in torchvision 0.29.2.
const PARAMETERS: &[(&str, u64)] = &[
    ("efficientnet_b0", 5_288_548),
    ("efficientnet_b1", 7_794_184),
    ("efficientnet_b2", 9_109_994),
    ("efficientnet_b3", 12_233_232),
    ("efficientnet_b4", 19_341_616),
    ("efficientnet_b5", 30_389_784),
    ("efficientnet_b6", 43_040_704),
    ("efficientnet_b7", 66_347_960),
    ("convnext_tiny", 28_589_128),
    ("convnext_small", 50_223_688),
    ("convnext_base", 88_591_464),
    ("regnet_y_400mf", 4_344_144),
    ("vit_b_16", 86_567_656),
    ("vit_b_32", 88_224_232),
    ("vit_l_16", 304_326_632),
    ("swin_t", 28_288_354),
];

fn reference() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/torchvision_reference.json"
    );
    let text = std::fs::read_to_string(path).expect("fixtures/torchvision_reference.json exists");
    serde_json::from_str(&text).expect("valid JSON")
}

fn build(name: &str) -> Graph {
    zoo::build(name, &ZooInput::imagenet(2)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn shape_of(v: &Value) -> Vec<u64> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_u64)
        .collect()
}

#[test]
fn parameter_counts_equal_torchvision() {
    for &(name, want) in PARAMETERS {
        let g = build(name);
        assert_eq!(g.parameter_count(), want, "{name}");
        assert_eq!(g.trainable_parameter_count(), want, "{name}");
    }
}

#[test]
fn modules_parameters_and_buffers_equal_torchvision() {
    let reference = reference();
    for &(name, _) in PARAMETERS {
        let r = &reference[name];
        assert!(r.is_object(), "{name} is missing from the reference file");
        let g = build(name);

        // every module, with its class
        let ours: BTreeSet<(String, String)> = g
            .modules
            .iter()
            .map(|m| (m.path.clone(), m.type_name.to_string()))
            .collect();
        let theirs: BTreeSet<(String, String)> = r["modules"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|m| {
                let s = |i: usize| m[i].as_str().unwrap_or_default().to_string();
                (s(0), s(1))
            })
            .collect();
        let missing: Vec<_> = theirs.difference(&ours).take(5).collect();
        let extra: Vec<_> = ours.difference(&theirs).take(5).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{name}: modules missing {missing:?}, extra {extra:?}"
        );

        // the modules that own parameters, with how many elements each owns directly
        let mut our_owned: BTreeMap<String, u64> = BTreeMap::new();
        for p in g.params.iter().filter(|p| p.kind == ParamKind::Parameter) {
            *our_owned
                .entry(g.module_path(p.module).to_string())
                .or_default() += p.numel();
        }
        let their_owned: BTreeMap<String, u64> = r["modules"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m[2].as_u64().unwrap_or(0) > 0)
            .map(|m| {
                (
                    m[0].as_str().unwrap_or_default().to_string(),
                    m[2].as_u64().unwrap_or(0),
                )
            })
            .collect();
        assert_eq!(our_owned, their_owned, "{name}: parameter-owning modules");

        // parameter and buffer names and shapes
        let named = |kind: ParamKind| -> BTreeSet<(String, Vec<u64>)> {
            g.params
                .iter()
                .filter(|p| p.kind == kind)
                .map(|p| (p.name.clone(), p.shape.to_vec()))
                .collect()
        };
        let listed = |key: &str| -> BTreeSet<(String, Vec<u64>)> {
            r[key]
                .as_array()
                .into_iter()
                .flatten()
                .map(|v| {
                    (
                        v[0].as_str().unwrap_or_default().to_string(),
                        shape_of(&v[1]),
                    )
                })
                .collect()
        };
        assert_eq!(named(ParamKind::Parameter), listed("param_names"), "{name}");
        assert_eq!(named(ParamKind::Buffer), listed("buffer_names"), "{name}");
    }
}

#[test]
fn leaf_module_outputs_have_torchvision_shapes() {
    let reference = reference();
    for &(name, _) in PARAMETERS {
        let g = build(name);
        // the output of each module's last call: the last node of its last scope
        let mut last_out: BTreeMap<&str, (u32, &[u64])> = BTreeMap::new();
        for s in g.scopes.iter().filter(|s| s.end > s.first) {
            let node = &g.nodes[s.end as usize - 1];
            if let Some(t) = node.outputs.first() {
                let e = last_out.entry(g.module_path(s.module)).or_insert((0, &[]));
                if s.end >= e.0 {
                    *e = (s.end, g.tensor(*t).shape.as_slice());
                }
            }
        }
        let mut checked = 0;
        for leaf in reference[name]["leaf_output_shapes"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let path = leaf[0].as_str().unwrap_or_default();
            let want = shape_of(&leaf[2]);
            // dropout and stochastic depth with p = 0 return their input (no node of their
            // own); nn.MultiheadAttention returns a tuple (no shape in the reference)
            let (Some((_, ours)), false) = (last_out.get(path), want.is_empty()) else {
                continue;
            };
            assert_eq!(*ours, want.as_slice(), "{name}: `{path}`");
            checked += 1;
        }
        assert!(checked > 10, "{name}: only {checked} leaf modules compared");
    }
}
