//! Node patterns that stand for one PyTorch call, found before lowering so the call is simulated
//! as PyTorch runs it rather than as the exporter spelled it out:
//!
//! - `MatMul(x, W)` (+ `Add(·, b)`) with `W` an initializer or `Transpose(initializer)`: one
//!   `nn.Linear` (`F.linear` exports as `Transpose(weight)` → `MatMul` → `Add(bias)`);
//! - `Mul(Mul(x, Add(Erf(Div(x, √2)), 1)), 0.5)`: the exporter's spelling of `aten::gelu` before
//!   opset 20 (one `gelu` kernel that saves its input, not five ops);
//! - `MatMul(Mul(q, √s), Mul(Transpose(k), √s))` → [`Add(mask)`] → `Softmax` → [`Dropout`] →
//!   `MatMul(·, v)`: the exporter's spelling of `F.scaled_dot_product_attention` (scaling both
//!   operands by `√scale` is its signature; hand-written attention scales the product, and stays
//!   explicit ops, as PyTorch runs it).
//!
//! Every intermediate value of a pattern must have a single use. Constant operands are checked
//! when the pattern is lowered; a pattern whose constants do not fit is lowered node by node.

use std::collections::{HashMap, HashSet};

use super::proto::{GraphProto, NodeProto};

/// `nn.Linear` from `MatMul` (+ `Add`).
#[derive(Debug, Clone)]
pub struct LinearFusion {
    /// The weight initializer.
    pub weight: String,
    /// Whether the weight is `[out, in]` behind a `Transpose` (PyTorch's layout).
    pub transposed: bool,
    /// The `Add` node adding the bias.
    pub add: Option<usize>,
    /// The bias initializer.
    pub bias: Option<String>,
}

/// `F.gelu(x)` spelled with `Erf`.
#[derive(Debug, Clone)]
pub struct GeluFusion {
    /// The input value.
    pub x: String,
    /// The `Div` (by √2), `Add` (1) and final `Mul` (0.5) nodes, whose constants are checked.
    pub div: usize,
    /// See `div`.
    pub add: usize,
}

/// `F.scaled_dot_product_attention(q, k, v, mask, dropout_p, is_causal)`.
#[derive(Debug, Clone)]
pub struct SdpaFusion {
    /// Query `[.., L, E]`.
    pub q: String,
    /// Key `[.., S, E]` (before the exporter's transpose).
    pub k: String,
    /// Value `[.., S, Ev]`.
    pub v: String,
    /// The two scaling `Mul` nodes.
    pub scales: [usize; 2],
    /// The additive mask, when there is one.
    pub mask: Option<String>,
    /// The mask is the exporter's causal mask (`Trilu` of ones).
    pub causal: bool,
    /// The `Dropout` node on the probabilities.
    pub dropout: Option<usize>,
}

/// A pattern, keyed by the node that completes it (its anchor).
#[derive(Debug, Clone)]
pub enum Fusion {
    /// See [`LinearFusion`].
    Linear(LinearFusion),
    /// See [`GeluFusion`].
    Gelu(GeluFusion),
    /// See [`SdpaFusion`].
    Sdpa(SdpaFusion),
}

/// The patterns of a graph.
#[derive(Debug, Default)]
pub struct Fusions {
    /// Anchor node → pattern.
    pub at: HashMap<usize, Fusion>,
    /// Nodes folded into some anchor (not lowered by themselves).
    pub absorbed: HashSet<usize>,
    /// The nodes each anchor absorbed, in graph order (lowered one by one when the pattern's
    /// constants turn out not to fit).
    pub parts: HashMap<usize, Vec<usize>>,
    /// Each node's position in the topological order.
    pub position: HashMap<usize, usize>,
}

struct Index<'g> {
    g: &'g GraphProto,
    producer: HashMap<&'g str, usize>,
    uses: HashMap<&'g str, usize>,
    consumers: HashMap<&'g str, Vec<usize>>,
    inits: HashMap<&'g str, usize>,
    dynamic: HashSet<&'g str>,
}

impl<'g> Index<'g> {
    fn node(&self, value: &str) -> Option<(usize, &'g NodeProto)> {
        self.producer.get(value).map(|&i| (i, &self.g.node[i]))
    }

    fn single_use(&self, value: &str) -> bool {
        self.uses.get(value) == Some(&1)
    }

    fn is_static(&self, value: &str) -> bool {
        !self.dynamic.contains(value)
    }

    fn init_rank(&self, value: &str) -> Option<usize> {
        self.inits
            .get(value)
            .map(|&i| self.g.initializer[i].dims.len())
    }

    /// `value` produced by a single-use node of type `op`.
    fn op(&self, value: &str, op: &str) -> Option<(usize, &'g NodeProto)> {
        self.node(value)
            .filter(|(_, n)| n.op_type() == op && n.domain().is_empty())
    }

    /// The inputs of binary node `n` as (dynamic, static), in either order.
    fn dyn_static(&self, n: &'g NodeProto) -> Option<(&'g str, &'g str)> {
        let (a, b) = (n.input.first()?.as_str(), n.input.get(1)?.as_str());
        match (self.is_static(a), self.is_static(b)) {
            (false, true) => Some((a, b)),
            (true, false) => Some((b, a)),
            _ => None,
        }
    }
}

/// Finds the patterns of `g`; `order` is a topological order of its nodes.
pub fn find(g: &GraphProto, order: &[usize]) -> Fusions {
    let mut ix = Index {
        g,
        producer: HashMap::new(),
        uses: HashMap::new(),
        consumers: HashMap::new(),
        inits: HashMap::new(),
        dynamic: HashSet::new(),
    };
    for (i, t) in g.initializer.iter().enumerate() {
        ix.inits.insert(t.name(), i);
    }
    for (i, n) in g.node.iter().enumerate() {
        for o in &n.output {
            ix.producer.insert(o.as_str(), i);
        }
        for s in n.input.iter().filter(|s| !s.is_empty()) {
            *ix.uses.entry(s.as_str()).or_default() += 1;
            ix.consumers.entry(s.as_str()).or_default().push(i);
        }
    }
    for o in &g.output {
        *ix.uses.entry(o.name()).or_default() += 1;
    }
    for vi in &g.input {
        if !ix.inits.contains_key(vi.name()) {
            ix.dynamic.insert(vi.name());
        }
    }
    for &i in order {
        let n = &g.node[i];
        // shapes are known when the graph is built
        if matches!(n.op_type(), "Shape" | "Size") {
            continue;
        }
        if n.input.iter().any(|s| ix.dynamic.contains(s.as_str())) {
            for o in &n.output {
                ix.dynamic.insert(o.as_str());
            }
        }
    }
    let mut f = Fusions::default();
    let position: HashMap<usize, usize> = order.iter().enumerate().map(|(k, &i)| (i, k)).collect();
    for &i in order {
        let n = &g.node[i];
        if !n.domain().is_empty() {
            continue;
        }
        match n.op_type() {
            "MatMul" => {
                if let Some((sdpa, parts)) = sdpa(&ix, n) {
                    f.add(i, Fusion::Sdpa(sdpa), parts, &position);
                } else if let Some((lin, parts)) = linear(&ix, n) {
                    f.add(i, Fusion::Linear(lin), parts, &position);
                }
            }
            "Mul" => {
                if let Some((gelu, parts)) = gelu(&ix, n) {
                    f.add(i, Fusion::Gelu(gelu), parts, &position);
                }
            }
            _ => {}
        }
    }
    f.position = position;
    f
}

impl Fusions {
    fn add(
        &mut self,
        anchor: usize,
        fusion: Fusion,
        mut parts: Vec<usize>,
        position: &HashMap<usize, usize>,
    ) {
        if parts
            .iter()
            .any(|p| self.absorbed.contains(p) || self.at.contains_key(p))
        {
            return;
        }
        parts.sort_unstable_by_key(|p| position.get(p).copied().unwrap_or(usize::MAX));
        self.absorbed.extend(parts.iter().copied());
        self.parts.insert(anchor, parts);
        self.at.insert(anchor, fusion);
    }
}

fn linear(ix: &Index, n: &NodeProto) -> Option<(LinearFusion, Vec<usize>)> {
    let w = n.input.get(1)?.as_str();
    let mut parts = Vec::new();
    let (weight, transposed) = if ix.init_rank(w) == Some(2) {
        (w.to_string(), false)
    } else {
        let (t, tn) = ix.op(w, "Transpose")?;
        let src = tn.input.first()?.as_str();
        let perm = tn.attribute.iter().find(|a| a.name() == "perm");
        let swaps = perm.is_none_or(|a| a.ints[..] == [1, 0]);
        if !swaps || ix.init_rank(src) != Some(2) || !ix.single_use(w) {
            return None;
        }
        parts.push(t);
        (src.to_string(), true)
    };
    let out = n.output.first()?.as_str();
    let mut add = None;
    let mut bias = None;
    if ix.single_use(out) {
        let consumer = ix.consumers.get(out).and_then(|c| c.first()).copied();
        if let Some((a, an)) = consumer
            .map(|a| (a, &ix.g.node[a]))
            .filter(|(_, m)| m.op_type() == "Add" && m.domain().is_empty())
        {
            let other = an.input.iter().find(|s| s.as_str() != out)?;
            if an.input.len() == 2 && ix.init_rank(other) == Some(1) {
                add = Some(a);
                bias = Some(other.clone());
                parts.push(a);
            }
        }
    }
    Some((
        LinearFusion {
            weight,
            transposed,
            add,
            bias,
        },
        parts,
    ))
}

fn gelu(ix: &Index, n: &NodeProto) -> Option<(GeluFusion, Vec<usize>)> {
    // Mul(inner, 0.5)
    let (inner, _) = ix.dyn_static(n)?;
    let (mi, mn) = ix.op(inner, "Mul")?;
    if !ix.single_use(inner) {
        return None;
    }
    let (a0, a1) = (mn.input.first()?.as_str(), mn.input.get(1)?.as_str());
    // Mul(x, Add(Erf(Div(x, √2)), 1)), either order
    for (x, add_out) in [(a0, a1), (a1, a0)] {
        let Some((ai, an)) = ix.op(add_out, "Add") else {
            continue;
        };
        let Some((erf_out, _)) = ix.dyn_static(an) else {
            continue;
        };
        let Some((ei, en)) = ix.op(erf_out, "Erf") else {
            continue;
        };
        let div_out = en.input.first()?.as_str();
        let Some((di, dn)) = ix.op(div_out, "Div") else {
            continue;
        };
        let ok = dn.input.first().map(String::as_str) == Some(x)
            && dn.input.get(1).is_some_and(|c| ix.is_static(c))
            && [add_out, erf_out, div_out].iter().all(|v| ix.single_use(v));
        if ok {
            return Some((
                GeluFusion {
                    x: x.to_string(),
                    div: di,
                    add: ai,
                },
                vec![di, ei, ai, mi],
            ));
        }
    }
    None
}

fn sdpa(ix: &Index, n: &NodeProto) -> Option<(SdpaFusion, Vec<usize>)> {
    let mut parts = Vec::new();
    let probs = n.input.first()?.as_str();
    let v = n.input.get(1)?.as_str();
    if !ix.single_use(probs) {
        return None;
    }
    // [Dropout] and the boolean-mask NaN guard Where(IsNaN(p), 0, p), in either order
    let mut p = probs;
    let mut dropout = None;
    loop {
        if let Some((di, dn)) = ix.op(p, "Dropout") {
            let extra_outputs_unused = dn
                .output
                .iter()
                .skip(1)
                .all(|o| !ix.uses.contains_key(o.as_str()));
            if dropout.is_some() || !extra_outputs_unused {
                return None;
            }
            dropout = Some(di);
            parts.push(di);
            p = dn.input.first()?.as_str();
            if !ix.single_use(p) {
                return None;
            }
            continue;
        }
        if let Some((wi, wn)) = ix.op(p, "Where") {
            let sm = wn.input.get(2)?.as_str();
            let (ni, nn) = ix.op(wn.input.first()?, "IsNaN")?;
            if nn.input.first().map(String::as_str) != Some(sm) || ix.uses.get(sm) != Some(&2) {
                return None;
            }
            parts.extend([wi, ni]);
            p = sm;
            break;
        }
        if !ix.single_use(p) {
            return None;
        }
        break;
    }
    let (si, sn) = ix.op(p, "Softmax")?;
    let axis = sn
        .attribute
        .iter()
        .find(|a| a.name() == "axis")
        .map_or(-1, |a| a.i());
    if axis != -1 {
        return None;
    }
    parts.push(si);
    let mut scores = sn.input.first()?.as_str();
    let mut mask = None;
    let mut causal = false;
    if let Some((ai, an)) = ix.op(scores, "Add") {
        if !ix.single_use(scores) {
            return None;
        }
        let (a, b) = (an.input.first()?.as_str(), an.input.get(1)?.as_str());
        let (s, m) = if ix.op(a, "MatMul").is_some() {
            (a, b)
        } else {
            (b, a)
        };
        causal = ix.is_static(m) && built_by_trilu(ix, m, 8);
        mask = Some(m.to_string());
        parts.push(ai);
        scores = s;
    }
    let (mi, mn) = ix.op(scores, "MatMul")?;
    if !ix.single_use(scores) {
        return None;
    }
    parts.push(mi);
    let (qs, ks) = (mn.input.first()?.as_str(), mn.input.get(1)?.as_str());
    let (qi, qn) = ix.op(qs, "Mul")?;
    let (ki, kn) = ix.op(ks, "Mul")?;
    if !ix.single_use(qs) || !ix.single_use(ks) {
        return None;
    }
    let (q, _) = ix.dyn_static(qn)?;
    let (kt, _) = ix.dyn_static(kn)?;
    let (ti, tn) = ix.op(kt, "Transpose")?;
    let perm: Vec<i64> = tn
        .attribute
        .iter()
        .find(|a| a.name() == "perm")
        .map(|a| a.ints.clone())?;
    let r = perm.len();
    let swaps_last = r >= 2
        && perm[..r - 2]
            .iter()
            .enumerate()
            .all(|(i, &p)| p == i as i64)
        && perm[r - 2] == r as i64 - 1
        && perm[r - 1] == r as i64 - 2;
    if !swaps_last {
        return None;
    }
    if ix.single_use(kt) {
        parts.push(ti);
    }
    parts.extend([qi, ki]);
    Some((
        SdpaFusion {
            q: q.to_string(),
            k: tn.input.first()?.clone(),
            v: v.to_string(),
            scales: [qi, ki],
            mask,
            causal,
            dropout,
        },
        parts,
    ))
}

/// Whether static value `v` is computed from a lower-triangular `Trilu` (the exporter's causal
/// mask), looking `depth` producers back.
fn built_by_trilu(ix: &Index, v: &str, depth: usize) -> bool {
    if depth == 0 {
        return false;
    }
    let Some((_, n)) = ix.node(v) else {
        return false;
    };
    if n.op_type() == "Trilu" {
        return n
            .attribute
            .iter()
            .find(|a| a.name() == "upper")
            .is_none_or(|a| a.i() == 0);
    }
    n.input
        .iter()
        .any(|s| !s.is_empty() && built_by_trilu(ix, s, depth - 1))
}
