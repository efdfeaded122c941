//! Module calls recognised as a whole, lowered to the program their PyTorch `forward` runs
//! rather than node by node, because the nodes alone do not say it:
//!
//! - `nn.MultiheadAttention` (`batch_first=True`, self-attention, no masks), recognised by its
//!   parameters `in_proj_weight`, `in_proj_bias`, `out_proj.{weight,bias}` and the exporter's
//!   attention pattern: `F.multi_head_attention_forward`'s strided in-projection, packed q/k/v
//!   copy, the views whose backward copies, and the merge after the attention kernel (the
//!   program the zoo's ViT uses);
//! - torchvision's `_DenseLayer` (a module that concatenates its inputs and runs children
//!   `norm1, relu1, conv1, norm2, relu2, conv2`): its `bn_function` keeps the concatenation alive
//!   until `conv1` returns and `forward` keeps `conv1`'s output until it returns (Python locals,
//!   which matter without autograd, in inference).

use vramscope_core::{GraphBuilder, TensorId};

use super::fuse::{Fusion, SdpaFusion};
use super::lower::{emit_items, external_inputs, Item, Lowerer, Val};

/// Where a `_DenseLayer` call splits: `bn_function` is the items before `split`.
pub(super) struct DenseLayer {
    split: usize,
    concat: String,
    bottleneck: String,
}

impl Lowerer<'_> {
    /// Lowers a whole module call when its nodes are a known PyTorch module
    /// (`nn.MultiheadAttention` with `batch_first=True`, self-attention, no masks); `false`
    /// leaves the group to the node-by-node lowering.
    pub(super) fn lower_mha(
        &mut self,
        b: &mut GraphBuilder,
        group: &[Item],
        path: &str,
        name: &str,
    ) -> bool {
        let Some(plan) = self.mha_plan(b, group, path) else {
            return false;
        };
        let MhaPlan {
            x,
            out,
            e,
            heads,
            n,
            l,
            dropout_p,
        } = plan;
        let y = b.module(name, "MultiheadAttention", &[x], |b| {
            crate::zoo::vit::multi_head_attention(b, x, e, heads, n, l, dropout_p)
        });
        self.producer.insert(y, "MultiheadAttention".into());
        // the module's inner values keep the shapes of the generic pass
        let g = self.file.graph();
        let mut nodes: Vec<usize> = group.iter().map(|it| it.node).collect();
        for it in group {
            nodes.extend(self.fusions.parts.get(&it.node).into_iter().flatten());
        }
        if let Some(h) = &self.hints {
            for &i in &nodes {
                for o in &g.node[i].output {
                    if let Some(s) = h.get(o) {
                        self.shapes.insert(o.clone(), s.clone());
                    }
                }
            }
        }
        self.set(b, &out, Val::Act(y));
        true
    }

    fn mha_plan(&self, b: &GraphBuilder, group: &[Item], path: &str) -> Option<MhaPlan> {
        let hints = self.hints.as_ref()?;
        let g = self.file.graph();
        let init = |suffix: &str| -> Option<Vec<u64>> {
            let key = format!("{path}.{suffix}");
            matches!(self.vals.get(&key), Some(Val::Init(_)))
                .then(|| self.init_dims(&key).ok())
                .flatten()
        };
        let w = init("in_proj_weight")?;
        init("in_proj_bias")?;
        init("out_proj.weight")?;
        init("out_proj.bias")?;
        if w.len() != 2 || w[0] != 3 * w[1] {
            return None;
        }
        let e = w[1];
        let sdpas: Vec<&SdpaFusion> = group
            .iter()
            .filter_map(|it| match self.fusions.at.get(&it.node) {
                Some(Fusion::Sdpa(s)) => Some(s),
                _ => None,
            })
            .collect();
        let [s] = sdpas[..] else { return None };
        if s.mask.is_some() {
            return None;
        }
        let q = hints.get(&s.q)?;
        let inputs = external_inputs(self, group);
        let [x] = inputs[..] else { return None };
        let xs = b.shape(x).to_vec();
        if xs.len() != 3 || xs[2] != e || q.len() != 4 || q[1] == 0 || q[1] * q[3] != e {
            return None;
        }
        let x_name = self
            .vals
            .iter()
            .find(|(_, v)| matches!(v, Val::Act(t) if *t == x))
            .map(|(k, _)| k.clone())?;
        // batch_first=True: the module starts with query.transpose(1, 0)
        let transposed = group.iter().any(|it| {
            let nd = &g.node[it.node];
            nd.op_type() == "Transpose"
                && nd.input.first() == Some(&x_name)
                && super::lower::attr_ints(nd, "perm").is_some_and(|p| p[..] == [1, 0, 2])
        });
        if !transposed {
            return None;
        }
        // exactly one value leaves the module, shaped like its input
        let mut nodes: Vec<usize> = group.iter().map(|it| it.node).collect();
        for it in group {
            nodes.extend(self.fusions.parts.get(&it.node).into_iter().flatten());
        }
        let mut inner_uses: std::collections::HashMap<&str, usize> = Default::default();
        for &i in &nodes {
            for s in &g.node[i].input {
                *inner_uses.entry(s.as_str()).or_default() += 1;
            }
        }
        let leaving: Vec<&String> = nodes
            .iter()
            .flat_map(|&i| g.node[i].output.iter())
            .filter(|o| {
                self.uses.get(o.as_str()).copied().unwrap_or(0)
                    > inner_uses.get(o.as_str()).copied().unwrap_or(0)
            })
            .collect();
        let [out] = leaving[..] else { return None };
        if hints.get(out.as_str()) != Some(&xs) {
            return None;
        }
        let dropout_p = s.dropout.map_or(0.0, |d| self.dropout_ratio(d));
        Some(MhaPlan {
            x,
            out: out.clone(),
            e,
            heads: q[1],
            n: xs[0],
            l: xs[1],
            dropout_p,
        })
    }

    /// A torchvision `_DenseLayer` call (see the module docs).
    pub(super) fn dense_layer(&self, group: &[Item], depth: usize) -> Option<DenseLayer> {
        let g = self.file.graph();
        let first = group.first()?;
        let cat = &g.node[first.node];
        if cat.op_type() != "Concat" || first.levels.len() != depth + 1 {
            return None;
        }
        let child = |it: &Item| -> Option<String> {
            let l = it.levels.get(depth + 1)?;
            Some(l.path.rsplit('.').next().unwrap_or(&l.path).to_string())
        };
        let want = ["norm1", "relu1", "conv1", "norm2", "relu2", "conv2"];
        let mut seen: Vec<String> = Vec::new();
        let mut split = None;
        let mut bottleneck = None;
        for (k, it) in group.iter().enumerate().skip(1) {
            let c = child(it)?;
            if seen.last() != Some(&c) {
                seen.push(c.clone());
            }
            if c == "conv1" {
                split = Some(k + 1);
                bottleneck = g.node[it.node].output.first().cloned();
            }
        }
        if seen != want {
            return None;
        }
        Some(DenseLayer {
            split: split?,
            concat: cat.output.first()?.clone(),
            bottleneck: bottleneck?,
        })
    }

    /// Emits a recognised module call; `false` leaves the group to the node-by-node lowering.
    pub(super) fn lower_module(
        &mut self,
        b: &mut GraphBuilder,
        group: &[Item],
        depth: usize,
        path: &str,
        name: &str,
    ) -> bool {
        if self.lower_mha(b, group, path, name) {
            return true;
        }
        let Some(d) = self.dense_layer(group, depth) else {
            return false;
        };
        let inputs = external_inputs(self, group);
        self.scope.push(path.to_string());
        b.module(name, "_DenseLayer", &inputs, |b| {
            // bn_function(prev_features): `concated_features` lives until it returns
            b.frame(|b| {
                emit_items(b, self, &group[..d.split], depth + 1);
                if let Some(Val::Act(t)) = self.vals.get(&d.concat) {
                    b.hold(&[*t]);
                }
            });
            // `bottleneck_output` lives until forward returns
            if let Some(Val::Act(t)) = self.vals.get(&d.bottleneck) {
                b.hold(&[*t]);
            }
            emit_items(b, self, &group[d.split..], depth + 1);
        });
        self.scope.pop();
        true
    }
}

struct MhaPlan {
    x: TensorId,
    out: String,
    e: u64,
    heads: u64,
    n: u64,
    l: u64,
    dropout_p: f64,
}
