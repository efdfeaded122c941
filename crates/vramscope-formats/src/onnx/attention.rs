//! Attention: the exporter's spelling of `F.scaled_dot_product_attention` (found by `fuse.rs`),
//! the ONNX `Attention` op (opset 23) and `com.microsoft::Attention` (packed QKV projection);
//! whole `nn.MultiheadAttention` modules are in `modules.rs`.
//!
//! The fused kernels (cuDNN, flash, mem-efficient attention) lay their output out as
//! `[B, L, H, d]`, so `transpose(1, 2).reshape(B, L, H·d)` after them is a view; the output's
//! strides say so. An additive mask is read by the kernel and adds no memory of its own beyond
//! its tensor (a causal mask from the exporter's `Trilu` becomes `is_causal=True`).

use vramscope_core::ops::{Linear, ScaledDotProductAttention};
use vramscope_core::{GraphBuilder, TensorId};

use super::fuse::SdpaFusion;
use super::layout;
use super::lower::{attr_i, broadcast_dims, input_name, Lowerer, Val, R};
use super::proto::NodeProto;

impl Lowerer<'_> {
    /// The `Dropout` ratio of node `d` (input 1, else the `ratio` attribute, else 0.5).
    pub(super) fn dropout_ratio(&self, d: usize) -> f64 {
        let n = &self.file.graph().node[d];
        match n.input.get(1).filter(|s| !s.is_empty()) {
            Some(r) => self.scalar(r).unwrap_or(0.5),
            None => super::lower::attr_f(n, "ratio", 0.5),
        }
    }

    /// `scaled_dot_product_attention(q, k, v)` on `[B, H, L, d]` tensors (3-D ones get a unit
    /// head dim); the output is laid out `[B, L, H, d]`.
    pub(super) fn sdpa(
        &mut self,
        b: &mut GraphBuilder,
        leaf: Option<&str>,
        qkv: [TensorId; 3],
        dropout_p: f64,
        causal: bool,
        row_stats_temporary: bool,
    ) -> R<TensorId> {
        let ranks: Vec<usize> = qkv.iter().map(|&t| b.shape(t).len()).collect();
        let three = ranks.iter().all(|&r| r == 3);
        if !three && !ranks.iter().all(|&r| r == 4) {
            return Err(format!(
                "attention over tensors of ranks {ranks:?}: 3-D or 4-D q, k, v are supported"
            ));
        }
        let mut ins = qkv;
        if three {
            for t in &mut ins {
                let s = b.shape(*t).to_vec();
                *t = self.reshape(b, "unsqueeze", *t, vec![s[0], 1, s[1], s[2]]);
            }
        }
        let op = ScaledDotProductAttention {
            dropout_p,
            causal,
            row_stats_temporary,
            kv_contiguous: false,
        };
        let mut y = self.emit(b, leaf, op, &ins);
        let s = b.shape(y).to_vec();
        self.set_strides(b, y, layout::with_order(&s, &[0, 2, 1, 3]));
        if three {
            y = self.reshape(b, "squeeze", y, vec![s[0], s[2], s[3]]);
        }
        self.producer.insert(y, "Attention".into());
        Ok(y)
    }

    /// The fused pattern anchored at the final `MatMul` `n`.
    pub(super) fn lower_sdpa(
        &mut self,
        b: &mut GraphBuilder,
        idx: usize,
        n: &NodeProto,
        f: &SdpaFusion,
        leaf: Option<&str>,
    ) -> R<bool> {
        let g = self.file.graph();
        let scaled_by_constant = f.scales.iter().all(|&m| {
            g.node[m]
                .input
                .iter()
                .any(|s| !self.is_act(s) && self.konst(s).is_some_and(|k| k.numel() == 1))
        });
        let ranks_ok = [&f.q, &f.k, &f.v]
            .iter()
            .all(|v| self.dims_of_act(v).is_some_and(|r| r == 3 || r == 4));
        if !scaled_by_constant || !ranks_ok {
            return Ok(false);
        }
        let q = self.act(b, &f.q)?;
        let k = self.act(b, &f.k)?;
        let v = self.act(b, &f.v)?;
        let dropout_p = f.dropout.map_or(0.0, |d| self.dropout_ratio(d));
        let out = n.output.first().cloned().unwrap_or_default();
        // the output gradient arrives permuted (not as `[B, L, H, d]`) when the output is
        // permuted other than transpose(1, 2) (nn.MultiheadAttention's permute(2, 0, 1, 3))
        let row_stats = g.node.iter().any(|m| {
            m.op_type() == "Transpose"
                && m.input.first() == Some(&out)
                && super::lower::attr_ints(m, "perm").is_some_and(|p| p[..] != [0, 2, 1, 3])
        });
        let y = self.sdpa(b, leaf, [q, k, v], dropout_p, f.causal, row_stats)?;
        // shapes of the values the pattern absorbed
        let (qs, ks) = (b.shape(q).to_vec(), b.shape(k).to_vec());
        let mut kt = ks.clone();
        let r = kt.len();
        kt.swap(r - 1, r - 2);
        let mut scores = qs[..qs.len() - 1].to_vec();
        scores.push(kt[r - 1]);
        if let Some(m) = &f.mask {
            if let Ok(md) = self.dims_of(b, m) {
                scores = broadcast_dims(&scores, &md).unwrap_or(scores);
            }
        }
        for &p in self.fusions.parts.get(&idx).into_iter().flatten() {
            let pn = &g.node[p];
            let shape = match pn.op_type() {
                "Transpose" => kt.clone(),
                "Mul" if pn.input.first() == Some(&f.q) || pn.input.get(1) == Some(&f.q) => {
                    qs.clone()
                }
                "Mul" => kt.clone(),
                _ => scores.clone(),
            };
            for o in pn.output.iter().filter(|o| !o.is_empty()) {
                self.shapes.insert(o.clone(), shape.clone());
            }
        }
        self.set(b, &out, Val::Act(y));
        Ok(true)
    }

    /// The rank of value `name` when it is (or will be) a tensor.
    fn dims_of_act(&self, name: &str) -> Option<usize> {
        match self.vals.get(name)? {
            Val::Act(_) => self.shapes.get(name).map(Vec::len),
            _ => None,
        }
    }

    /// `[B, L, H·d]` → `[B, H, L, d]` (a view of the heads, transposed).
    fn split_heads(&mut self, b: &mut GraphBuilder, t: TensorId, heads: u64) -> R<TensorId> {
        let s = b.shape(t).to_vec();
        if heads == 0 || !s[2].is_multiple_of(heads) {
            return Err(format!(
                "hidden size {} is not a multiple of {heads} heads",
                s[2]
            ));
        }
        let v = self.reshape(b, "view", t, vec![s[0], s[1], heads, s[2] / heads]);
        Ok(self.permute(b, "transpose", v, &[0, 2, 1, 3]))
    }

    /// `[B, H, L, d]` → `[B, L, H·d]`.
    fn merge_heads(&mut self, b: &mut GraphBuilder, t: TensorId) -> TensorId {
        let s = b.shape(t).to_vec();
        let y = self.permute(b, "transpose", t, &[0, 2, 1, 3]);
        self.reshape(b, "reshape", y, vec![s[0], s[2], s[1] * s[3]])
    }

    /// ONNX `Attention` (opset 23): q, k, v as `[B, H, L, d]`, or `[B, L, H·d]` with
    /// `q_num_heads`/`kv_num_heads`.
    pub(super) fn lower_attention_op(
        &mut self,
        b: &mut GraphBuilder,
        n: &NodeProto,
        leaf: Option<&str>,
    ) -> R<()> {
        let inp = |i: usize| input_name(n, i);
        if !inp(4).is_empty() || !inp(5).is_empty() {
            return Err("past_key / past_value (a KV cache) are not supported".into());
        }
        if n.output
            .iter()
            .skip(1)
            .any(|o| !o.is_empty() && self.uses.contains_key(o))
        {
            return Err(
                "only output Y may be used (present_key, present_value, qk_matmul_output are not supported)"
                    .into(),
            );
        }
        let mut q = self.act(b, inp(0))?;
        let mut k = self.act(b, inp(1))?;
        let mut v = self.act(b, inp(2))?;
        let rank = b.shape(q).len();
        if [k, v].iter().any(|&t| b.shape(t).len() != rank) {
            return Err(format!(
                "Q {:?}, K {:?} and V {:?} must have the same rank",
                b.shape(q),
                b.shape(k),
                b.shape(v)
            ));
        }
        let causal = attr_i(n, "is_causal", 0) != 0;
        let three = rank == 3;
        if three {
            let hq = attr_i(n, "q_num_heads", 0);
            let hkv = attr_i(n, "kv_num_heads", 0);
            if hq <= 0 || hkv <= 0 {
                return Err(format!(
                    "3-D inputs need positive q_num_heads and kv_num_heads (got {hq}, {hkv})"
                ));
            }
            if hq != hkv {
                return Err(format!(
                    "q_num_heads {hq} != kv_num_heads {hkv}: grouped-query attention is not supported"
                ));
            }
            q = self.split_heads(b, q, hq as u64)?;
            k = self.split_heads(b, k, hkv as u64)?;
            v = self.split_heads(b, v, hkv as u64)?;
        } else if rank == 4 {
            let (qh, kh) = (b.shape(q)[1], b.shape(k)[1]);
            if qh != kh {
                return Err(format!(
                    "{qh} query heads and {kh} key heads: grouped-query attention is not supported"
                ));
            }
        } else {
            return Err(format!("Q of rank {rank}: 3-D or 4-D inputs are supported"));
        }
        let mut y = self.sdpa(b, leaf, [q, k, v], 0.0, causal, false)?;
        if three {
            y = self.merge_heads(b, y);
        }
        let out = n.output.first().cloned().unwrap_or_default();
        self.set(b, &out, Val::Act(y));
        Ok(())
    }

    /// `com.microsoft::Attention`: the packed QKV projection (`weights` `[hidden, 3·hidden]`,
    /// `bias`) as a `Linear`, the heads, attention (causal when `unidirectional`), the merge.
    pub(super) fn lower_ms_attention(
        &mut self,
        b: &mut GraphBuilder,
        idx: usize,
        n: &NodeProto,
        leaf: Option<&str>,
    ) -> R<()> {
        let inp = |i: usize| input_name(n, i);
        if !inp(4).is_empty() {
            return Err("`past` (a KV cache) is not supported".into());
        }
        if n.output
            .iter()
            .skip(1)
            .any(|o| !o.is_empty() && self.uses.contains_key(o))
        {
            return Err("output `present` is not supported".into());
        }
        if attr_i(n, "do_rotary", 0) != 0 {
            return Err("do_rotary=1 is not supported".into());
        }
        let heads = attr_i(n, "num_heads", 0);
        if heads <= 0 {
            return Err(format!("num_heads = {heads} must be positive"));
        }
        let x = self.act(b, inp(0))?;
        let xs = b.shape(x).to_vec();
        let w = self.init_dims(inp(1))?;
        if xs.len() != 3 || w.len() != 2 || w[0] != xs[2] || w[1] % 3 != 0 {
            return Err(format!(
                "input {xs:?} and weights {w:?} must be [B, S, hidden] and [hidden, 3·hidden]"
            ));
        }
        if let Some(sizes) =
            super::lower::attr_ints(n, "qkv_hidden_sizes").filter(|s| !s.is_empty())
        {
            if sizes.len() != 3 || sizes.iter().any(|&s| s != sizes[0]) {
                return Err(format!(
                    "qkv_hidden_sizes {sizes:?}: only equal q, k, v sizes are supported"
                ));
            }
        }
        let hidden = w[1] / 3;
        let causal = attr_i(n, "unidirectional", 0) != 0;
        let bias = !inp(2).is_empty();
        let name = self.param_leaf(leaf, inp(1), idx);
        let mut err = None;
        let y = b.module(&name, "Attention", &[x], |b| {
            let qkv = b.layer(
                "qkv",
                Linear {
                    in_features: w[0],
                    out_features: w[1],
                    bias,
                },
                &[x],
            );
            let h = heads as u64;
            if !hidden.is_multiple_of(h) {
                err = Some(format!(
                    "hidden size {hidden} is not a multiple of {h} heads"
                ));
                return qkv;
            }
            let d = hidden / h;
            let p = self.reshape(b, "view", qkv, vec![xs[0], xs[1], 3, h, d]);
            let p = self.permute(b, "permute", p, &[2, 0, 3, 1, 4]);
            let q = self.select(b, p, 0);
            let k = self.select(b, p, 0);
            let v = self.select(b, p, 0);
            match self.sdpa(b, None, [q, k, v], 0.0, causal, false) {
                Ok(o) => self.merge_heads(b, o),
                Err(e) => {
                    err = Some(e);
                    qkv
                }
            }
        });
        if let Some(e) = err {
            return Err(e);
        }
        self.producer.insert(y, "Attention".into());
        let out = n.output.first().cloned().unwrap_or_default();
        self.set(b, &out, Val::Act(y));
        Ok(())
    }
}
