//! Reading an ONNX file: memory-mapped, decoded with prost so that `raw_data` fields borrow the map
//! (initializer data is never read or copied), then checked: a graph, a topological order without
//! cycles or dangling names, initializer sizes from dims × dtype.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use prost::Message;

use super::proto::{tensor_proto::DataType, ModelProto, TensorProto};
use super::OnnxError;
use vramscope_core::DType;

/// A decoded ONNX model, its nodes in a checked topological order.
#[derive(Debug)]
pub struct OnnxFile {
    /// Where it was read from.
    pub path: PathBuf,
    /// The decoded model (initializer bytes point into the memory map).
    pub model: ModelProto,
    /// Indices of `model.graph.node` in execution order.
    pub order: Vec<usize>,
}

impl OnnxFile {
    /// The graph (checked to exist by [`read`]).
    pub fn graph(&self) -> &super::proto::GraphProto {
        // read() refuses models without a graph
        self.model.graph.as_ref().unwrap_or(&EMPTY_GRAPH)
    }

    /// Initializers by name.
    pub fn initializers(&self) -> HashMap<&str, &TensorProto> {
        self.graph()
            .initializer
            .iter()
            .map(|t| (t.name(), t))
            .collect()
    }

    /// Total bytes of the initializers, from their dims and dtypes (never from their data).
    pub fn initializer_bytes(&self) -> Result<u64, OnnxError> {
        let mut total = 0u64;
        for t in &self.graph().initializer {
            total = total.saturating_add(tensor_bytes(&self.path, t)?);
        }
        Ok(total)
    }
}

static EMPTY_GRAPH: super::proto::GraphProto = super::proto::GraphProto {
    node: Vec::new(),
    name: None,
    initializer: Vec::new(),
    sparse_initializer: Vec::new(),
    doc_string: None,
    input: Vec::new(),
    output: Vec::new(),
    value_info: Vec::new(),
    quantization_annotation: Vec::new(),
    metadata_props: Vec::new(),
};

/// The engine dtype of an ONNX element type, if it has one.
pub fn dtype_of(elem_type: i32) -> Option<DType> {
    Some(match DataType::try_from(elem_type).ok()? {
        DataType::Float => DType::F32,
        DataType::Float16 => DType::F16,
        DataType::Bfloat16 => DType::BF16,
        DataType::Double => DType::F64,
        DataType::Int64 => DType::I64,
        DataType::Int32 => DType::I32,
        DataType::Uint8 | DataType::Int8 => DType::U8,
        DataType::Bool => DType::Bool,
        _ => return None,
    })
}

/// Bytes of an initializer from dims × dtype, with overflow and negative dims refused.
pub fn tensor_bytes(path: &Path, t: &TensorProto) -> Result<u64, OnnxError> {
    let dt = dtype_of(t.data_type()).ok_or_else(|| OnnxError::Invalid {
        path: path.to_path_buf(),
        what: format!(
            "initializer `{}` has element type {}, which vramscope does not know",
            t.name(),
            t.data_type()
        ),
    })?;
    let mut n = dt.size();
    for &d in &t.dims {
        n = u64::try_from(d)
            .ok()
            .and_then(|d| n.checked_mul(d))
            .ok_or_else(|| OnnxError::Invalid {
                path: path.to_path_buf(),
                what: format!(
                    "initializer `{}` has dims {:?}: negative or too large",
                    t.name(),
                    t.dims
                ),
            })?;
    }
    Ok(n)
}

/// Memory-maps and decodes `path`, and orders its nodes topologically.
pub fn read(path: &Path) -> Result<OnnxFile, OnnxError> {
    let io = |e: std::io::Error| OnnxError::Io {
        path: path.to_path_buf(),
        source: e,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let len = file.metadata().map_err(io)?.len();
    let bytes = if len == 0 {
        Bytes::new()
    } else {
        // SAFETY: the map is read-only; a file truncated by another process while mapped would
        // fault, as with any mmap-based reader (documented in docs/onnx.md).
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        Bytes::from_owner(map)
    };
    let model = ModelProto::decode(bytes).map_err(|e| OnnxError::Invalid {
        path: path.to_path_buf(),
        what: format!("not a valid ONNX protobuf (truncated or corrupt?): {e}"),
    })?;
    let graph = model.graph.as_ref().ok_or_else(|| OnnxError::Invalid {
        path: path.to_path_buf(),
        what: "the model has no graph (is this an ONNX model file?)".into(),
    })?;
    if graph.node.is_empty() {
        return Err(OnnxError::Invalid {
            path: path.to_path_buf(),
            what: "the graph has no nodes".into(),
        });
    }
    let order = topo_order(path, graph)?;
    Ok(OnnxFile {
        path: path.to_path_buf(),
        model,
        order,
    })
}

/// Kahn's algorithm, preferring file order; errors name dangling inputs and cycles.
fn topo_order(path: &Path, g: &super::proto::GraphProto) -> Result<Vec<usize>, OnnxError> {
    let mut producer: HashMap<&str, usize> = HashMap::new();
    for (i, n) in g.node.iter().enumerate() {
        for o in n.output.iter().filter(|o| !o.is_empty()) {
            if producer.insert(o.as_str(), i).is_some() {
                return Err(OnnxError::Invalid {
                    path: path.to_path_buf(),
                    what: format!("value `{o}` is produced twice (node `{}`)", n.name()),
                });
            }
        }
    }
    let external: std::collections::HashSet<&str> = g
        .input
        .iter()
        .map(|v| v.name())
        .chain(g.initializer.iter().map(|t| t.name()))
        .collect();
    let mut indegree = vec![0usize; g.node.len()];
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); g.node.len()];
    for (i, n) in g.node.iter().enumerate() {
        for inp in n.input.iter().filter(|s| !s.is_empty()) {
            match producer.get(inp.as_str()) {
                Some(&p) => {
                    indegree[i] += 1;
                    users[p].push(i);
                }
                None if external.contains(inp.as_str()) => {}
                None => {
                    return Err(OnnxError::Invalid {
                        path: path.to_path_buf(),
                        what: format!(
                            "node `{}` ({}) reads `{inp}`, which no node, input or initializer provides",
                            n.name(), n.op_type()
                        ),
                    })
                }
            }
        }
    }
    let mut ready: std::collections::BinaryHeap<std::cmp::Reverse<usize>> = (0..g.node.len())
        .filter(|&i| indegree[i] == 0)
        .map(std::cmp::Reverse)
        .collect();
    let mut order = Vec::with_capacity(g.node.len());
    while let Some(std::cmp::Reverse(i)) = ready.pop() {
        order.push(i);
        for &u in &users[i] {
            indegree[u] -= 1;
            if indegree[u] == 0 {
                ready.push(std::cmp::Reverse(u));
            }
        }
    }
    if order.len() < g.node.len() {
        let stuck: Vec<String> = (0..g.node.len())
            .filter(|&i| indegree[i] > 0)
            .take(5)
            .map(|i| format!("`{}` ({})", g.node[i].name(), g.node[i].op_type()))
            .collect();
        return Err(OnnxError::Invalid {
            path: path.to_path_buf(),
            what: format!("the graph has a cycle through nodes {}", stuck.join(", ")),
        });
    }
    Ok(order)
}
