//! The ONNX front-end: any exported network, read as a graph only (weights are never read), with
//! symbolic dims bound to the batch size and sequence length, lowered onto the engine's ops with
//! training semantics and module paths recovered from the exporter's node names. See docs/onnx.md.

mod attention;
mod consts;
mod file;
mod fold;
mod fuse;
mod layout;
mod lower;
mod modules;
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto;
mod rnn;
mod scope;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use vramscope_core::ir::Task;
use vramscope_core::{Graph, GraphBuilder};

pub use file::{read, OnnxFile};

/// An error reading or lowering an ONNX file.
#[derive(Debug, thiserror::Error)]
pub enum OnnxError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a valid or usable ONNX model.
    #[error("{}: {what}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong and what was expected.
        what: String,
    },
    /// Ops the front-end does not support, with the nodes that use them.
    #[error("{}: unsupported ONNX ops (nothing was estimated): {}", path.display(), list.join("; "))]
    Unsupported {
        /// The file.
        path: PathBuf,
        /// `OpType: node names` entries.
        list: Vec<String>,
    },
    /// A node could not be lowered (shapes, attributes).
    #[error("{}: {what}", path.display())]
    Lowering {
        /// The file.
        path: PathBuf,
        /// The node and the problem.
        what: String,
    },
}

/// Values for the model's symbolic input dims.
#[derive(Debug, Clone)]
pub struct OnnxOptions {
    /// `--batch-size`: dims named like `batch`, and dim 0 of inputs.
    pub batch: u64,
    /// `--seq-len`: dims named like `sequence`/`seq`/`len`, and dim 1 of token inputs.
    pub seq_len: u64,
    /// `--input` C, H, W: symbolic dims 1..3 of 4-D inputs.
    pub chw: (u64, u64, u64),
}

/// Ops the front-end lowers.
const SUPPORTED: &[&str] = &[
    "Conv",
    "ConvTranspose",
    "Gemm",
    "MatMul",
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Relu",
    "LeakyRelu",
    "Sigmoid",
    "Tanh",
    "Gelu",
    "Erf",
    "HardSwish",
    "HardSigmoid",
    "Clip",
    "BatchNormalization",
    "LayerNormalization",
    "GroupNormalization",
    "InstanceNormalization",
    "MaxPool",
    "AveragePool",
    "GlobalAveragePool",
    "Flatten",
    "Reshape",
    "Transpose",
    "Concat",
    "Split",
    "Slice",
    "Gather",
    "Unsqueeze",
    "Squeeze",
    "Softmax",
    "LogSoftmax",
    "ReduceMean",
    "Pow",
    "Sqrt",
    "Where",
    "Cast",
    "Expand",
    "Shape",
    "Size",
    "Constant",
    "ConstantOfShape",
    "Dropout",
    "Identity",
    "Range",
    "Equal",
    "Neg",
    "Exp",
    "Log",
    "Abs",
    "Reciprocal",
    "Elu",
    "Selu",
    "Softplus",
    "Sin",
    "Cos",
    "Floor",
    "Ceil",
    "Round",
    "Sign",
    "LSTM",
    "GRU",
    "Attention",
    "Mod",
    "Trilu",
    "IsNaN",
    "Not",
    "Less",
    "Greater",
    "LessOrEqual",
    "GreaterOrEqual",
    "And",
    "Or",
    "Min",
    "Max",
];

/// Ops of other domains the front-end lowers.
const SUPPORTED_CUSTOM: &[(&str, &str)] = &[("com.microsoft", "Attention")];

/// A lowered model: the graph and every value's inferred shape.
#[derive(Debug)]
pub struct Lowered {
    /// The forward program.
    pub graph: Graph,
    /// Inferred shape of every ONNX value (by name).
    pub shapes: BTreeMap<String, Vec<u64>>,
}

/// Reads `path` and builds the forward program (classification: the first output is `[B, K]`).
pub fn load(path: &Path, opts: &OnnxOptions) -> Result<Graph, OnnxError> {
    Ok(lower(&read(path)?, opts)?.graph)
}

fn bind_dim(name: &str, axis: usize, rank: usize, is_float: bool, o: &OnnxOptions) -> Option<u64> {
    let l = name.to_ascii_lowercase();
    if l.contains("batch") || l == "n" || l == "b" {
        return Some(o.batch);
    }
    if l.contains("seq") || l.contains("len") || l.contains("token") || l.contains("time") {
        return Some(o.seq_len);
    }
    match (axis, rank, is_float) {
        (0, _, _) => Some(o.batch),
        (1, 4, true) => Some(o.chw.0),
        (2, 4, true) => Some(o.chw.1),
        (3, 4, true) => Some(o.chw.2),
        (1, _, _) => Some(o.seq_len),
        _ => None,
    }
}

/// Lowers a read file for the given options.
pub fn lower(f: &OnnxFile, opts: &OnnxOptions) -> Result<Lowered, OnnxError> {
    // modules recognised as a whole (nn.MultiheadAttention) need their inner shapes first: a
    // generic pass gives them
    let has_modules = f
        .graph()
        .initializer
        .iter()
        .any(|t| t.name().ends_with("in_proj_weight"));
    if !has_modules {
        return lower_pass(f, opts, None);
    }
    match lower_pass(f, opts, None) {
        Ok(first) => {
            let mut second = lower_pass(f, opts, Some(first.shapes.clone()))?;
            for (k, v) in first.shapes {
                second.shapes.entry(k).or_insert(v);
            }
            Ok(second)
        }
        Err(e) => Err(e),
    }
}

fn lower_pass(
    f: &OnnxFile,
    opts: &OnnxOptions,
    hints: Option<BTreeMap<String, Vec<u64>>>,
) -> Result<Lowered, OnnxError> {
    let invalid = |what: String| OnnxError::Invalid {
        path: f.path.clone(),
        what,
    };
    let g = f.graph();
    // unsupported ops first, all of them, with node names
    let mut bad: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for n in &g.node {
        let custom = !(n.domain().is_empty() || n.domain() == "ai.onnx");
        let known = if custom {
            SUPPORTED_CUSTOM.contains(&(n.domain(), n.op_type()))
        } else {
            SUPPORTED.contains(&n.op_type())
        };
        if !known {
            let key = if custom {
                format!("{}::{}", n.domain(), n.op_type())
            } else {
                n.op_type().to_string()
            };
            bad.entry(key).or_default().push(format!("`{}`", n.name()));
        }
    }
    if !bad.is_empty() {
        return Err(OnnxError::Unsupported {
            path: f.path.clone(),
            list: bad
                .into_iter()
                .map(|(op, nodes)| {
                    let more = if nodes.len() > 5 {
                        format!(" and {} more", nodes.len() - 5)
                    } else {
                        String::new()
                    };
                    format!("{op}: {}{more}", nodes[..nodes.len().min(5)].join(", "))
                })
                .collect(),
        });
    }
    for t in &g.initializer {
        file::tensor_bytes(&f.path, t)?;
    }
    let name = f
        .path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "onnx".into());
    let mut b = GraphBuilder::new(&name, "OnnxModel");
    let mut lw = lower::Lowerer::new(f);
    lw.hints = hints;
    let inits: std::collections::HashSet<&str> = g.initializer.iter().map(|t| t.name()).collect();
    for vi in g.input.iter().filter(|v| !inits.contains(v.name())) {
        let tt = match vi.r#type.as_ref().and_then(|t| t.value.as_ref()) {
            Some(proto::type_proto::Value::TensorType(tt)) => tt,
            _ => return Err(invalid(format!("input `{}` is not a tensor", vi.name()))),
        };
        let dtype = file::dtype_of(tt.elem_type()).ok_or_else(|| {
            invalid(format!(
                "input `{}` has unsupported element type {}",
                vi.name(),
                tt.elem_type()
            ))
        })?;
        let dims = tt.shape.as_ref().map(|s| s.dim.as_slice()).unwrap_or(&[]);
        let rank = dims.len();
        let mut shape = Vec::with_capacity(rank);
        for (axis, d) in dims.iter().enumerate() {
            use proto::tensor_shape_proto::dimension::Value as D;
            let v = match &d.value {
                Some(D::DimValue(v)) if *v > 0 => Some(*v as u64),
                Some(D::DimValue(v)) if *v < 0 => {
                    return Err(invalid(format!("input `{}` has dim {v} < 0", vi.name())))
                }
                Some(D::DimParam(p)) => bind_dim(p, axis, rank, dtype.is_float(), opts),
                _ => bind_dim("", axis, rank, dtype.is_float(), opts),
            };
            shape.push(v.ok_or_else(|| {
                invalid(format!(
                    "input `{}` dim {axis} is symbolic and not a batch, sequence or image dim",
                    vi.name()
                ))
            })?);
        }
        let t = b.input(shape, dtype);
        lw.shapes.insert(vi.name().to_string(), b.shape(t).to_vec());
        lw.vals.insert(vi.name().to_string(), lower::Val::Act(t));
    }
    let mut resolver = scope::ScopeResolver::default();
    // `Constant` nodes depend on nothing and make no tensors: lowered first, they do not split
    // the module calls the exporter interleaves them with
    let is_constant = |i: usize| g.node[i].op_type() == "Constant" && g.node[i].input.is_empty();
    for &i in f.order.iter().filter(|&&i| is_constant(i)) {
        lw.lower(&mut b, i, None);
    }
    let items: Vec<lower::Item> = f
        .order
        .iter()
        .filter(|&&i| !is_constant(i) && !lw.fusions.absorbed.contains(&i))
        .map(|&i| lower::Item {
            node: i,
            levels: resolver.levels(g.node[i].name()),
        })
        .collect();
    lower::emit_items(&mut b, &mut lw, &items, 0);
    if let Some(e) = b.first_error() {
        return Err(OnnxError::Lowering {
            path: f.path.clone(),
            what: e.to_string(),
        });
    }
    if let Some(e) = lw.error.take() {
        return Err(OnnxError::Lowering {
            path: f.path.clone(),
            what: e,
        });
    }
    let out_name = g
        .output
        .first()
        .map(|o| o.name())
        .ok_or_else(|| invalid("the graph has no outputs".into()))?;
    let out = match lw.vals.get(out_name) {
        Some(lower::Val::Act(t)) => *t,
        _ => {
            return Err(invalid(format!(
                "output `{out_name}` is not computed from the inputs"
            )))
        }
    };
    let s = b.shape(out).to_vec();
    if s.len() != 2 {
        return Err(invalid(format!(
            "output `{out_name}` has shape {s:?}; vramscope trains ONNX models as classifiers and expects [batch, classes]"
        )));
    }
    let shapes = std::mem::take(&mut lw.shapes);
    let graph = b
        .finish(&[out], Task::Classification { num_classes: s[1] })
        .map_err(|e| OnnxError::Lowering {
            path: f.path.clone(),
            what: e.to_string(),
        })?;
    Ok(Lowered { graph, shapes })
}
