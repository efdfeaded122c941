//! The ONNX front-end on the committed fixtures (fixtures/onnx, made by
//! validation/make_onnx_fixtures.py): peaks equal to the zoo's for exported torchvision models,
//! shapes equal to Python `onnx.shape_inference`, module paths, and clear errors on bad files.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use vramscope_core::sim::{simulate, Checkpoint, Mode, StepConfig};
use vramscope_core::Precision;
use vramscope_formats::onnx::{self, OnnxError, OnnxOptions};
use vramscope_formats::zoo::{self, ZooInput};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fixtures/onnx")
        .join(name)
}

fn opts(batch: u64) -> OnnxOptions {
    OnnxOptions {
        batch,
        seq_len: 7,
        chw: (3, 224, 224),
    }
}

fn peak(g: &vramscope_core::Graph, mode: Mode, precision: Precision, ckpt: &[&str]) -> u64 {
    let cfg = StepConfig {
        mode,
        precision,
        optimizer: vramscope_core::optim::Optimizer::AdamW,
        checkpoint: ckpt
            .iter()
            .map(|c| Checkpoint::Module(c.to_string()))
            .collect(),
        ..StepConfig::default()
    };
    simulate(g, &cfg).expect("simulates").peak_allocated
}

/// Train fp32 AdamW, inference, and AMP bf16 AdamW: the exports give the zoo's peak.
#[test]
fn exported_torchvision_models_match_the_zoo() {
    let cases = [
        (Mode::Train, Precision::Fp32),
        (Mode::Infer, Precision::Fp32),
        (Mode::Train, Precision::AmpBf16),
    ];
    for name in [
        "resnet18",
        "mobilenet_v3_small",
        "squeezenet1_1",
        "resnet50",
        "densenet121",
        "vit_b_16",
    ] {
        // the initializer data file is not committed: the graph alone must be enough
        let g = onnx::load(&fixture(&format!("{name}.onnx")), &opts(16)).expect(name);
        let input = ZooInput {
            batch: 16,
            channels: 3,
            height: 224,
            width: 224,
            num_classes: 1000,
        };
        let z = zoo::build(name, &input).unwrap();
        assert_eq!(
            g.parameter_count(),
            z.parameter_count(),
            "{name} parameters"
        );
        let param_names = |g: &vramscope_core::Graph| {
            let mut v: Vec<String> = g.params.iter().map(|p| p.name.clone()).collect();
            v.sort();
            v
        };
        assert_eq!(param_names(&g), param_names(&z), "{name} parameter names");
        for (mode, precision) in cases {
            let (a, b) = (
                peak(&g, mode, precision, &[]),
                peak(&z, mode, precision, &[]),
            );
            let err = (a as f64 - b as f64).abs() / b as f64;
            assert!(
                err < 0.01,
                "{name} {mode:?} {precision:?}: onnx {a} zoo {b}"
            );
        }
    }
}

#[test]
fn checkpointing_a_recovered_module_works() {
    let g = onnx::load(&fixture("resnet18.onnx"), &opts(16)).unwrap();
    let z = zoo::build(
        "resnet18",
        &ZooInput {
            batch: 16,
            channels: 3,
            height: 224,
            width: 224,
            num_classes: 1000,
        },
    )
    .unwrap();
    assert!(g.find_module("layer3.1.conv2").is_some());
    let (a, b) = (
        peak(&g, Mode::Train, Precision::Fp32, &["layer3"]),
        peak(&z, Mode::Train, Precision::Fp32, &["layer3"]),
    );
    assert_eq!(a, b);
    assert!(a < peak(&g, Mode::Train, Precision::Fp32, &[]));
}

/// Every shape Python's onnx.shape_inference knows equals ours, with batch 3 and sequence 7.
#[test]
fn shapes_match_onnx_shape_inference() {
    for name in [
        "resnet18",
        "mobilenet_v3_small",
        "squeezenet1_1",
        "dynamic_mlp",
        "small_cnn",
        "external_cnn",
        "resnet50",
        "densenet121",
        "vit_b_16",
        "lstm_classifier",
        "gru_classifier",
        "text_classifier",
        "volume_classifier",
        "conv_nd",
    ] {
        let f = onnx::read(&fixture(&format!("{name}.onnx"))).unwrap();
        let low = onnx::lower(&f, &opts(3)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let text = std::fs::read_to_string(fixture(&format!("{name}.shapes.json"))).unwrap();
        let oracle: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&text).unwrap();
        let mut checked = 0;
        for (value, dims) in &oracle {
            let want: Option<Vec<u64>> = dims
                .as_array()
                .unwrap()
                .iter()
                .map(|d| match d {
                    serde_json::Value::Number(n) => n.as_u64(),
                    serde_json::Value::String(s) if s == "batch" => Some(3),
                    serde_json::Value::String(s) if s == "sequence" => Some(7),
                    _ => None,
                })
                .collect();
            let Some(want) = want else { continue };
            let got = low
                .shapes
                .get(value)
                .unwrap_or_else(|| panic!("{name}: no shape for {value}"));
            assert_eq!(got, &want, "{name}: shape of {value}");
            checked += 1;
        }
        assert!(checked >= 5, "{name}: only {checked} shapes checked");
    }
}

#[test]
fn module_paths_come_from_node_scopes() {
    let g = onnx::load(&fixture("mobilenet_v3_small.onnx"), &opts(2)).unwrap();
    for path in [
        "features.1.block.1.fc1",
        "features.3.block.2.0",
        "classifier.3",
    ] {
        assert!(g.find_module(path).is_some(), "{path}");
    }
    let g = onnx::load(&fixture("dynamic_mlp.onnx"), &opts(2)).unwrap();
    let names: Vec<&str> = g.params.iter().map(|p| p.name.as_str()).collect();
    assert!(
        names.contains(&"fc1.weight") && names.contains(&"qkv.bias"),
        "{names:?}"
    );
}

#[test]
fn bad_files_give_clear_errors() {
    let cases = [
        ("truncated.onnx", "truncated or corrupt"),
        ("garbage.onnx", "not a valid ONNX protobuf"),
        ("cyclic.onnx", "cycle through nodes `/r1/Relu`"),
        ("absurd_shape.onnx", "2147483648"),
        ("absurd_initializer.onnx", "`fc.weight` has dims"),
        (
            "unsupported.onnx",
            "Det: `/det/Det`; NonZero: `/mask/NonZero`",
        ),
        ("dangling.onnx", "reads `ghost`"),
        (
            "bad_lstm_hidden.onnx",
            "node `/rnn/LSTM` (LSTM): W [1, 32, 4] and R [1, 32, 8] do not fit 1 direction(s), hidden_size 6",
        ),
        (
            "bad_gru_direction.onnx",
            "node `/rnn/GRU` (GRU): direction \"sideways\" is not forward, reverse or bidirectional",
        ),
        (
            "bad_attention.onnx",
            "node `/attn/Attention` (Attention): 3-D inputs need positive q_num_heads and kv_num_heads",
        ),
        (
            "bad_auto_pad.onnx",
            "node `/conv/Conv` (Conv): auto_pad \"SAME_MIDDLE\" is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID",
        ),
        ("does_not_exist.onnx", "does_not_exist.onnx"),
    ];
    for (file, want) in cases {
        let e = onnx::load(&fixture(file), &opts(2)).expect_err(file);
        let msg = e.to_string();
        assert!(msg.contains(want), "{file}: {msg}");
        assert!(msg.contains(file), "{file}: error names the file: {msg}");
        if file == "unsupported.onnx" {
            assert!(matches!(e, OnnxError::Unsupported { .. }));
        }
    }
}

fn param_names(g: &vramscope_core::Graph) -> Vec<String> {
    g.params.iter().map(|p| p.name.clone()).collect()
}

/// The dynamo exporter names nodes without module scopes: every weight keeps its full path
/// (`layer4.1.conv2.weight`), one parameter per weight, not one per last path segment.
#[test]
fn exports_without_scopes_keep_every_weight() {
    let f = onnx::read(&fixture("resnet18.dynamo.onnx")).unwrap();
    let g = onnx::lower(&f, &opts(2)).unwrap().graph;
    let names = param_names(&g);
    assert!(
        names.contains(&"layer4.1.conv2.weight".to_string()),
        "{names:?}"
    );
    let mut unique = names.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), names.len());
    // every float initializer of the export is one parameter of its own
    let total: u64 = f
        .graph()
        .initializer
        .iter()
        .filter(|t| t.data_type() == 1 && t.dims.len() > 1)
        .map(|t| t.dims.iter().product::<i64>() as u64)
        .sum();
    let weights: u64 = g
        .params
        .iter()
        .filter(|p| p.shape.len() > 1)
        .map(|p| p.shape.iter().product::<u64>())
        .sum();
    assert_eq!(weights, total);
}

/// nn.LSTM / nn.GRU exports: PyTorch's parameter names and sizes, one module, and the native
/// (non-cuDNN) step-by-step program: a fused cell per time step and layer.
#[test]
fn recurrent_layers_lower_to_pytorch_parameters_and_cells() {
    let g = onnx::load(&fixture("lstm_classifier.onnx"), &opts(4)).unwrap();
    assert_eq!(
        param_names(&g),
        [
            "rnn.weight_ih_l0",
            "rnn.weight_hh_l0",
            "rnn.bias_ih_l0",
            "rnn.bias_hh_l0",
            "rnn.weight_ih_l1",
            "rnn.weight_hh_l1",
            "rnn.bias_ih_l1",
            "rnn.bias_hh_l1",
            "head.weight",
            "head.bias"
        ]
    );
    // nn.LSTM(32, 64, num_layers=2) + Linear(64, 10)
    assert_eq!(
        g.parameter_count(),
        4 * 64 * (32 + 64 + 2) + 4 * 64 * (64 + 64 + 2) + 64 * 10 + 10
    );
    let cells = |g: &vramscope_core::Graph, kind: &str| {
        g.nodes.iter().filter(|n| n.op.kind() == kind).count()
    };
    // 2 layers × 7 steps (--seq-len)
    assert_eq!(cells(&g, "_thnn_fused_lstm_cell"), 14);
    let g = onnx::load(&fixture("gru_classifier.onnx"), &opts(4)).unwrap();
    assert!(param_names(&g).contains(&"rnn.weight_hh_l0_reverse".to_string()));
    // bidirectional nn.GRU(32, 48) + Linear(96, 10)
    assert_eq!(
        g.parameter_count(),
        2 * 3 * 48 * (32 + 48 + 2) + 96 * 10 + 10
    );
    assert_eq!(cells(&g, "_thnn_fused_gru_cell"), 14);
}

/// Exported `F.scaled_dot_product_attention` and `nn.GELU` become one kernel each; token and
/// position embeddings are `nn.Embedding`s; the symbolic batch and sequence dims follow the
/// options.
#[test]
fn exported_attention_gelu_and_embeddings_are_single_kernels() {
    let o = OnnxOptions {
        batch: 3,
        seq_len: 40,
        chw: (3, 224, 224),
    };
    let g = onnx::load(&fixture("text_classifier.onnx"), &o).unwrap();
    let count = |kind: &str| g.nodes.iter().filter(|n| n.op.kind() == kind).count();
    assert_eq!(count("scaled_dot_product_attention"), 2);
    assert_eq!(count("GELU"), 2);
    assert_eq!(count("embedding"), 2);
    assert_eq!(count("softmax"), 0);
    assert_eq!(count("erf"), 0);
    assert_eq!(g.tensor(g.inputs[0]).shape[..], [3, 40]);
    assert!(param_names(&g).contains(&"pos.weight".to_string()));
    let sdpa = g
        .nodes
        .iter()
        .find(|n| n.op.kind() == "scaled_dot_product_attention")
        .unwrap();
    assert_eq!(g.tensor(sdpa.outputs[0]).shape[..], [3, 4, 40, 32]);
}

/// com.microsoft::Attention (packed QKV projection) and the opset-23 Attention op.
#[test]
fn attention_ops_lower_to_attention_kernels() {
    let o = OnnxOptions {
        batch: 2,
        seq_len: 9,
        chw: (3, 224, 224),
    };
    let low = onnx::lower(&onnx::read(&fixture("attention_ops.onnx")).unwrap(), &o).unwrap();
    assert_eq!(low.shapes["a"], [2, 9, 64]);
    assert_eq!(low.shapes["y"], [2, 9, 64]);
    let g = low.graph;
    let sdpa = g
        .nodes
        .iter()
        .filter(|n| n.op.kind() == "scaled_dot_product_attention")
        .count();
    assert_eq!(sdpa, 2);
    // the packed projection is a Linear with the [64, 192] weight's numbers
    assert_eq!(g.parameter_count(), 64 * 192 + 192 + 2 * 64 + 5 * 64 + 5);
}

/// 1-D and 3-D convolutions; `SAME_UPPER` with an even kernel pads the odd pixel explicitly.
#[test]
fn nd_convolutions_and_auto_pad() {
    let low = onnx::lower(&onnx::read(&fixture("conv_nd.onnx")).unwrap(), &opts(2)).unwrap();
    assert_eq!(low.shapes["b"], [2, 4, 4, 8, 8]);
    assert_eq!(low.shapes["d"], [2, 8, 128]);
    assert_eq!(low.shapes["e"], [2, 6, 8, 16]);
    let kinds: Vec<&str> = low.graph.nodes.iter().map(|n| n.op.kind()).collect();
    assert_eq!(kinds.iter().filter(|k| **k == "Conv3d").count(), 2);
    assert_eq!(kinds.iter().filter(|k| **k == "Conv1d").count(), 2);
    // c1b (k=4, stride 1) and c2 (k=2 along H) pad asymmetrically; c1a (k=4, stride 2) does not
    assert_eq!(kinds.iter().filter(|k| **k == "pad").count(), 2);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    /// Random byte edits of real exports (a CNN; an LSTM, attention and embeddings; N-d
    /// convolutions and the Attention ops) never panic: an error or a graph.
    #[test]
    fn mutated_files_never_panic(
        which in 0usize..4,
        edits in proptest::collection::vec((0usize..40000, any::<u8>()), 1..8),
        cut in 0usize..40000,
    ) {
        let name = ["squeezenet1_1.onnx", "lstm_classifier.onnx", "text_classifier.onnx", "attention_ops.onnx"][which];
        let mut bytes = std::fs::read(fixture(name)).unwrap();
        for (at, v) in edits {
            let i = at % bytes.len();
            bytes[i] = v;
        }
        if cut % 3 == 0 {
            bytes.truncate(cut % bytes.len());
        }
        let dir = std::env::temp_dir().join(format!("vramscope-onnx-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join(format!("m{}.onnx", cut));
        std::fs::write(&p, &bytes).unwrap();
        let _ = onnx::load(&p, &opts(2));
        std::fs::remove_file(&p).ok();
    }
}
