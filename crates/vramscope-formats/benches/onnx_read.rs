//! Reading and lowering a 100 MB ONNX file (a classifier whose 100 MB weight is inline
//! `raw_data`): the weight bytes are memory-mapped and never touched. The file is generated in the
//! temp dir, not committed. Results in docs/onnx.md.

use std::path::PathBuf;
use std::sync::OnceLock;

use prost::Message;
use vramscope_formats::onnx::proto::{
    tensor_shape_proto::{dimension::Value as Dim, Dimension},
    type_proto::{Tensor, Value},
    AttributeProto, GraphProto, ModelProto, NodeProto, OperatorSetIdProto, TensorProto,
    TensorShapeProto, TypeProto, ValueInfoProto,
};
use vramscope_formats::onnx::{self, OnnxOptions};

fn main() {
    divan::main();
}

fn value(name: &str, dims: &[Dim]) -> ValueInfoProto {
    ValueInfoProto {
        name: Some(name.into()),
        r#type: Some(TypeProto {
            value: Some(Value::TensorType(Tensor {
                elem_type: Some(1),
                shape: Some(TensorShapeProto {
                    dim: dims
                        .iter()
                        .map(|d| Dimension {
                            value: Some(d.clone()),
                            ..Default::default()
                        })
                        .collect(),
                }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A 100 MB model: Gemm(x [batch, 5120], W [5120, 5120] inline) -> logits.
fn big_model() -> &'static PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        let n = 5120i64;
        let w = TensorProto {
            name: Some("fc.weight".into()),
            dims: vec![n, n],
            data_type: Some(1),
            raw_data: Some(vec![0u8; (n * n * 4) as usize].into()),
            ..Default::default()
        };
        let node = NodeProto {
            name: Some("/fc/Gemm".into()),
            op_type: Some("Gemm".into()),
            input: vec!["x".into(), "fc.weight".into()],
            output: vec!["logits".into()],
            attribute: vec![AttributeProto {
                name: Some("transB".into()),
                i: Some(1),
                r#type: Some(2),
                ..Default::default()
            }],
            ..Default::default()
        };
        let model = ModelProto {
            ir_version: Some(8),
            opset_import: vec![OperatorSetIdProto {
                domain: Some(String::new()),
                version: Some(17),
            }],
            graph: Some(GraphProto {
                node: vec![node],
                initializer: vec![w],
                input: vec![value(
                    "x",
                    &[Dim::DimParam("batch".into()), Dim::DimValue(n)],
                )],
                output: vec![value(
                    "logits",
                    &[Dim::DimParam("batch".into()), Dim::DimValue(n)],
                )],
                ..Default::default()
            }),
            ..Default::default()
        };
        let p = std::env::temp_dir().join(format!("vramscope-bench-{}.onnx", std::process::id()));
        std::fs::write(&p, model.encode_to_vec()).expect("write bench model");
        p
    })
}

#[divan::bench]
fn read_100mb() -> usize {
    onnx::read(divan::black_box(big_model()))
        .expect("reads")
        .order
        .len()
}

#[divan::bench]
fn load_100mb() -> usize {
    let o = OnnxOptions {
        batch: 32,
        seq_len: 128,
        chw: (3, 224, 224),
    };
    onnx::load(divan::black_box(big_model()), &o)
        .expect("loads")
        .nodes
        .len()
}
