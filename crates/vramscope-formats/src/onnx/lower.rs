//! Lowering ONNX nodes onto the engine's ops with PyTorch training semantics, inside the module
//! scopes recovered from node names; constants are folded as they appear, strides are followed
//! through views (`layout.rs`) and exporter patterns become the PyTorch call they spell
//! (`fuse.rs`).

use std::collections::{BTreeMap, HashMap, HashSet};

use vramscope_core::ops::{
    Activation, ActivationKind, AdaptiveAvgPool2d, Add, Aten, AvgPool2d, BatchNorm2d, Cat,
    ConstantPad, Contiguous, Conv2d, ConvNd, ConvTranspose2d, Dropout, Elementwise, GradIn,
    GroupNorm, LayerNorm, Linear, LinearStrided, LogSoftmax, MatMul, MatMulCopy, MaxPool2d, Mean,
    Mul, MulScalar, Op, Saved, Select, Slice, Softmax, View,
};
use vramscope_core::{DType, GraphBuilder, TensorId};

use super::consts::{self, Konst};
use super::file::{dtype_of, OnnxFile};
use super::fuse::{Fusion, Fusions, GeluFusion, LinearFusion};
use super::layout;
use super::proto::{NodeProto, TensorProto};
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
    pub(super) producer: HashMap<TensorId, String>,
    /// Strides of the tensors that are not contiguous (views: `Transpose`, `Slice`, ...).
    pub(super) strides: HashMap<TensorId, Vec<u64>>,
    /// Exporter patterns lowered as one PyTorch call.
    pub(super) fusions: Fusions,
    /// Value shapes from a first, generic pass: they let whole modules be recognised
    /// (`nn.MultiheadAttention`) before their nodes are lowered.
    pub(super) hints: Option<BTreeMap<String, Vec<u64>>>,
    /// RNN layers lowered so far per node-name scope (`/rnn` → 2), for `weight_ih_l{k}` names.
    pub(super) rnn_layers: HashMap<String, usize>,
    /// The zero initial states made so far, by the constant they come from (one
    /// `torch.zeros(layers·D, B, H)` serves every layer of a multi-layer RNN).
    pub(super) rnn_zeros: HashMap<String, TensorId>,
    /// The node producing each value.
    pub(super) producer_node: HashMap<String, usize>,
    /// Module paths of the module calls being emitted (innermost last).
    pub(super) scope: Vec<String>,
    /// Every value's inferred shape.
    pub shapes: BTreeMap<String, Vec<u64>>,
    /// The first error.
    pub error: Option<String>,
}

pub(super) type R<T> = Result<T, String>;

/// Input `i` of node `n` (an omitted optional input, or one past the end: `""`).
pub(super) fn input_name(n: &NodeProto, i: usize) -> &str {
    n.input.get(i).map(String::as_str).unwrap_or("")
}

pub(super) fn attr<'n>(n: &'n NodeProto, name: &str) -> Option<&'n super::proto::AttributeProto> {
    n.attribute.iter().find(|a| a.name() == name)
}

pub(super) fn attr_i(n: &NodeProto, name: &str, default: i64) -> i64 {
    attr(n, name).map_or(default, |a| a.i())
}

pub(super) fn attr_f(n: &NodeProto, name: &str, default: f64) -> f64 {
    attr(n, name).map_or(default, |a| a.f() as f64)
}

pub(super) fn attr_s(n: &NodeProto, name: &str) -> Option<String> {
    attr(n, name).map(|a| String::from_utf8_lossy(a.s.as_deref().unwrap_or_default()).into_owned())
}

pub(super) fn attr_ints(n: &NodeProto, name: &str) -> Option<Vec<i64>> {
    attr(n, name).map(|a| a.ints.clone())
}

pub(super) fn u(v: i64, what: &str) -> R<u64> {
    u64::try_from(v).map_err(|_| format!("{what} = {v} must not be negative"))
}

/// A per-spatial-dim attribute (`strides`, `dilations`, `kernel_shape`) with `dims` entries.
fn per_dim(n: &NodeProto, name: &str, dims: usize, default: u64) -> R<Vec<u64>> {
    match attr_ints(n, name) {
        None => Ok(vec![default; dims]),
        Some(v) if v.is_empty() => Ok(vec![default; dims]),
        Some(v) if v.len() == dims => v.iter().map(|&x| u(x, name)).collect(),
        Some(v) => Err(format!("{name} {v:?} must have {dims} entries")),
    }
}

/// The (begin, end) padding per spatial dim of a conv or pool over `spatial` input sizes: the
/// `pads` attribute, or `auto_pad` (`SAME_UPPER` puts the odd pixel at the end, `SAME_LOWER` at
/// the beginning, `VALID` pads nothing).
fn pads_nd(
    n: &NodeProto,
    spatial: &[u64],
    kernel: &[u64],
    stride: &[u64],
    dilation: &[u64],
) -> R<Vec<(u64, u64)>> {
    let d = spatial.len();
    let auto = attr_s(n, "auto_pad").unwrap_or_default();
    match auto.as_str() {
        "" | "NOTSET" => {}
        "VALID" => return Ok(vec![(0, 0); d]),
        "SAME_UPPER" | "SAME_LOWER" => {
            let mut out = Vec::with_capacity(d);
            for i in 0..d {
                let s = stride[i].max(1);
                let want = spatial[i].div_ceil(s);
                let extent = dilation[i] * kernel[i].saturating_sub(1) + 1;
                let total = ((want.saturating_sub(1)) * s + extent).saturating_sub(spatial[i]);
                let small = total / 2;
                out.push(if auto == "SAME_UPPER" {
                    (small, total - small)
                } else {
                    (total - small, small)
                });
            }
            return Ok(out);
        }
        other => {
            return Err(format!(
                "auto_pad {other:?} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID"
            ))
        }
    }
    match attr_ints(n, "pads").as_deref() {
        None | Some([]) => Ok(vec![(0, 0); d]),
        Some(p) if p.len() == 2 * d => (0..d)
            .map(|i| Ok((u(p[i], "pads")?, u(p[i + d], "pads")?)))
            .collect(),
        Some(p) => Err(format!("pads {p:?} must have {} entries", 2 * d)),
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

/// Ops whose output keeps the memory order of their (first tensor) input.
fn keeps_layout(op: &str) -> bool {
    matches!(
        op,
        "Relu"
            | "Sigmoid"
            | "Tanh"
            | "HardSwish"
            | "HardSigmoid"
            | "Gelu"
            | "Clip"
            | "LeakyRelu"
            | "Elu"
            | "Selu"
            | "Erf"
            | "Abs"
            | "Log"
            | "Sin"
            | "Cos"
            | "Softplus"
            | "Sqrt"
            | "Exp"
            | "Reciprocal"
            | "Neg"
            | "Floor"
            | "Ceil"
            | "Round"
            | "Sign"
            | "Pow"
            | "Add"
            | "Sub"
            | "Mul"
            | "Div"
            | "Dropout"
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
        let mut producer_node = HashMap::new();
        for (i, n) in g.node.iter().enumerate() {
            for o in &n.output {
                producer_node.insert(o.clone(), i);
            }
        }
        Lowerer {
            file,
            vals,
            uses,
            producer: HashMap::new(),
            strides: HashMap::new(),
            fusions: super::fuse::find(g, &file.order),
            hints: None,
            rnn_layers: HashMap::new(),
            rnn_zeros: HashMap::new(),
            producer_node,
            scope: Vec::new(),
            shapes: BTreeMap::new(),
            error: None,
        }
    }

    pub(super) fn init(&self, i: usize) -> &'a TensorProto {
        &self.file.graph().initializer[i]
    }

    pub(super) fn init_dims(&self, name: &str) -> R<Vec<u64>> {
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

    /// The dims of input `name` whatever it is (tensor, constant, initializer).
    pub(super) fn dims_of(&self, b: &GraphBuilder, name: &str) -> R<Vec<u64>> {
        match self.vals.get(name) {
            Some(Val::Act(t)) => Ok(b.shape(*t).to_vec()),
            Some(Val::Const(k)) => Ok(k.dims.clone()),
            Some(Val::Init(_)) => self.init_dims(name),
            None => Err(format!("`{name}` is not defined")),
        }
    }

    /// The constant value of input `name` (a constant node output or a small initializer).
    pub(super) fn konst(&self, name: &str) -> Option<Konst> {
        match self.vals.get(name)? {
            Val::Const(k) => Some(k.clone()),
            Val::Init(i) => {
                let t = self.init(*i);
                // an external tensor whose file is missing keeps its dims
                let external = if t.data_location == Some(1) {
                    self.read_external(t)
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

    pub(super) fn ints(&self, name: &str, what: &str) -> R<Vec<i64>> {
        self.konst(name)
            .and_then(|k| k.as_ints())
            .ok_or_else(|| format!("{what} `{name}` must be a constant known before run time"))
    }

    /// The single value of constant input `name`, when known.
    pub(super) fn scalar(&self, name: &str) -> Option<f64> {
        self.konst(name).and_then(|k| k.scalar())
    }

    /// Input `name` as an engine tensor; an initializer becomes a parameter of the current module.
    pub(super) fn act(&mut self, b: &mut GraphBuilder, name: &str) -> R<TensorId> {
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

    /// Whether `name` is a float initializer of more than one element (a parameter).
    fn is_weight(&self, name: &str) -> bool {
        match self.vals.get(name) {
            Some(Val::Init(i)) => {
                let t = self.init(*i);
                dtype_of(t.data_type()).is_some_and(DType::is_float)
                    && t.dims.iter().map(|&d| d.max(0) as u64).product::<u64>() > 1
            }
            _ => false,
        }
    }

    pub(super) fn is_act(&self, name: &str) -> bool {
        matches!(self.vals.get(name), Some(Val::Act(_)))
    }

    pub(super) fn set(&mut self, b: &GraphBuilder, name: &str, v: Val) {
        let shape = match &v {
            Val::Act(t) => b.shape(*t).to_vec(),
            Val::Const(k) => k.dims.clone(),
            Val::Init(i) => self.init_dims(self.init(*i).name()).unwrap_or_default(),
        };
        self.shapes.insert(name.to_string(), shape);
        self.vals.insert(name.to_string(), v);
    }

    /// The strides of `t` (contiguous unless recorded).
    pub(super) fn strides_of(&self, b: &GraphBuilder, t: TensorId) -> Vec<u64> {
        self.strides
            .get(&t)
            .cloned()
            .unwrap_or_else(|| layout::contiguous(b.shape(t)))
    }

    pub(super) fn is_contiguous(&self, t: TensorId) -> bool {
        !self.strides.contains_key(&t)
    }

    /// Records the strides of `t` (only non-contiguous ones are kept).
    pub(super) fn set_strides(&mut self, b: &GraphBuilder, t: TensorId, s: Vec<u64>) {
        if layout::is_contiguous(b.shape(t), &s) {
            self.strides.remove(&t);
        } else {
            self.strides.insert(t, s);
        }
    }

    /// Whether an in-place op on `name` is what PyTorch code would do (single use, producer
    /// whose backward does not read its output).
    fn can_inplace(&self, name: &str, t: TensorId) -> bool {
        self.uses.get(name) == Some(&1)
            && self.is_contiguous(t)
            && self.producer.get(&t).is_some_and(|p| inplace_ok_after(p))
    }

    pub(super) fn emit(
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
    pub(super) fn param_leaf(&self, leaf: Option<&str>, weight: &str, idx: usize) -> String {
        if let Some(l) = leaf {
            return l.to_string();
        }
        match weight.rsplit_once('.') {
            Some((m, _)) if !m.contains("::") && !m.is_empty() => {
                // the weight's module path relative to the module being lowered (the whole path
                // at the root: exports without node scopes name every weight by its full path)
                let scope = self.scope.last().map(String::as_str).unwrap_or("");
                if scope.is_empty() {
                    m.to_string()
                } else if let Some(rest) = m.strip_prefix(scope).and_then(|r| r.strip_prefix('.')) {
                    rest.to_string()
                } else {
                    m.rsplit('.').next().unwrap_or(m).to_string()
                }
            }
            _ => format!(
                "{}_{idx}",
                self.file.graph().node[idx].op_type().to_lowercase()
            ),
        }
    }

    /// `t.contiguous()`: a copy when `t` is not contiguous.
    pub(super) fn contiguous(&mut self, b: &mut GraphBuilder, t: TensorId) -> TensorId {
        if self.is_contiguous(t) {
            return t;
        }
        let s = b.shape(t).to_vec();
        b.op(
            Contiguous {
                name: "contiguous",
                shape: s,
            },
            &[t],
        )
    }

    /// `t.reshape(shape)`: a view when the strides allow it, else a copy and a view.
    pub(super) fn reshape(
        &mut self,
        b: &mut GraphBuilder,
        name: &'static str,
        t: TensorId,
        shape: Vec<u64>,
    ) -> TensorId {
        let old = b.shape(t).to_vec();
        if old == shape {
            return t;
        }
        let st = self.strides_of(b, t);
        match layout::view(&old, &st, &shape) {
            Some(ns) => {
                let y = b.op(View::new(name, shape), &[t]);
                self.set_strides(b, y, ns);
                y
            }
            None => {
                let c = self.contiguous(b, t);
                b.op(View::new(name, shape), &[c])
            }
        }
    }

    /// `t.permute(perm)`: a view with permuted strides.
    pub(super) fn permute(
        &mut self,
        b: &mut GraphBuilder,
        name: &'static str,
        t: TensorId,
        perm: &[usize],
    ) -> TensorId {
        let s = b.shape(t).to_vec();
        let shape: Vec<u64> = perm.iter().map(|&p| s[p]).collect();
        let st = layout::permute(&self.strides_of(b, t), perm);
        let y = b.op(View::new(name, shape), &[t]);
        self.set_strides(b, y, st);
        y
    }

    /// `t.select(dim, i)`: a view without `dim`.
    pub(super) fn select(&mut self, b: &mut GraphBuilder, t: TensorId, dim: usize) -> TensorId {
        let mut st = self.strides_of(b, t);
        let y = b.op(Select { dim }, &[t]);
        st.remove(dim);
        self.set_strides(b, y, st);
        y
    }

    /// Lowers node `idx`; `leaf` is the module name when the node is the whole forward of a child
    /// module of the current one.
    pub fn lower(&mut self, b: &mut GraphBuilder, idx: usize, leaf: Option<&str>) {
        // after a shape error the builder's shapes are placeholders: lowering more nodes would
        // only report errors of its own about them
        if self.error.is_some() || b.first_error().is_some() || self.fusions.absorbed.contains(&idx)
        {
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
        if let Some(f) = self.fusions.at.get(&idx).cloned() {
            let done = match f {
                Fusion::Linear(l) => self.lower_linear(b, idx, n, &l, leaf)?,
                Fusion::Gelu(g) => self.lower_gelu(b, idx, n, &g, leaf)?,
                Fusion::Sdpa(s) => self.lower_sdpa(b, idx, n, &s, leaf)?,
            };
            if done {
                return Ok(());
            }
            // the pattern's constants do not fit: its nodes one by one, in graph order
            let g = self.file.graph();
            let mut all = self.fusions.parts.get(&idx).cloned().unwrap_or_default();
            all.push(idx);
            all.sort_unstable_by_key(|p| self.fusions.position.get(p).copied());
            for p in all {
                let pn = &g.node[p];
                let l = if p == idx { leaf } else { None };
                self.lower_plain(b, p, pn, l)
                    .map_err(|e| format!("in node `{}` ({}): {e}", pn.name(), pn.op_type()))?;
            }
            return Ok(());
        }
        self.lower_plain(b, idx, n, leaf)
    }

    /// `nn.Linear` from `MatMul(x, W)` (+ `Add(b)`); on a non-contiguous input of rank ≥ 3 it is
    /// `F.linear`'s `matmul` path ([`LinearStrided`]).
    fn lower_linear(
        &mut self,
        b: &mut GraphBuilder,
        idx: usize,
        n: &NodeProto,
        l: &LinearFusion,
        leaf: Option<&str>,
    ) -> R<bool> {
        if !matches!(self.vals.get(&l.weight), Some(Val::Init(_))) {
            // the weight is already a parameter (an embedding's, tied): plain ops
            return Ok(false);
        }
        let x = self.act(b, n.input.first().map(String::as_str).unwrap_or(""))?;
        let w = self.init_dims(&l.weight)?;
        let (in_f, out_f) = if l.transposed {
            (w[1], w[0])
        } else {
            (w[0], w[1])
        };
        let name = self.param_leaf(leaf, &l.weight, idx);
        let xs = b.shape(x).to_vec();
        let y = if xs.len() >= 3 && !self.is_contiguous(x) {
            let bias = l.bias.is_some();
            b.module(&name, "Linear", &[x], |b| {
                let w = b.parameter("weight", vec![out_f, in_f]);
                let mut ins = vec![x, w];
                if bias {
                    ins.push(b.parameter("bias", vec![out_f]));
                }
                let outs = b.op_multi(
                    LinearStrided {
                        in_features: in_f,
                        out_features: out_f,
                    },
                    &ins,
                );
                outs[outs.len() - 1]
            })
        } else {
            b.layer(
                &name,
                Linear {
                    in_features: in_f,
                    out_features: out_f,
                    bias: l.bias.is_some(),
                },
                &[x],
            )
        };
        self.producer.insert(y, "Gemm".into());
        let out = match l.add {
            Some(a) => self.file.graph().node[a].output.first().cloned(),
            None => n.output.first().cloned(),
        };
        // the MatMul's own output, when the Add took its place, and the transposed weight
        if let (Some(_), Some(o)) = (l.add, n.output.first()) {
            self.shapes.insert(o.clone(), b.shape(y).to_vec());
        }
        let g = self.file.graph();
        for &p in self.fusions.parts.get(&idx).into_iter().flatten() {
            if g.node[p].op_type() == "Transpose" {
                for o in &g.node[p].output {
                    self.shapes.insert(o.clone(), vec![w[1], w[0]]);
                }
            }
        }
        if let Some(o) = out {
            self.set(b, &o, Val::Act(y));
        }
        Ok(true)
    }

    /// `F.gelu(x)` from the exporter's `Erf` spelling, when its constants are √2, 1 and 0.5.
    fn lower_gelu(
        &mut self,
        b: &mut GraphBuilder,
        idx: usize,
        n: &NodeProto,
        g: &GeluFusion,
        leaf: Option<&str>,
    ) -> R<bool> {
        let graph = self.file.graph();
        let near = |v: Option<f64>, want: f64| v.is_some_and(|v| (v - want).abs() < 1e-3);
        let other = |node: &NodeProto| -> Option<f64> {
            node.input
                .iter()
                .filter(|s| !self.is_act(s))
                .find_map(|s| self.scalar(s))
        };
        if !near(other(&graph.node[g.div]), std::f64::consts::SQRT_2)
            || !near(other(&graph.node[g.add]), 1.0)
            || !near(other(n), 0.5)
        {
            return Ok(false);
        }
        let x = self.act(b, &g.x)?;
        let y = self.emit(
            b,
            leaf,
            Activation {
                kind: ActivationKind::GELU,
                inplace: false,
            },
            &[x],
        );
        self.follow_layout(b, x, y);
        self.producer.insert(y, "Gelu".into());
        // the absorbed values keep shapes, for the shape oracle
        for &p in self.fusions.parts.get(&idx).into_iter().flatten() {
            for o in &graph.node[p].output {
                self.shapes.insert(o.clone(), b.shape(y).to_vec());
            }
        }
        if let Some(o) = n.output.first() {
            self.set(b, o, Val::Act(y));
        }
        Ok(true)
    }

    /// Output `y` of a pointwise op on `x` keeps `x`'s memory order (TensorIterator).
    pub(super) fn follow_layout(&mut self, b: &GraphBuilder, x: TensorId, y: TensorId) {
        if self.is_contiguous(x) || b.shape(x) != b.shape(y) {
            return;
        }
        let (s, st) = (b.shape(x).to_vec(), self.strides_of(b, x));
        if let Some(order) = layout::dense_order(&s, &st) {
            self.set_strides(b, y, layout::with_order(&s, &order));
        }
    }

    fn lower_plain(
        &mut self,
        b: &mut GraphBuilder,
        idx: usize,
        n: &'a NodeProto,
        leaf: Option<&str>,
    ) -> R<()> {
        let inp = |i: usize| input_name(n, i);
        let out0 = n.output.first().map(String::as_str).unwrap_or("");
        let op = n.op_type();
        // constant folding first: every input constant, and weights only reshaped (an LSTM's
        // gate-reordered weights); any other op on a weight computes with the parameter
        let reshapes_weights = matches!(
            op,
            "Slice"
                | "Concat"
                | "Unsqueeze"
                | "Squeeze"
                | "Reshape"
                | "Identity"
                | "Cast"
                | "Shape"
                | "Size"
        );
        if op != "Dropout"
            && !n
                .input
                .iter()
                .filter(|s| !s.is_empty())
                .any(|s| self.is_act(s) || (!reshapes_weights && self.is_weight(s)))
        {
            if let Some(k) = self.fold(n)? {
                self.set(b, out0, Val::Const(k));
                return Ok(());
            }
        }
        match (n.domain(), op) {
            ("com.microsoft", "Attention") => return self.lower_ms_attention(b, idx, n, leaf),
            (_, "Attention") => return self.lower_attention_op(b, n, leaf),
            (_, "LSTM" | "GRU") => return self.lower_rnn(b, n, leaf),
            _ => {}
        }
        let result: TensorId = match op {
            "Identity" => self.act(b, inp(0))?,
            "Conv" => return self.lower_conv(b, idx, n, leaf),
            "ConvTranspose" => {
                let x = self.act(b, inp(0))?;
                let w = self.init_dims(inp(1))?;
                if w.len() != 4 || w[2] != w[3] {
                    return Err(format!(
                        "weight {w:?}: only square 2-D kernels are supported"
                    ));
                }
                let g = u(attr_i(n, "group", 1), "group")?;
                let s = b.shape(x).to_vec();
                let k = [w[2], w[3]];
                let st = per_dim(n, "strides", 2, 1)?;
                let dl = per_dim(n, "dilations", 2, 1)?;
                if st[0] != st[1] || dl[0] != dl[1] {
                    return Err(
                        "only equal strides and dilations in height and width are supported".into(),
                    );
                }
                if attr_s(n, "auto_pad").is_some_and(|a| !a.is_empty() && a != "NOTSET") {
                    return Err(
                        "auto_pad is not supported for ConvTranspose (export with explicit pads)"
                            .into(),
                    );
                }
                let pads = pads_nd(n, s.get(2..).unwrap_or(&[]), &k, &st, &dl)?;
                let op_ = per_dim(n, "output_padding", 2, 0)?;
                if pads.iter().any(|&(a, c)| a != c || a != pads[0].0) || op_[0] != op_[1] {
                    return Err(
                        "only equal, symmetric padding in height and width is supported".into(),
                    );
                }
                let c = ConvTranspose2d {
                    in_channels: w[0],
                    out_channels: w[1] * g,
                    kernel: w[2],
                    stride: st[0],
                    padding: pads[0].0,
                    output_padding: op_[0],
                    dilation: dl[0],
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
                let name = self.param_leaf(leaf, inp(1), idx);
                let y = b.layer(
                    &name,
                    Linear {
                        in_features: in_f,
                        out_features: out_f,
                        bias: op == "Gemm" && !inp(2).is_empty(),
                    },
                    &[x],
                );
                self.producer.insert(y, "Gemm".into());
                y
            }
            "MatMul" | "Gemm" => {
                let x = self.act(b, inp(0))?;
                let y = self.act(b, inp(1))?;
                // matmul folds the batch dims with reshape, which copies what cannot be viewed:
                // inside the call, after autocast has cast its operands
                let (lhs, rhs) = (self.must_copy_to_fold(b, x), self.must_copy_to_fold(b, y));
                if lhs || rhs {
                    b.op(MatMulCopy { lhs, rhs }, &[x, y])
                } else {
                    b.op(MatMul, &[x, y])
                }
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
                let lo = self.scalar(inp(1));
                let hi = self.scalar(inp(2));
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
                    .filter_map(|s| match self.vals.get(s.as_str()) {
                        Some(Val::Act(t)) => Some(*t),
                        _ => None,
                    })
                    .collect();
                let mut shape: Vec<u64> = Vec::new();
                for s in n.input.iter() {
                    let d = self.dims_of(b, s)?;
                    shape = broadcast_dims(&shape, &d)?;
                }
                let mut e = Elementwise::new("where", &[0]);
                e.out_dtype = None;
                let y = self.emit(b, leaf, e, &acts);
                if b.shape(y) != shape.as_slice() {
                    self.expand(b, y, shape)
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
                let s = b.shape(x).to_vec();
                if s.len() != 4 {
                    return Err(format!("input {s:?}: only 2-D pooling is supported"));
                }
                let k = per_dim(n, "kernel_shape", 2, 1)?;
                let st = per_dim(n, "strides", 2, 1)?;
                let dl = per_dim(n, "dilations", 2, 1)?;
                let pads = pads_nd(n, &s[2..], &k, &st, &dl)?;
                if k[0] != k[1] || st[0] != st[1] {
                    return Err(format!(
                        "kernel {k:?}, strides {st:?}: only square 2-D windows are supported"
                    ));
                }
                if pads.iter().any(|&(a, c)| a != c || a != pads[0].0) || dl != [1, 1] {
                    return Err(
                        "only equal, symmetric padding and no dilation are supported".into(),
                    );
                }
                let ceil = attr_i(n, "ceil_mode", 0) != 0;
                if op == "MaxPool" {
                    let mut p = MaxPool2d::new(k[0], st[0], pads[0].0);
                    p.ceil_mode = ceil;
                    self.emit(b, leaf, p, &[x])
                } else {
                    let p = AvgPool2d {
                        kernel: k[0],
                        stride: st[0],
                        padding: pads[0].0,
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
                let y = self.reshape(b, name, x, shape);
                if y == x {
                    // a reshape to the same shape is the tensor itself
                    self.set(b, out0, Val::Act(x));
                    return Ok(());
                }
                y
            }
            "Transpose" => {
                let x = self.act(b, inp(0))?;
                let s = b.shape(x).to_vec();
                let perm =
                    attr_ints(n, "perm").unwrap_or_else(|| (0..s.len() as i64).rev().collect());
                let p: Vec<usize> = perm
                    .iter()
                    .map(|&p| consts::axis(p, s.len()))
                    .collect::<Option<_>>()
                    .filter(|p: &Vec<usize>| {
                        p.len() == s.len() && {
                            let mut q = p.clone();
                            q.sort_unstable();
                            q.dedup();
                            q.len() == s.len()
                        }
                    })
                    .ok_or_else(|| format!("perm {perm:?} does not fit shape {s:?}"))?;
                self.permute(b, "permute", x, &p)
            }
            "Expand" => {
                let x = self.act(b, inp(0))?;
                let target = self.ints(inp(1), "shape")?;
                let t: Vec<u64> = target.iter().map(|&d| d.max(1) as u64).collect();
                let shape = broadcast_dims(b.shape(x), &t)?;
                self.expand(b, x, shape)
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
                let st = self.strides_of(b, x);
                let outs = b.op_multi(
                    View {
                        name: "split",
                        shapes,
                        expand: false,
                    },
                    &[x],
                );
                for (name, t) in n.output.iter().zip(outs) {
                    self.set_strides(b, t, st.clone());
                    self.set(b, name, Val::Act(t));
                }
                return Ok(());
            }
            "Slice" => {
                let x = self.act(b, inp(0))?;
                let s = b.shape(x).to_vec();
                let (shape, steps) = self.slice_shape(n, &s)?;
                if shape == s {
                    x
                } else {
                    let mut st = self.strides_of(b, x);
                    for (d, step) in steps.into_iter().enumerate() {
                        st[d] = st[d].saturating_mul(step);
                    }
                    let y = b.op(Slice { shape }, &[x]);
                    self.set_strides(b, y, st);
                    y
                }
            }
            "Gather" => return self.lower_gather(b, idx, n, leaf),
            "Softmax" | "LogSoftmax" => {
                let x = self.act(b, inp(0))?;
                let rank = b.shape(x).len();
                let dim = consts::axis(attr_i(n, "axis", -1), rank).ok_or("axis out of range")?;
                if op == "Softmax" {
                    self.emit(b, leaf, Softmax { dim }, &[x])
                } else {
                    self.emit(
                        b,
                        leaf,
                        LogSoftmax {
                            dim,
                            dtype_given: false,
                        },
                        &[x],
                    )
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
                    self.scalar(inp(1)).unwrap_or(0.5)
                };
                if let Some(mask) = n.output.get(1).filter(|m| !m.is_empty()) {
                    if self.uses.get(mask.as_str()).copied().unwrap_or(0) > 0 {
                        return Err("the dropout mask is used by the graph".into());
                    }
                }
                if !(0.0..1.0).contains(&p) {
                    return Err(format!("ratio {p} must be in [0, 1)"));
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
        self.producer
            .entry(result)
            .or_insert_with(|| op.to_string());
        if keeps_layout(op) {
            if let Some(x) = n
                .input
                .iter()
                .find_map(|s| match self.vals.get(s.as_str()) {
                    Some(Val::Act(t)) if *t != result => Some(*t),
                    _ => None,
                })
            {
                self.follow_layout(b, x, result);
            }
        }
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

    /// A broadcast view of `x` to `shape` (stride 0 on the broadcast dims).
    pub(super) fn expand(
        &mut self,
        b: &mut GraphBuilder,
        x: TensorId,
        shape: Vec<u64>,
    ) -> TensorId {
        if b.shape(x) == shape.as_slice() {
            return x;
        }
        let s = b.shape(x).to_vec();
        let st = self.strides_of(b, x);
        let lead = shape.len() - s.len();
        let mut ns = vec![0u64; shape.len()];
        for i in 0..s.len() {
            ns[lead + i] = if s[i] == 1 && shape[lead + i] != 1 {
                0
            } else {
                st[i]
            };
        }
        let y = b.op(
            View {
                name: "expand",
                shapes: vec![shape],
                expand: true,
            },
            &[x],
        );
        self.set_strides(b, y, ns);
        y
    }

    /// Whether `torch.matmul` copies operand `t` for `bmm`: one of rank ≥ 3 whose batch dims
    /// cannot be folded by a view (the copy is what backward keeps).
    fn must_copy_to_fold(&mut self, b: &mut GraphBuilder, t: TensorId) -> bool {
        let s = b.shape(t).to_vec();
        if s.len() < 3 || self.is_contiguous(t) {
            return false;
        }
        let batch: u64 = s[..s.len() - 2].iter().product();
        let folded = vec![batch, s[s.len() - 2], s[s.len() - 1]];
        let st = self.strides_of(b, t);
        layout::view(&s, &st, &folded).is_none()
    }

    /// `Conv` with 1, 2 or 3 spatial dims; asymmetric padding (`auto_pad=SAME_*` with an even
    /// kernel) pads the difference explicitly first, as PyTorch's `padding="same"` does.
    fn lower_conv(
        &mut self,
        b: &mut GraphBuilder,
        idx: usize,
        n: &NodeProto,
        leaf: Option<&str>,
    ) -> R<()> {
        let inp = |i: usize| input_name(n, i);
        let mut x = self.act(b, inp(0))?;
        let w = self.init_dims(inp(1))?;
        let d = w.len().saturating_sub(2);
        if !(1..=3).contains(&d) {
            return Err(format!(
                "weight {w:?}: only 1-D, 2-D and 3-D convolutions are supported"
            ));
        }
        let s = b.shape(x).to_vec();
        if s.len() != d + 2 {
            return Err(format!("input {s:?} does not fit a {d}-D weight {w:?}"));
        }
        let g = u(attr_i(n, "group", 1), "group")?;
        let kernel = w[2..].to_vec();
        if let Some(ks) = attr_ints(n, "kernel_shape").filter(|k| !k.is_empty()) {
            if ks.iter().map(|&k| k.max(0) as u64).collect::<Vec<_>>() != kernel {
                return Err(format!(
                    "kernel_shape {ks:?} does not match the weight {w:?}"
                ));
            }
        }
        let stride = per_dim(n, "strides", d, 1)?;
        let dilation = per_dim(n, "dilations", d, 1)?;
        if stride.iter().chain(&dilation).any(|&v| v == 0) {
            return Err("strides and dilations must be positive".into());
        }
        let pads = pads_nd(n, &s[2..], &kernel, &stride, &dilation)?;
        // as PyTorch's padding="same": the symmetric part is the convolution's padding, the
        // difference an explicit constant_pad_nd first
        let padding: Vec<u64> = pads.iter().map(|&(a, c)| a.min(c)).collect();
        if pads.iter().any(|&(a, c)| a != c) {
            // F.pad takes (before, after) from the last dim backwards
            let p: Vec<(u64, u64)> = pads
                .iter()
                .rev()
                .map(|&(a, c)| (a - a.min(c), c - a.min(c)))
                .collect();
            x = b.op(ConstantPad { pads: p }, &[x]);
        }
        let name = self.param_leaf(leaf, inp(1), idx);
        let bias = !inp(2).is_empty();
        let in_channels = s[1];
        let y = if d == 2 {
            let c = Conv2d {
                in_channels,
                out_channels: w[0],
                kernel: (kernel[0], kernel[1]),
                stride: (stride[0], stride[1]),
                padding: (padding[0], padding[1]),
                dilation: (dilation[0], dilation[1]),
                groups: g,
                bias,
            };
            b.layer(&name, c, &[x])
        } else {
            let c = ConvNd {
                in_channels,
                out_channels: w[0],
                kernel,
                stride,
                padding,
                dilation,
                groups: g,
                bias,
            };
            b.layer(&name, c, &[x])
        };
        self.producer.insert(y, "Conv".into());
        let out0 = n.output.first().map(String::as_str).unwrap_or("");
        self.set(b, out0, Val::Act(y));
        Ok(())
    }

    /// `Gather`: a `select` for a scalar constant index, `index_select` for constant indices,
    /// `nn.Embedding` for run-time indices into a weight initializer, `x[ids]` for run-time
    /// indices into a tensor.
    fn lower_gather(
        &mut self,
        b: &mut GraphBuilder,
        idx: usize,
        n: &NodeProto,
        leaf: Option<&str>,
    ) -> R<()> {
        let inp = |i: usize| input_name(n, i);
        let out0 = n.output.first().map(String::as_str).unwrap_or("");
        let data_dims = self.dims_of(b, inp(0))?;
        let ax = consts::axis(attr_i(n, "axis", 0), data_dims.len()).ok_or("axis out of range")?;
        let is_weight = self.is_weight(inp(0));
        let const_rows = self.konst(inp(1)).is_some_and(|k| !k.dims.is_empty());
        if self.is_act(inp(1)) || (is_weight && ax == 0 && data_dims.len() == 2 && const_rows) {
            let ids = if self.is_act(inp(1)) {
                self.act(b, inp(1))?
            } else {
                // `emb(torch.arange(S))`: the indices are a tensor the forward makes
                let k = self
                    .konst(inp(1))
                    .ok_or_else(|| format!("indices `{}` are not defined", inp(1)))?;
                let op = Aten::new("arange", k.dims)
                    .dtype(vramscope_core::ops::DTypeRule::Fixed(DType::I64))
                    .not_differentiable();
                b.op(op, &[])
            };
            let id_shape = b.shape(ids).to_vec();
            let y = if is_weight {
                if ax != 0 || data_dims.len() != 2 {
                    return Err(format!(
                        "an embedding gathers rows (axis 0) of a 2-D weight, not axis {ax} of {data_dims:?}"
                    ));
                }
                let name = self.param_leaf(leaf, inp(0), idx);
                let (y, w) =
                    crate::hf::layers::embedding(b, &name, data_dims[0], data_dims[1], ids);
                // a tied use of the weight reads the parameter
                self.vals.insert(inp(0).to_string(), Val::Act(w));
                y
            } else {
                let x = self.act(b, inp(0))?;
                let mut o = data_dims[..ax].to_vec();
                o.extend(&id_shape);
                o.extend(&data_dims[ax + 1..]);
                let op = Aten::new("index", o)
                    .dtype(vramscope_core::ops::DTypeRule::Like(0))
                    .saves(vec![Saved::Input(1)])
                    .grads(vec![GradIn::New, GradIn::None]);
                self.emit(b, leaf, op, &[x, ids])
            };
            self.producer.insert(y, "Gather".into());
            self.set(b, out0, Val::Act(y));
            return Ok(());
        }
        let x = self.act(b, inp(0))?;
        let s = b.shape(x).to_vec();
        let y = match self.konst(inp(1)) {
            Some(k) if k.dims.is_empty() => self.select(b, x, ax),
            Some(k) => {
                let mut o = s[..ax].to_vec();
                o.extend(&k.dims);
                o.extend(&s[ax + 1..]);
                let e = Elementwise::new("index_select", &[]);
                let y = b.op(e, &[x]);
                b.op(View::new("view", o), &[y])
            }
            None => return Err(format!("indices `{}` are not defined", inp(1))),
        };
        self.producer.insert(y, "Gather".into());
        self.set(b, out0, Val::Act(y));
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
            self.follow_layout(b, x, y);
            let full = broadcast_dims(&xs, &kd)?;
            if full != xs {
                self.expand(b, y, full)
            } else {
                y
            }
        } else {
            // `x + self.param` is written out of place (ViT's position embedding)
            let adds_param = matches!(self.vals.get(&c), Some(Val::Init(_)));
            let x = self.act(b, &a)?;
            let z = self.act(b, &c)?;
            let y = match op {
                "Add" => {
                    let out = broadcast_dims(b.shape(x), b.shape(z))?;
                    let inplace =
                        out.as_slice() == b.shape(x) && !adds_param && self.can_inplace(&a, x);
                    self.emit(b, leaf, Add { inplace }, &[x, z])
                }
                "Mul" => self.emit(b, leaf, Mul, &[x, z]),
                "Sub" => self.emit(b, leaf, Elementwise::new("sub", &[]), &[x, z]),
                _ => self.emit(b, leaf, Elementwise::new("div", &[0, 1]), &[x, z]),
            };
            self.follow_layout(b, x, y);
            y
        };
        self.producer.insert(y, op.to_string());
        let out = n.output.first().cloned().unwrap_or_default();
        self.set(b, &out, Val::Act(y));
        Ok(())
    }

    pub(super) fn view_shape(&self, n: &NodeProto, s: &[u64]) -> R<Vec<u64>> {
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

    /// The output shape of a `Slice`, and the step of every dim (1 where not sliced).
    pub(super) fn slice_shape(&self, n: &NodeProto, s: &[u64]) -> R<(Vec<u64>, Vec<u64>)> {
        let inp = |i: usize| input_name(n, i);
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
        let mut st = vec![1u64; s.len()];
        #[allow(clippy::needless_range_loop)]
        for i in 0..starts.len() {
            let ax = axes
                .get(i)
                .and_then(|&a| consts::axis(a, s.len()))
                .ok_or("axes out of range")?;
            let (e, step) = (
                *ends.get(i).ok_or("ends too short")?,
                *steps.get(i).ok_or("steps too short")?,
            );
            o[ax] = consts::slice_len(s[ax], starts[i], e, step).ok_or("step 0")?;
            st[ax] = step.unsigned_abs();
        }
        Ok((o, st))
    }
}

pub(super) fn broadcast_dims(a: &[u64], b: &[u64]) -> R<Vec<u64>> {
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
    let g = lw.file.graph();
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
        // a module whose forward is one node (besides constants) is that node as a leaf
        let working: Vec<&Item> = group
            .iter()
            .filter(|it| g.node[it.node].op_type() != "Constant")
            .collect();
        if working.len() == 1 && working[0].levels.len() == depth + 1 {
            for it in group.iter().filter(|it| it.node != working[0].node) {
                lw.lower(b, it.node, None);
            }
            lw.lower(b, working[0].node, Some(&name));
        } else if !lw.lower_module(b, group, depth, &level.path, &name) {
            let inputs = external_inputs(lw, group);
            let ty = if name.bytes().all(|c| c.is_ascii_digit()) || name.contains('.') {
                "Sequential"
            } else {
                "Module"
            };
            lw.scope.push(level.path.clone());
            b.module(&name, ty, &inputs, |b| emit_items(b, lw, group, depth + 1));
            lw.scope.pop();
        }
        i = j;
    }
}

/// The engine tensors a group of nodes reads that were made before it (the module's arguments).
pub(super) fn external_inputs(lw: &Lowerer, group: &[Item]) -> Vec<TensorId> {
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
