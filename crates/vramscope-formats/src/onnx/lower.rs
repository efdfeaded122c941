//! Lowering ONNX nodes onto the engine's ops with PyTorch training semantics, inside the module
//! scopes recovered from node names; constants are folded as they appear.

use std::collections::{BTreeMap, HashMap, HashSet};

use vramscope_core::ops::{
    Activation, ActivationKind, AdaptiveAvgPool2d, Add, AvgPool2d, BatchNorm2d, Cat, Contiguous,
    Conv2d, ConvTranspose2d, Dropout, Elementwise, GroupNorm, LayerNorm, Linear, LogSoftmax,
    MatMul, MaxPool2d, Mean, Mul, MulScalar, Op, Select, Slice, Softmax, View,
};
use vramscope_core::{DType, GraphBuilder, TensorId};

use super::consts::{self, Konst};
use super::file::{dtype_of, OnnxFile};
use super::proto::{attribute_proto::AttributeType, NodeProto, TensorProto};
use super::scope::Level;

/// What an ONNX value is during lowering.
#[derive(Debug, Clone)]
pub enum Val {
    /// A tensor of the simulated program.
    Act(TensorId),
    /// A small constant.
    Const(Konst),
    /// An initializer not yet used as an activation (index into the graph's initializers).
    Init(usize),
}

/// Lowering state.
pub struct Lowerer<'a> {
    pub(super) file: &'a OnnxFile,
    pub(super) vals: HashMap<String, Val>,
    pub(super) uses: HashMap<String, usize>,
    /// Producer op type of each engine tensor made by a node.
    producer: HashMap<TensorId, String>,
    /// Tensors that are non-contiguous views (`Transpose`).
    noncontig: HashSet<TensorId>,
    /// MatMul node → the Add node fused into it as a `Linear` bias.
    pub(super) fused_add: HashMap<usize, usize>,
    /// Every value's inferred shape.
    pub shapes: BTreeMap<String, Vec<u64>>,
    /// The first error.
    pub error: Option<String>,
}

type R<T> = Result<T, String>;

fn attr<'n>(n: &'n NodeProto, name: &str) -> Option<&'n super::proto::AttributeProto> {
    n.attribute.iter().find(|a| a.name() == name)
}

fn attr_i(n: &NodeProto, name: &str, default: i64) -> i64 {
    attr(n, name).map_or(default, |a| a.i())
}

fn attr_f(n: &NodeProto, name: &str, default: f64) -> f64 {
    attr(n, name).map_or(default, |a| a.f() as f64)
}

fn attr_ints(n: &NodeProto, name: &str) -> Option<Vec<i64>> {
    attr(n, name).map(|a| a.ints.clone())
}

fn u(v: i64, what: &str) -> R<u64> {
    u64::try_from(v).map_err(|_| format!("{what} = {v} must not be negative"))
}

/// A square window attribute (`kernel_shape`, `strides`, `dilations`) as one number.
fn square(n: &NodeProto, name: &str, default: i64) -> R<u64> {
    match attr_ints(n, name).as_deref() {
        None | Some([]) => u(default, name),
        Some([a, b]) if a == b => u(*a, name),
        Some(v) => Err(format!(
            "{name} {v:?}: only square 2-D windows are supported"
        )),
    }
}

/// Symmetric 2-D pads as (h, w).
fn pads2(n: &NodeProto) -> R<(u64, u64)> {
    if let Some(a) = attr(n, "auto_pad") {
        let s = a.s.as_deref().unwrap_or_default();
        if !s.is_empty() && s != b"NOTSET" && s != b"VALID" {
            return Err(format!(
                "auto_pad {} is not supported (export with explicit pads)",
                String::from_utf8_lossy(s)
            ));
        }
    }
    match attr_ints(n, "pads").as_deref() {
        None | Some([]) => Ok((0, 0)),
        Some([h0, w0, h1, w1]) if h0 == h1 && w0 == w1 => Ok((u(*h0, "pads")?, u(*w0, "pads")?)),
        Some(v) => Err(format!(
            "pads {v:?}: only symmetric 2-D padding is supported"
        )),
    }
}

/// Producers after which PyTorch code typically runs an in-place op (their backward does not read
/// their output).
fn inplace_ok_after(op: &str) -> bool {
    matches!(
        op,
        "Conv"
            | "ConvTranspose"
            | "BatchNormalization"
            | "Add"
            | "Gemm"
            | "Concat"
            | "MaxPool"
            | "GroupNormalization"
            | "InstanceNormalization"
            | "LayerNormalization"
    )
}

impl<'a> Lowerer<'a> {
    /// A lowerer over `file`'s graph.
    pub fn new(file: &'a OnnxFile) -> Self {
        let g = file.graph();
        let mut uses: HashMap<String, usize> = HashMap::new();
        for n in &g.node {
            for i in n.input.iter().filter(|s| !s.is_empty()) {
                *uses.entry(i.clone()).or_default() += 1;
            }
        }
        for o in &g.output {
            *uses.entry(o.name().to_string()).or_default() += 1;
        }
        let mut vals = HashMap::new();
        for (i, t) in g.initializer.iter().enumerate() {
            vals.insert(t.name().to_string(), Val::Init(i));
        }
        // MatMul(x, W) + Add(., b) with initializers W [in, out] and b [out]: one nn.Linear
        let mut producer_of: HashMap<&str, usize> = HashMap::new();
        for (i, n) in g.node.iter().enumerate() {
            for o in &n.output {
                producer_of.insert(o.as_str(), i);
            }
        }
        let is_init = |s: &str| g.initializer.iter().any(|t| t.name() == s);
        let mut fused_add = HashMap::new();
        for (i, n) in g.node.iter().enumerate() {
            if n.op_type() != "Add" || n.input.len() != 2 {
                continue;
            }
            let (a, b) = (&n.input[0], &n.input[1]);
            let (mm_out, bias) = if is_init(b) { (a, b) } else { (b, a) };
            if !is_init(bias) || uses.get(mm_out.as_str()) != Some(&1) {
                continue;
            }
            if let Some(&m) = producer_of.get(mm_out.as_str()) {
                let mm = &g.node[m];
                let bias_1d = g
                    .initializer
                    .iter()
                    .any(|t| t.name() == bias.as_str() && t.dims.len() == 1);
                if mm.op_type() == "MatMul"
                    && mm.input.len() == 2
                    && is_init(&mm.input[1])
                    && bias_1d
                {
                    fused_add.insert(m, i);
                }
            }
        }
        Lowerer {
            file,
            vals,
            uses,
            producer: HashMap::new(),
            noncontig: HashSet::new(),
            fused_add,
            shapes: BTreeMap::new(),
            error: None,
        }
    }

    fn init(&self, i: usize) -> &'a TensorProto {
        &self.file.graph().initializer[i]
    }

    fn init_dims(&self, name: &str) -> R<Vec<u64>> {
        match self.vals.get(name) {
            Some(Val::Init(i)) => self
                .init(*i)
                .dims
                .iter()
                .map(|&d| u(d, "initializer dim"))
                .collect(),
            _ => Err(format!("`{name}` must be an initializer (a weight)")),
        }
    }

    /// The constant value of input `name` (a constant node output or a small initializer).
    fn konst(&self, name: &str) -> Option<Konst> {
        match self.vals.get(name)? {
            Val::Const(k) => Some(k.clone()),
            Val::Init(i) => {
                let t = self.init(*i);
                let external = if t.data_location == Some(1) {
                    Some(self.read_external(t)?)
                } else {
                    None
                };
                consts::decode(t, external.as_deref())
            }
            Val::Act(_) => None,
        }
    }

    /// Reads a *small* external tensor (shape constants only; weights are never read).
    fn read_external(&self, t: &TensorProto) -> Option<Vec<u8>> {
        use std::io::{Read, Seek, SeekFrom};
        let get = |k: &str| {
            t.external_data
                .iter()
                .find(|e| e.key() == k)
                .map(|e| e.value().to_string())
        };
        let n: u64 = t.dims.iter().map(|&d| d.max(0) as u64).product();
        if n > consts::MAX_VALUES {
            return None;
        }
        let loc = get("location")?;
        let offset: u64 = get("offset").and_then(|s| s.parse().ok()).unwrap_or(0);
        let length: u64 = get("length")
            .and_then(|s| s.parse().ok())
            .unwrap_or(n * 8)
            .min(consts::MAX_VALUES * 8);
        let dir = self.file.path.parent()?;
        let p = dir.join(loc);
        if !p.starts_with(dir) {
            return None;
        }
        let mut f = std::fs::File::open(p).ok()?;
        f.seek(SeekFrom::Start(offset)).ok()?;
        let mut buf = vec![0u8; length as usize];
        f.read_exact(&mut buf).ok()?;
        Some(buf)
    }

    fn ints(&self, name: &str, what: &str) -> R<Vec<i64>> {
        self.konst(name)
            .and_then(|k| k.as_ints())
            .ok_or_else(|| format!("{what} `{name}` must be a constant known before run time"))
    }

    /// Input `name` as an engine tensor; an initializer becomes a parameter of the current module.
    fn act(&mut self, b: &mut GraphBuilder, name: &str) -> R<TensorId> {
        match self.vals.get(name).cloned() {
            Some(Val::Act(t)) => Ok(t),
            Some(Val::Init(i)) => {
                let t = self.init(i);
                let dims = self.init_dims(name)?;
                let short = t.name().rsplit('.').next().unwrap_or(t.name()).to_string();
                let id = if dtype_of(t.data_type()).is_some_and(DType::is_float) {
                    b.parameter(&short, dims)
                } else {
                    return Err(format!("integer initializer `{name}` used as data"));
                };
                self.vals.insert(name.to_string(), Val::Act(id));
                Ok(id)
            }
            Some(Val::Const(k)) => Err(format!(
                "`{name}` is a constant of shape {:?} where a tensor was expected",
                k.dims
            )),
            None => Err(format!("`{name}` is not defined")),
        }
    }

    fn is_act(&self, name: &str) -> bool {
        matches!(self.vals.get(name), Some(Val::Act(_)))
    }

    fn set(&mut self, b: &GraphBuilder, name: &str, v: Val) {
        let shape = match &v {
            Val::Act(t) => b.shape(*t).to_vec(),
            Val::Const(k) => k.dims.clone(),
            Val::Init(i) => self.init_dims(self.init(*i).name()).unwrap_or_default(),
        };
        self.shapes.insert(name.to_string(), shape);
        self.vals.insert(name.to_string(), v);
    }

    /// Whether an in-place op on `name` is what PyTorch code would do (single use, producer
    /// whose backward does not read its output).
    fn can_inplace(&self, name: &str, t: TensorId) -> bool {
        self.uses.get(name) == Some(&1)
            && !self.noncontig.contains(&t)
            && self.producer.get(&t).is_some_and(|p| inplace_ok_after(p))
    }

    fn emit(
        &mut self,
        b: &mut GraphBuilder,
        leaf: Option<&str>,
        op: impl Op + 'static,
        inputs: &[TensorId],
    ) -> TensorId {
        match leaf {
            Some(name) => b.layer(name, op, inputs),
            None => b.op(op, inputs),
        }
    }

    /// The module name a parameterized op without its own scope gets: from its weight's name.
    fn param_leaf(&self, leaf: Option<&str>, weight: &str, idx: usize) -> String {
        if let Some(l) = leaf {
            return l.to_string();
        }
        match weight.rsplit_once('.') {
            Some((m, _)) if !m.contains("::") && !m.is_empty() => {
                m.rsplit('.').next().unwrap_or(m).to_string()
            }
            _ => format!(
                "{}_{idx}",
                self.file.graph().node[idx].op_type().to_lowercase()
            ),
        }
    }

    fn contiguous(&mut self, b: &mut GraphBuilder, t: TensorId) -> TensorId {
        if self.noncontig.contains(&t) {
            let s = b.shape(t).to_vec();
            b.op(
                Contiguous {
                    name: "contiguous",
                    shape: s,
                },
                &[t],
            )
        } else {
            t
        }
    }

    /// Lowers node `idx`; `leaf` is the module name when the node is the whole forward of a child
    /// module of the current one.
    pub fn lower(&mut self, b: &mut GraphBuilder, idx: usize, leaf: Option<&str>) {
        if self.error.is_some() || self.fused_add.values().any(|&a| a == idx) {
            return;
        }
        let n = &self.file.graph().node[idx];
        if let Err(e) = self.lower_node(b, idx, n, leaf) {
            self.error = Some(format!("node `{}` ({}): {e}", n.name(), n.op_type()));
        }
    }

    fn lower_node(
        &mut self,
        b: &mut GraphBuilder,
        idx: usize,
        n: &'a NodeProto,
        leaf: Option<&str>,
    ) -> R<()> {
        let inp = |i: usize| n.input.get(i).map(String::as_str).unwrap_or("");
        let out0 = n.output.first().map(String::as_str).unwrap_or("");
        let op = n.op_type();
        // constant folding first: every input constant
        if op != "Dropout"
            && !n
                .input
                .iter()
                .filter(|s| !s.is_empty())
                .any(|s| self.is_act(s))
        {
            if let Some(k) = self.fold(n)? {
                self.set(b, out0, Val::Const(k));
                return Ok(());
            }
        }
        let result: TensorId = match op {
            "Identity" => self.act(b, inp(0))?,
            "Conv" => {
                let x = self.act(b, inp(0))?;
                let w = self.init_dims(inp(1))?;
                if w.len() != 4 {
                    return Err(format!("weight {w:?}: only 2-D convolutions are supported"));
                }
                let g = u(attr_i(n, "group", 1), "group")?;
                let s = b.shape(x).to_vec();
                let (ph, pw) = pads2(n)?;
                let st = square(n, "strides", 1)?;
                let d = square(n, "dilations", 1)?;
                let c = Conv2d {
                    in_channels: s.get(1).copied().unwrap_or(0),
                    out_channels: w[0],
                    kernel: (w[2], w[3]),
                    stride: (st, st),
                    padding: (ph, pw),
                    dilation: (d, d),
                    groups: g,
                    bias: !inp(2).is_empty(),
                };
                let name = self.param_leaf(leaf, inp(1), idx);
                b.layer(&name, c, &[x])
            }
            "ConvTranspose" => {
                let x = self.act(b, inp(0))?;
                let w = self.init_dims(inp(1))?;
                if w.len() != 4 || w[2] != w[3] {
                    return Err(format!(
                        "weight {w:?}: only square 2-D kernels are supported"
                    ));
                }
                let g = u(attr_i(n, "group", 1), "group")?;
                let (ph, pw) = pads2(n)?;
                if ph != pw {
                    return Err("only equal padding in height and width is supported".into());
                }
                let c = ConvTranspose2d {
                    in_channels: w[0],
                    out_channels: w[1] * g,
                    kernel: w[2],
                    stride: square(n, "strides", 1)?,
                    padding: ph,
                    output_padding: square(n, "output_padding", 0)?,
                    dilation: square(n, "dilations", 1)?,
                    groups: g,
                    bias: !inp(2).is_empty(),
                };
                let name = self.param_leaf(leaf, inp(1), idx);
                b.layer(&name, c, &[x])
            }
            "Gemm" | "MatMul" if matches!(self.vals.get(inp(1)), Some(Val::Init(_))) => {
                let x = self.act(b, inp(0))?;
                let w = self.init_dims(inp(1))?;
                if attr_i(n, "transA", 0) != 0 || w.len() != 2 {
                    return Err(format!("weight {w:?}: expected a 2-D weight, no transA"));
                }
                let (in_f, out_f) = if attr_i(n, "transB", 0) != 0 {
                    (w[1], w[0])
                } else {
                    (w[0], w[1])
                };
                let fused = self.fused_add.get(&idx).copied();
                let bias = if op == "Gemm" {
                    !inp(2).is_empty()
                } else {
                    fused.is_some()
                };
                let name = self.param_leaf(leaf, inp(1), idx);
                let y = b.layer(
                    &name,
                    Linear {
                        in_features: in_f,
                        out_features: out_f,
                        bias,
                    },
                    &[x],
                );
                self.producer.insert(y, "Gemm".into());
                if let Some(a) = fused {
                    let add = &self.file.graph().node[a];
                    if let Some(o) = add.output.first() {
                        self.set(b, o, Val::Act(y));
                    }
                }
                y
            }
            "MatMul" | "Gemm" => {
                let x = self.act(b, inp(0))?;
                let y = self.act(b, inp(1))?;
                b.op(MatMul, &[x, y])
            }
            "Add" | "Sub" | "Mul" | "Div" => return self.binary(b, n, leaf),
            "Relu" | "Sigmoid" | "Tanh" | "HardSwish" | "HardSigmoid" | "Gelu" => {
                let kind = match op {
                    "Relu" => ActivationKind::ReLU,
                    "Sigmoid" => ActivationKind::Sigmoid,
                    "Tanh" => ActivationKind::Tanh,
                    "HardSwish" => ActivationKind::Hardswish,
                    "HardSigmoid" => ActivationKind::Hardsigmoid,
                    _ => ActivationKind::GELU,
                };
                let x = self.act(b, inp(0))?;
                let inplace = matches!(op, "Relu" | "HardSwish") && self.can_inplace(inp(0), x);
                self.emit(b, leaf, Activation { kind, inplace }, &[x])
            }
            "Clip" => {
                let x = self.act(b, inp(0))?;
                let lo = self.konst(inp(1)).and_then(|k| k.scalar());
                let hi = self.konst(inp(2)).and_then(|k| k.scalar());
                if lo == Some(0.0) && hi == Some(6.0) {
                    let inplace = self.can_inplace(inp(0), x);
                    let a = Activation {
                        kind: ActivationKind::ReLU6,
                        inplace,
                    };
                    self.emit(b, leaf, a, &[x])
                } else {
                    self.emit(b, leaf, Elementwise::new("clamp", &[0]), &[x])
                }
            }
            "LeakyRelu" | "Elu" | "Selu" | "Erf" | "Abs" | "Log" | "Sin" | "Cos" | "Softplus" => {
                let x = self.act(b, inp(0))?;
                let name: &'static str = match op {
                    "LeakyRelu" => "leaky_relu",
                    "Erf" => "erf",
                    "Abs" => "abs",
                    "Log" => "log",
                    _ => "pointwise",
                };
                self.emit(b, leaf, Elementwise::new(name, &[0]), &[x])
            }
            "Sqrt" | "Exp" | "Reciprocal" => {
                let x = self.act(b, inp(0))?;
                let mut e = Elementwise::new("sqrt", &[]);
                e.saves_output = true;
                e.name = match op {
                    "Sqrt" => "sqrt",
                    "Exp" => "exp",
                    _ => "reciprocal",
                };
                self.emit(b, leaf, e, &[x])
            }
            "Neg" | "Floor" | "Ceil" | "Round" | "Sign" => {
                let x = self.act(b, inp(0))?;
                self.emit(b, leaf, Elementwise::new("neg", &[]), &[x])
            }
            "Pow" => {
                let x = self.act(b, inp(0))?;
                if self.is_act(inp(1)) {
                    let e = self.act(b, inp(1))?;
                    let mut p = Elementwise::new("pow", &[0, 1]);
                    p.saves_output = true;
                    self.emit(b, leaf, p, &[x, e])
                } else {
                    self.emit(b, leaf, Elementwise::new("pow", &[0]), &[x])
                }
            }
            "Where" => {
                let acts: Vec<TensorId> = n
                    .input
                    .iter()
                    .filter(|s| self.is_act(s))
                    .filter_map(|s| match self.vals.get(s.as_str()) {
                        Some(Val::Act(t)) => Some(*t),
                        _ => None,
                    })
                    .collect();
                let mut shape: Vec<u64> = Vec::new();
                for s in n.input.iter() {
                    let d = match self.vals.get(s.as_str()) {
                        Some(Val::Act(t)) => b.shape(*t).to_vec(),
                        Some(Val::Const(k)) => k.dims.clone(),
                        Some(Val::Init(i)) => self.init_dims(self.init(*i).name())?,
                        None => return Err(format!("`{s}` is not defined")),
                    };
                    shape = broadcast_dims(&shape, &d)?;
                }
                let mut e = Elementwise::new("where", &[0]);
                e.out_dtype = None;
                let y = self.emit(b, leaf, e, &acts);
                if b.shape(y) != shape.as_slice() {
                    let v = View {
                        name: "expand",
                        shapes: vec![shape],
                        expand: true,
                    };
                    b.op(v, &[y])
                } else {
                    y
                }
            }
            "Cast" => {
                let x = self.act(b, inp(0))?;
                let to = dtype_of(attr_i(n, "to", 1) as i32).unwrap_or(DType::F32);
                let from = {
                    // the simulated dtype in an fp32 run
                    if to.is_float() && b.shape(x).is_empty() {
                        to
                    } else {
                        DType::F32
                    }
                };
                if to == from || to.is_float() {
                    x
                } else {
                    let mut e = Elementwise::new("_to_copy", &[]);
                    e.out_dtype = Some(to);
                    self.emit(b, leaf, e, &[x])
                }
            }
            "BatchNormalization" => {
                let x = self.act(b, inp(0))?;
                let s = b.shape(x).to_vec();
                if s.len() != 4 {
                    return Err(format!(
                        "input {s:?}: only 4-D (BatchNorm2d) inputs are supported"
                    ));
                }
                let name = self.param_leaf(leaf, inp(1), idx);
                b.layer(&name, BatchNorm2d::new(s[1]), &[x])
            }
            "LayerNormalization" => {
                let x = self.act(b, inp(0))?;
                let s = b.shape(x).to_vec();
                let ax = consts::axis(attr_i(n, "axis", -1), s.len());
                if ax != Some(s.len().saturating_sub(1)) {
                    return Err("only normalization over the last axis is supported".into());
                }
                let mut ln = LayerNorm::new(*s.last().unwrap_or(&1));
                ln.bias = !inp(2).is_empty();
                let name = self.param_leaf(leaf, inp(1), idx);
                b.layer(&name, ln, &[x])
            }
            "GroupNormalization" | "InstanceNormalization" => {
                let x = self.act(b, inp(0))?;
                let s = b.shape(x).to_vec();
                let c = s.get(1).copied().unwrap_or(0);
                let groups = if op == "InstanceNormalization" {
                    c
                } else {
                    u(attr_i(n, "num_groups", 1), "num_groups")?
                };
                let name = self.param_leaf(leaf, inp(1), idx);
                b.layer(
                    &name,
                    GroupNorm {
                        channels: c,
                        groups,
                    },
                    &[x],
                )
            }
            "MaxPool" | "AveragePool" => {
                let x = self.act(b, inp(0))?;
                let k = square(n, "kernel_shape", 1)?;
                let st = square(n, "strides", 1)?;
                let (ph, pw) = pads2(n)?;
                if ph != pw || square(n, "dilations", 1)? != 1 {
                    return Err("only equal padding and no dilation are supported".into());
                }
                let ceil = attr_i(n, "ceil_mode", 0) != 0;
                if op == "MaxPool" {
                    let mut p = MaxPool2d::new(k, st, ph);
                    p.ceil_mode = ceil;
                    self.emit(b, leaf, p, &[x])
                } else {
                    let p = AvgPool2d {
                        kernel: k,
                        stride: st,
                        padding: ph,
                        ceil_mode: ceil,
                    };
                    self.emit(b, leaf, p, &[x])
                }
            }
            "GlobalAveragePool" => {
                let x = self.act(b, inp(0))?;
                self.emit(b, leaf, AdaptiveAvgPool2d { output: (1, 1) }, &[x])
            }
            "Flatten" | "Reshape" | "Unsqueeze" | "Squeeze" => {
                let x = self.act(b, inp(0))?;
                let s = b.shape(x).to_vec();
                let shape = self.view_shape(n, &s)?;
                let name = match op {
                    "Flatten" => "flatten",
                    "Reshape" => "view",
                    "Unsqueeze" => "unsqueeze",
                    _ => "squeeze",
                };
                let x = if matches!(op, "Flatten" | "Reshape") {
                    self.contiguous(b, x)
                } else {
                    x
                };
                let y = b.op(View::new(name, shape), &[x]);
                if self.noncontig.contains(&x) {
                    self.noncontig.insert(y);
                }
                y
            }
            "Transpose" => {
                let x = self.act(b, inp(0))?;
                let s = b.shape(x).to_vec();
                let perm =
                    attr_ints(n, "perm").unwrap_or_else(|| (0..s.len() as i64).rev().collect());
                let shape: Vec<u64> = perm
                    .iter()
                    .map(|&p| consts::axis(p, s.len()).map(|a| s[a]))
                    .collect::<Option<_>>()
                    .ok_or_else(|| format!("perm {perm:?} does not fit shape {s:?}"))?;
                let y = b.op(View::new("permute", shape), &[x]);
                // a permutation that moves a non-1 dim breaks contiguity
                let moved: Vec<u64> = perm
                    .iter()
                    .filter_map(|&p| consts::axis(p, s.len()))
                    .filter(|&a| s[a] != 1)
                    .map(|a| a as u64)
                    .collect();
                if moved.windows(2).any(|w| w[0] > w[1]) || self.noncontig.contains(&x) {
                    self.noncontig.insert(y);
                }
                y
            }
            "Expand" => {
                let x = self.act(b, inp(0))?;
                let target = self.ints(inp(1), "shape")?;
                let t: Vec<u64> = target.iter().map(|&d| d.max(1) as u64).collect();
                let shape = broadcast_dims(b.shape(x), &t)?;
                b.op(
                    View {
                        name: "expand",
                        shapes: vec![shape],
                        expand: true,
                    },
                    &[x],
                )
            }
            "Concat" => {
                let xs: Vec<TensorId> = n
                    .input
                    .iter()
                    .filter(|s| !s.is_empty())
                    .map(|s| self.act(b, s))
                    .collect::<R<_>>()?;
                let rank = b.shape(xs[0]).len();
                let dim = consts::axis(attr_i(n, "axis", 0), rank).ok_or("axis out of range")?;
                self.emit(b, leaf, Cat { dim }, &xs)
            }
            "Split" => {
                let x = self.act(b, inp(0))?;
                let s = b.shape(x).to_vec();
                let ax = consts::axis(attr_i(n, "axis", 0), s.len()).ok_or("axis out of range")?;
                let parts: Vec<u64> = if !inp(1).is_empty() {
                    self.ints(inp(1), "split")?
                        .iter()
                        .map(|&v| v.max(0) as u64)
                        .collect()
                } else if let Some(v) = attr_ints(n, "split") {
                    v.iter().map(|&v| v.max(0) as u64).collect()
                } else {
                    let k = n.output.len().max(1) as u64;
                    let chunk = s[ax].div_ceil(k);
                    (0..k)
                        .map(|i| chunk.min(s[ax].saturating_sub(i * chunk)))
                        .collect()
                };
                if parts.iter().sum::<u64>() != s[ax] || parts.len() != n.output.len() {
                    return Err(format!("split {parts:?} does not fit dimension {}", s[ax]));
                }
                let shapes: Vec<Vec<u64>> = parts
                    .iter()
                    .map(|&p| {
                        let mut o = s.clone();
                        o[ax] = p;
                        o
                    })
                    .collect();
                let outs = b.op_multi(
                    View {
                        name: "split",
                        shapes,
                        expand: false,
                    },
                    &[x],
                );
                for (name, t) in n.output.iter().zip(outs) {
                    if ax != 0 {
                        self.noncontig.insert(t);
                    }
                    self.set(b, name, Val::Act(t));
                }
                return Ok(());
            }
            "Slice" => {
                let x = self.act(b, inp(0))?;
                let s = b.shape(x).to_vec();
                let shape = self.slice_shape(n, &s)?;
                if shape == s {
                    x
                } else {
                    let y = b.op(Slice { shape }, &[x]);
                    self.noncontig.insert(y);
                    y
                }
            }
            "Gather" => {
                let x = self.act(b, inp(0))?;
                let s = b.shape(x).to_vec();
                let ax = consts::axis(attr_i(n, "axis", 0), s.len()).ok_or("axis out of range")?;
                match self.konst(inp(1)) {
                    Some(k) if k.dims.is_empty() => b.op(Select { dim: ax }, &[x]),
                    Some(k) => {
                        let mut o = s[..ax].to_vec();
                        o.extend(&k.dims);
                        o.extend(&s[ax + 1..]);
                        let e = Elementwise::new("index_select", &[]);
                        let y = b.op(e, &[x]);
                        b.op(View::new("view", o), &[y])
                    }
                    None => {
                        return Err(
                            "gathering with run-time indices (embeddings) is not supported yet"
                                .into(),
                        )
                    }
                }
            }
            "Softmax" | "LogSoftmax" => {
                let x = self.act(b, inp(0))?;
                let rank = b.shape(x).len();
                let dim = consts::axis(attr_i(n, "axis", -1), rank).ok_or("axis out of range")?;
                if op == "Softmax" {
                    self.emit(b, leaf, Softmax { dim }, &[x])
                } else {
                    self.emit(b, leaf, LogSoftmax { dim }, &[x])
                }
            }
            "ReduceMean" => {
                let x = self.act(b, inp(0))?;
                let rank = b.shape(x).len();
                let axes = if !inp(1).is_empty() {
                    self.ints(inp(1), "axes")?
                } else {
                    attr_ints(n, "axes").unwrap_or_else(|| (0..rank as i64).collect())
                };
                let dims: Vec<usize> = axes
                    .iter()
                    .map(|&a| consts::axis(a, rank))
                    .collect::<Option<_>>()
                    .ok_or("axes out of range")?;
                let keepdim = attr_i(n, "keepdims", 1) != 0;
                self.emit(b, leaf, Mean { dims, keepdim }, &[x])
            }
            "Dropout" => {
                let x = self.act(b, inp(0))?;
                let p = if inp(1).is_empty() {
                    attr_f(n, "ratio", 0.5)
                } else {
                    self.konst(inp(1)).and_then(|k| k.scalar()).unwrap_or(0.5)
                };
                if let Some(mask) = n.output.get(1).filter(|m| !m.is_empty()) {
                    if self.uses.get(mask.as_str()).copied().unwrap_or(0) > 0 {
                        return Err("the dropout mask is used by the graph".into());
                    }
                }
                if p == 0.0 {
                    x
                } else {
                    self.emit(b, leaf, Dropout { p }, &[x])
                }
            }
            "Shape" | "Size" => {
                let x = self.act(b, inp(0))?;
                let s: Vec<i64> = b.shape(x).iter().map(|&d| d as i64).collect();
                let k = if op == "Size" {
                    Konst {
                        dims: vec![],
                        vals: Some(vec![s.iter().product::<i64>() as f64]),
                        int: true,
                    }
                } else {
                    let r = s.len() as i64;
                    let clampi = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
                    let start = clampi(attr_i(n, "start", 0));
                    let end = clampi(attr_i(n, "end", r));
                    Konst::ints(&s[start..end.max(start)])
                };
                self.set(b, out0, Val::Const(k));
                return Ok(());
            }
            other => return Err(format!("op {other} with run-time inputs is not supported")),
        };
        self.producer.insert(result, op.to_string());
        self.set(b, out0, Val::Act(result));
        // secondary outputs nothing reads: training-mode batch norm's running statistics, the
        // dropout mask; they get their shapes only
        let side = match op {
            "BatchNormalization" => b.shape(result).get(1).map(|&c| vec![c]),
            "Dropout" => Some(b.shape(result).to_vec()),
            _ => None,
        };
        if let Some(dims) = side {
            for o in n.output.iter().skip(1).filter(|o| !o.is_empty()) {
                let k = Konst {
                    dims: dims.clone(),
                    vals: None,
                    int: op == "Dropout",
                };
                self.set(b, o, Val::Const(k));
            }
        }
        Ok(())
    }

    fn binary(&mut self, b: &mut GraphBuilder, n: &NodeProto, leaf: Option<&str>) -> R<()> {
        let op = n.op_type();
        let (a, c) = (
            n.input.first().cloned().unwrap_or_default(),
            n.input.get(1).cloned().unwrap_or_default(),
        );
        let scalar_const = |s: &str| {
            matches!(self.vals.get(s), Some(Val::Const(_)))
                || self.konst(s).is_some_and(|k| k.numel() == 1)
        };
        let (c_const, a_const) = (scalar_const(&c), scalar_const(&a));
        let y = if c_const || a_const {
            // tensor op Python number: a new tensor; nothing saved
            let x = if c_const {
                self.act(b, &a)?
            } else {
                self.act(b, &c)?
            };
            let xs = b.shape(x).to_vec();
            let k = if c_const { &c } else { &a };
            let kd = self.konst(k).map(|k| k.dims).unwrap_or_default();
            let y = match op {
                "Mul" | "Div" => b.op(MulScalar, &[x]),
                "Add" => b.op(Elementwise::new("add", &[]), &[x]),
                _ => b.op(Elementwise::new("sub", &[]), &[x]),
            };
            let full = broadcast_dims(&xs, &kd)?;
            if full != xs {
                let v = View {
                    name: "expand",
                    shapes: vec![full],
                    expand: true,
                };
                b.op(v, &[y])
            } else {
                y
            }
        } else {
            let x = self.act(b, &a)?;
            let z = self.act(b, &c)?;
            match op {
                "Add" => {
                    let out = broadcast_dims(b.shape(x), b.shape(z))?;
                    let inplace = out.as_slice() == b.shape(x) && self.can_inplace(&a, x);
                    self.emit(b, leaf, Add { inplace }, &[x, z])
                }
                "Mul" => self.emit(b, leaf, Mul, &[x, z]),
                "Sub" => self.emit(b, leaf, Elementwise::new("sub", &[]), &[x, z]),
                _ => self.emit(b, leaf, Elementwise::new("div", &[0, 1]), &[x, z]),
            }
        };
        self.producer.insert(y, op.to_string());
        let out = n.output.first().cloned().unwrap_or_default();
        self.set(b, &out, Val::Act(y));
        Ok(())
    }

    fn view_shape(&self, n: &NodeProto, s: &[u64]) -> R<Vec<u64>> {
        let inp1 = n.input.get(1).map(String::as_str).unwrap_or("");
        match n.op_type() {
            "Flatten" => {
                let ax = attr_i(n, "axis", 1);
                let ax = if ax < 0 { ax + s.len() as i64 } else { ax };
                let ax = usize::try_from(ax)
                    .ok()
                    .filter(|&a| a <= s.len())
                    .ok_or("axis out of range")?;
                Ok(vec![s[..ax].iter().product(), s[ax..].iter().product()])
            }
            "Reshape" => {
                let t = self.ints(inp1, "shape")?;
                consts::reshape_dims(s, &t).ok_or_else(|| format!("cannot reshape {s:?} to {t:?}"))
            }
            "Unsqueeze" => {
                let axes = if inp1.is_empty() {
                    attr_ints(n, "axes").unwrap_or_default()
                } else {
                    self.ints(inp1, "axes")?
                };
                let r = s.len() + axes.len();
                let mut ax: Vec<usize> = axes
                    .iter()
                    .map(|&a| consts::axis(a, r))
                    .collect::<Option<_>>()
                    .ok_or("axes out of range")?;
                ax.sort_unstable();
                let mut o = s.to_vec();
                for a in ax {
                    o.insert(a.min(o.len()), 1);
                }
                Ok(o)
            }
            _ => {
                let axes = if inp1.is_empty() {
                    attr_ints(n, "axes")
                } else {
                    Some(self.ints(inp1, "axes")?)
                };
                let drop: Vec<usize> = match axes {
                    Some(a) => a
                        .iter()
                        .map(|&a| consts::axis(a, s.len()))
                        .collect::<Option<_>>()
                        .ok_or("axes out of range")?,
                    None => (0..s.len()).filter(|&i| s[i] == 1).collect(),
                };
                Ok(s.iter()
                    .enumerate()
                    .filter(|(i, _)| !drop.contains(i))
                    .map(|(_, &d)| d)
                    .collect())
            }
        }
    }

    fn slice_shape(&self, n: &NodeProto, s: &[u64]) -> R<Vec<u64>> {
        let inp = |i: usize| n.input.get(i).map(String::as_str).unwrap_or("");
        let starts = self.ints(inp(1), "starts")?;
        let ends = self.ints(inp(2), "ends")?;
        let axes = if inp(3).is_empty() {
            (0..starts.len() as i64).collect()
        } else {
            self.ints(inp(3), "axes")?
        };
        let steps = if inp(4).is_empty() {
            vec![1; starts.len()]
        } else {
            self.ints(inp(4), "steps")?
        };
        let mut o = s.to_vec();
        #[allow(clippy::needless_range_loop)]
        for i in 0..starts.len() {
            let ax = axes
                .get(i)
                .and_then(|&a| consts::axis(a, s.len()))
                .ok_or("axes out of range")?;
            let (e, st) = (
                *ends.get(i).ok_or("ends too short")?,
                *steps.get(i).ok_or("steps too short")?,
            );
            o[ax] = consts::slice_len(s[ax], starts[i], e, st).ok_or("step 0")?;
        }
        Ok(o)
    }

    /// Constant folding of a node whose inputs are all constants; `None` when the op is not one
    /// that can be folded.
    fn fold(&self, n: &NodeProto) -> R<Option<Konst>> {
        let inp = |i: usize| n.input.get(i).map(String::as_str).unwrap_or("");
        let k = |i: usize| {
            self.konst(inp(i))
                .ok_or_else(|| format!("input `{}` is not a known constant", inp(i)))
        };
        let op = n.op_type();
        Ok(Some(match op {
            "Constant" => {
                let a = n.attribute.first().ok_or("Constant without a value")?;
                match Some(a.r#type()) {
                    Some(AttributeType::Tensor) => {
                        let t = a.t.as_ref().ok_or("Constant without a tensor")?;
                        consts::decode(t, None).ok_or("bad constant tensor")?
                    }
                    Some(AttributeType::Float) => Konst {
                        dims: vec![],
                        vals: Some(vec![a.f() as f64]),
                        int: false,
                    },
                    Some(AttributeType::Int) => Konst {
                        dims: vec![],
                        vals: Some(vec![a.i() as f64]),
                        int: true,
                    },
                    Some(AttributeType::Ints) => Konst::ints(&a.ints),
                    Some(AttributeType::Floats) => Konst {
                        dims: vec![a.floats.len() as u64],
                        vals: Some(a.floats.iter().map(|&f| f as f64).collect()),
                        int: false,
                    },
                    _ => return Err("unsupported Constant attribute".into()),
                }
            }
            "Identity" => k(0)?,
            "ConstantOfShape" => {
                let dims: Vec<u64> = self
                    .ints(inp(0), "shape")?
                    .iter()
                    .map(|&d| u(d, "shape"))
                    .collect::<R<_>>()?;
                let v = attr(n, "value")
                    .and_then(|a| a.t.as_ref())
                    .and_then(|t| consts::decode(t, None));
                let fill = v.as_ref().and_then(Konst::scalar).unwrap_or(0.0);
                let mut kk = Konst {
                    dims,
                    vals: None,
                    int: v.is_some_and(|v| v.int),
                };
                if kk.numel() <= consts::MAX_VALUES {
                    kk.vals = Some(vec![fill; kk.numel() as usize]);
                }
                kk
            }
            "Cast" => {
                let mut x = k(0)?;
                x.int = consts::is_int_type(attr_i(n, "to", 1) as i32);
                if x.int {
                    x.vals = x.vals.map(|v| v.into_iter().map(f64::trunc).collect());
                }
                x
            }
            "Add" => {
                consts::binary(&k(0)?, &k(1)?, |a, b| a + b).ok_or("shapes do not broadcast")?
            }
            "Sub" => {
                consts::binary(&k(0)?, &k(1)?, |a, b| a - b).ok_or("shapes do not broadcast")?
            }
            "Mul" => {
                consts::binary(&k(0)?, &k(1)?, |a, b| a * b).ok_or("shapes do not broadcast")?
            }
            "Div" => {
                let (a, c) = (k(0)?, k(1)?);
                let int = a.int && c.int;
                consts::binary(&a, &c, move |a, b| {
                    if b == 0.0 {
                        0.0
                    } else if int {
                        (a / b).floor()
                    } else {
                        a / b
                    }
                })
                .ok_or("shapes do not broadcast")?
            }
            "Equal" => consts::binary(&k(0)?, &k(1)?, |a, b| (a == b) as u8 as f64)
                .ok_or("shapes do not broadcast")?,
            "Unsqueeze" | "Squeeze" | "Reshape" | "Flatten" => {
                let x = k(0)?;
                let dims = self.view_shape(n, &x.dims)?;
                Konst { dims, ..x }
            }
            "Concat" => {
                let parts: Vec<Konst> = (0..n.input.len()).map(k).collect::<R<_>>()?;
                if parts.iter().any(|p| p.dims.len() != 1) {
                    return Err("only 1-D constants can be concatenated".into());
                }
                let vals: Option<Vec<f64>> = parts
                    .iter()
                    .map(|p| p.vals.clone())
                    .collect::<Option<Vec<_>>>()
                    .map(|v| v.concat());
                Konst {
                    dims: vec![parts.iter().map(|p| p.dims[0]).sum()],
                    vals,
                    int: parts.iter().all(|p| p.int),
                }
            }
            "Gather" => {
                let (x, i) = (k(0)?, k(1)?);
                let idx = i.as_ints().ok_or("unknown indices")?;
                if x.dims.len() != 1 || attr_i(n, "axis", 0) != 0 {
                    return Err("only gathers from 1-D constants are supported".into());
                }
                let v = x.vals.as_ref().ok_or("unknown values")?;
                let len = v.len() as i64;
                let picked: Vec<f64> = idx
                    .iter()
                    .map(|&j| {
                        let j = if j < 0 { j + len } else { j };
                        usize::try_from(j).ok().and_then(|j| v.get(j).copied())
                    })
                    .collect::<Option<_>>()
                    .ok_or("index out of range")?;
                Konst {
                    dims: i.dims.clone(),
                    vals: Some(picked),
                    int: x.int,
                }
            }
            "Slice" => {
                let x = k(0)?;
                let dims = self.slice_shape(n, &x.dims)?;
                let vals = if x.dims.len() == 1 {
                    let (st, en) = (self.ints(inp(1), "starts")?, self.ints(inp(2), "ends")?);
                    let step = if inp(4).is_empty() {
                        1
                    } else {
                        self.ints(inp(4), "steps")?.first().copied().unwrap_or(1)
                    };
                    x.vals.as_ref().and_then(|v| {
                        let len = v.len() as i64;
                        let s0 = st.first().copied()?;
                        let s0 = if s0 < 0 { s0 + len } else { s0 }.clamp(0, len);
                        let e0 = en.first().copied()?;
                        let e0 = if e0 < 0 { e0 + len } else { e0 }.clamp(0, len);
                        (step == 1).then(|| v[s0 as usize..e0.max(s0) as usize].to_vec())
                    })
                } else {
                    None
                };
                Konst {
                    dims,
                    vals,
                    int: x.int,
                }
            }
            "Range" => {
                let (s, l, d) = (
                    k(0)?.scalar().ok_or("start")?,
                    k(1)?.scalar().ok_or("limit")?,
                    k(2)?.scalar().ok_or("delta")?,
                );
                if d == 0.0 {
                    return Err("delta 0".into());
                }
                let cnt = ((l - s) / d).ceil().max(0.0) as u64;
                let mut kk = Konst {
                    dims: vec![cnt],
                    vals: None,
                    int: true,
                };
                if cnt <= consts::MAX_VALUES {
                    kk.vals = Some((0..cnt).map(|i| s + i as f64 * d).collect());
                }
                kk
            }
            _ => return Ok(None),
        }))
    }
}

fn broadcast_dims(a: &[u64], b: &[u64]) -> R<Vec<u64>> {
    vramscope_core::ops::broadcast_shapes(a, b)
        .ok_or_else(|| format!("shapes {a:?} and {b:?} do not broadcast"))
}

/// A node with its module levels, for grouping into module calls.
#[derive(Debug)]
pub struct Item {
    /// Node index.
    pub node: usize,
    /// Module levels from the node's name.
    pub levels: Vec<Level>,
}

/// Emits `items` (nodes at module depth `depth`) as nested module calls.
pub fn emit_items(b: &mut GraphBuilder, lw: &mut Lowerer, items: &[Item], depth: usize) {
    let mut i = 0;
    while i < items.len() {
        if lw.error.is_some() {
            return;
        }
        let Some(level) = items[i].levels.get(depth) else {
            lw.lower(b, items[i].node, None);
            i += 1;
            continue;
        };
        let mut j = i + 1;
        while j < items.len() && items[j].levels.get(depth).map(|l| &l.call) == Some(&level.call) {
            j += 1;
        }
        let group = &items[i..j];
        let parent = if depth == 0 {
            ""
        } else {
            items[i].levels[depth - 1].path.as_str()
        };
        let name = level
            .path
            .strip_prefix(parent)
            .map(|s| s.trim_start_matches('.'))
            .filter(|s| !s.is_empty())
            .unwrap_or(&level.path)
            .to_string();
        if group.len() == 1 && group[0].levels.len() == depth + 1 {
            lw.lower(b, group[0].node, Some(&name));
        } else {
            let inputs = external_inputs(b, lw, group);
            let ty = if name.bytes().all(|c| c.is_ascii_digit()) || name.contains('.') {
                "Sequential"
            } else {
                "Module"
            };
            b.module(&name, ty, &inputs, |b| emit_items(b, lw, group, depth + 1));
        }
        i = j;
    }
}

/// The engine tensors a group of nodes reads that were made before it (the module's arguments).
fn external_inputs(b: &GraphBuilder, lw: &Lowerer, group: &[Item]) -> Vec<TensorId> {
    let _ = b;
    let g = lw.file.graph();
    let made: HashSet<&str> = group
        .iter()
        .flat_map(|it| g.node[it.node].output.iter().map(String::as_str))
        .collect();
    let mut out = Vec::new();
    for it in group {
        for s in &g.node[it.node].input {
            if made.contains(s.as_str()) {
                continue;
            }
            if let Some(Val::Act(t)) = lw.vals.get(s.as_str()) {
                if !out.contains(t) {
                    out.push(*t);
                }
            }
        }
    }
    out
}
