//! Every zoo model against torchvision itself: parameter count, buffer bytes, parameter names and
//! shapes, and the `named_modules()` paths and classes. The reference file
//! `fixtures/torchvision_reference.json` is produced by `validation/torchvision_reference.py`
//! (torchvision 0.29.2, weights=None).

use std::collections::BTreeSet;

use serde_json::Value;
use vramscope_core::ir::ParamKind;
use vramscope_formats::zoo::{self, ZooInput};

fn reference() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/torchvision_reference.json"
    );
    let text =
        std::fs::read_to_string(path).expect("fixtures/torchvision_reference.json is committed");
    serde_json::from_str(&text).expect("valid JSON")
}

fn input_for(name: &str) -> ZooInput {
    // torchvision's ViT/Swin are built for 224; everything else too
    let _ = name;
    ZooInput::imagenet(2)
}

#[test]
fn every_zoo_model_matches_torchvision() {
    let reference = reference();
    let mut failures = Vec::new();
    for name in zoo::names() {
        let Some(r) = reference.get(name) else {
            continue; // models torchvision has but the reference file does not list are checked below
        };
        let g = match zoo::build(name, &input_for(name)) {
            Ok(g) => g,
            Err(e) => {
                failures.push(format!("{name}: build failed: {e}"));
                continue;
            }
        };
        let want_params = r["parameters"].as_u64().unwrap_or(0);
        if g.parameter_count() != want_params {
            failures.push(format!(
                "{name}: {} parameters, torchvision has {want_params}",
                g.parameter_count()
            ));
        }
        let buffer_bytes: u64 = g
            .params
            .iter()
            .filter(|p| p.kind == ParamKind::Buffer)
            .map(|p| p.numel() * p.dtype.size())
            .sum();
        if buffer_bytes != r["buffer_bytes"].as_u64().unwrap_or(0) {
            failures.push(format!(
                "{name}: buffer bytes {buffer_bytes} vs {}",
                r["buffer_bytes"]
            ));
        }
        let ours: BTreeSet<String> = g
            .params
            .iter()
            .filter(|p| p.kind == ParamKind::Parameter)
            .map(|p| format!("{} {:?}", p.name, p.shape))
            .collect();
        let theirs: BTreeSet<String> = r["param_names"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|v| {
                let shape: Vec<u64> = v[1]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_u64)
                    .collect();
                format!("{} {:?}", v[0].as_str().unwrap_or(""), shape)
            })
            .collect();
        for missing in theirs.difference(&ours).take(5) {
            failures.push(format!("{name}: missing parameter {missing}"));
        }
        for extra in ours.difference(&theirs).take(5) {
            failures.push(format!("{name}: extra parameter {extra}"));
        }
        // modules that own parameters must exist under the same path and class
        let our_modules: BTreeSet<String> = g
            .modules
            .iter()
            .map(|m| format!("{} {}", m.path, m.type_name))
            .collect();
        for m in r["modules"].as_array().into_iter().flatten() {
            let owns = m[2].as_u64().unwrap_or(0) > 0;
            let key = format!(
                "{} {}",
                m[0].as_str().unwrap_or(""),
                m[1].as_str().unwrap_or("")
            );
            if owns && !our_modules.contains(&key) {
                failures.push(format!("{name}: module `{key}` missing"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn the_zoo_covers_the_reference_models() {
    let reference = reference();
    let names = zoo::names();
    let missing: Vec<&String> = reference
        .as_object()
        .map(|o| o.keys().filter(|k| !names.contains(&k.as_str())).collect())
        .unwrap_or_default();
    assert!(missing.is_empty(), "zoo lacks {missing:?}");
}

#[test]
fn unknown_model_suggests_a_name() {
    let e = build_error("resnet5", &ZooInput::imagenet(1));
    assert!(e.contains("unknown model `resnet5`"), "{e}");
    assert!(e.contains("did you mean"), "{e}");
}

/// `zoo::build` reads a name as `vramscope estimate` does: up to case and `-` / `_`.
#[test]
fn zoo_names_ignore_case_and_separators() {
    let input = ZooInput::imagenet(1);
    let folded = zoo::build("Wide-ResNet50_2", &input).unwrap();
    let exact = zoo::build("wide_resnet50_2", &input).unwrap();
    assert_eq!(folded.name, "wide_resnet50_2");
    assert_eq!(folded.params.len(), exact.params.len());
    let e = build_error("Wide-ResNet5_2", &input);
    assert!(e.contains("did you mean `wide_resnet50_2`"), "{e}");
}

#[test]
fn too_small_an_image_is_a_clear_error() {
    // VGG's fifth unpadded max-pool cannot halve a 1x1 map (a 16x16 image); torchvision fails too
    let input = ZooInput {
        batch: 1,
        channels: 3,
        height: 16,
        width: 16,
        num_classes: 10,
    };
    let e = build_error("vgg16", &input);
    assert!(e.contains("vgg16"), "{e}");
    assert!(e.contains("features."), "names the module: {e}");
    assert!(e.contains("too small"), "{e}");
}

fn build_error(name: &str, input: &ZooInput) -> String {
    match zoo::build(name, input) {
        Ok(_) => panic!("{name} should not build for {input:?}"),
        Err(e) => e.to_string(),
    }
}
