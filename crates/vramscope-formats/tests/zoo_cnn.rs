//! The zoo's VGG, AlexNet, SqueezeNet, DenseNet, MobileNet and ShuffleNet models against
//! torchvision: exact parameter counts, and the same `named_modules()` (paths, classes, direct
//! parameter counts) and `named_parameters()` / buffers as `fixtures/torchvision_reference.json`.

use std::collections::BTreeSet;

use serde_json::Value;
use vramscope_core::ir::ParamKind;
use vramscope_core::Graph;
use vramscope_formats::zoo::{self, ZooInput};

/// `sum(p.numel() for p in model.parameters())` and buffer numel, from torchvision 0.29.2
/// (`weights=None`, 1000 classes).
const REFERENCE: &[(&str, u64, u64)] = &[
    ("vgg11", 132_863_336, 0),
    ("vgg13", 133_047_848, 0),
    ("vgg16", 138_357_544, 0),
    ("vgg19", 143_667_240, 0),
    ("vgg11_bn", 132_868_840, 5_512),
    ("vgg13_bn", 133_053_736, 5_898),
    ("vgg16_bn", 138_365_992, 8_461),
    ("vgg19_bn", 143_678_248, 11_024),
    ("alexnet", 61_100_840, 0),
    ("squeezenet1_0", 1_248_424, 0),
    ("squeezenet1_1", 1_235_496, 0),
    ("densenet121", 7_978_856, 83_769),
    ("densenet161", 28_681_000, 220_097),
    ("densenet169", 14_149_480, 158_569),
    ("densenet201", 20_013_928, 229_257),
    ("mobilenet_v2", 3_504_872, 34_164),
    ("mobilenet_v3_small", 2_542_856, 12_146),
    ("mobilenet_v3_large", 5_483_032, 24_446),
    ("shufflenet_v2_x0_5", 1_366_792, 8_008),
    ("shufflenet_v2_x1_0", 2_278_604, 16_236),
    ("shufflenet_v2_x1_5", 3_503_624, 23_496),
    ("shufflenet_v2_x2_0", 7_393_996, 33_772),
];

fn build(name: &str) -> Graph {
    match zoo::build(name, &ZooInput::imagenet(2)) {
        Ok(g) => g,
        Err(e) => panic!("{name}: {e}"),
    }
}

fn fixture() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../fixtures/torchvision_reference.json"
    );
    let text = std::fs::read_to_string(path).expect("fixtures/torchvision_reference.json");
    serde_json::from_str(&text).expect("valid JSON")
}

fn buffer_numel(g: &Graph) -> u64 {
    g.params
        .iter()
        .filter(|p| p.kind == ParamKind::Buffer)
        .map(|p| p.numel())
        .sum()
}

/// (path, class, parameters owned directly) of every module.
fn modules(g: &Graph) -> BTreeSet<(String, String, u64)> {
    g.modules
        .iter()
        .enumerate()
        .map(|(i, m)| {
            let direct = g
                .params
                .iter()
                .filter(|p| p.module.0 as usize == i && p.kind == ParamKind::Parameter)
                .map(|p| p.numel())
                .sum();
            (m.path.clone(), m.type_name.to_string(), direct)
        })
        .collect()
}

fn reference_modules(r: &Value) -> BTreeSet<(String, String, u64)> {
    r["modules"]
        .as_array()
        .expect("modules")
        .iter()
        .map(|m| {
            (
                m[0].as_str().expect("path").to_string(),
                m[1].as_str().expect("class").to_string(),
                m[2].as_u64().expect("numel"),
            )
        })
        .collect()
}

fn names(list: &Value) -> BTreeSet<String> {
    list.as_array()
        .expect("name list")
        .iter()
        .map(|e| e[0].as_str().expect("name").to_string())
        .collect()
}

#[test]
fn parameter_and_buffer_counts_match_torchvision() {
    for &(name, params, buffers) in REFERENCE {
        let g = build(name);
        assert_eq!(g.parameter_count(), params, "{name}: parameters");
        assert_eq!(buffer_numel(&g), buffers, "{name}: buffer elements");
    }
}

#[test]
fn modules_and_parameter_names_match_torchvision() {
    let fx = fixture();
    for &(name, params, _) in REFERENCE {
        // the x0.5/x1.5/x2.0 ShuffleNets are not in the fixture; their module tree is x1.0's
        let key = if name.starts_with("shufflenet_v2_") {
            "shufflenet_v2_x1_0"
        } else {
            name
        };
        let r = &fx[key];
        assert!(r.is_object(), "{key} missing from the fixture");
        let g = build(name);
        let ours = modules(&g);
        let theirs = reference_modules(r);
        if key == name {
            assert_eq!(
                r["parameters"].as_u64(),
                Some(params),
                "{name}: fixture count"
            );
            let diff: Vec<_> = ours.symmetric_difference(&theirs).take(10).collect();
            assert!(diff.is_empty(), "{name}: modules differ: {diff:?}");
        } else {
            let strip = |s: &BTreeSet<(String, String, u64)>| -> BTreeSet<(String, String)> {
                s.iter().map(|(p, c, _)| (p.clone(), c.clone())).collect()
            };
            assert_eq!(strip(&ours), strip(&theirs), "{name}: module tree");
        }
        let with_params: BTreeSet<&str> = ours
            .iter()
            .filter(|m| m.2 > 0)
            .map(|m| m.0.as_str())
            .collect();
        let ref_with_params: BTreeSet<&str> = theirs
            .iter()
            .filter(|m| m.2 > 0)
            .map(|m| m.0.as_str())
            .collect();
        assert_eq!(
            with_params, ref_with_params,
            "{name}: modules with parameters"
        );
        let pnames: BTreeSet<String> = g
            .params
            .iter()
            .filter(|p| p.kind == ParamKind::Parameter)
            .map(|p| p.name.clone())
            .collect();
        assert_eq!(pnames, names(&r["param_names"]), "{name}: parameter names");
        let bnames: BTreeSet<String> = g
            .params
            .iter()
            .filter(|p| p.kind == ParamKind::Buffer)
            .map(|p| p.name.clone())
            .collect();
        assert_eq!(bnames, names(&r["buffer_names"]), "{name}: buffer names");
    }
}

/// The smallest square image each model accepts, and the largest it rejects, as torchvision's
/// forward does (squeezenet's `ceil_mode` pools take inputs smaller than their kernel).
#[test]
fn minimum_input_sizes_match_torchvision() {
    let cases: &[(&str, Option<u64>, u64)] = &[
        ("squeezenet1_1", Some(16), 17),
        ("squeezenet1_0", Some(20), 21),
        ("alexnet", Some(62), 63),
        ("vgg11", Some(31), 32),
        ("densenet121", Some(28), 29),
        ("shufflenet_v2_x1_0", None, 1),
        ("mobilenet_v3_small", None, 1),
    ];
    for &(name, too_small, ok) in cases {
        let at = |s: u64| {
            let mut input = ZooInput::imagenet(1);
            input.height = s;
            input.width = s;
            zoo::build(name, &input)
        };
        assert!(at(ok).is_ok(), "{name} at {ok}: {:?}", at(ok).err());
        if let Some(s) = too_small {
            assert!(at(s).is_err(), "{name} at {s} should be too small");
        }
    }
}
