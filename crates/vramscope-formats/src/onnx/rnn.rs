//! `LSTM` and `GRU` nodes as PyTorch's `nn.LSTM` / `nn.GRU` run them on CUDA without cuDNN
//! (what the truth tool measures, see `vramscope_core::ops::LstmCell`): per direction,
//! `input.unbind(0)`, then per time step `mm(x_t, w_ih.t())`, `mm(h, w_hh.t())` and the fused
//! cell, then `stack` of the step outputs; bidirectional layers `cat` their two directions on
//! the feature dim. `h0`/`c0` default to zeros made in the module's forward.
//!
//! Parameters get PyTorch's names (`weight_ih_l{k}`, `weight_hh_l{k}`, `bias_ih_l{k}`,
//! `bias_hh_l{k}`, `_reverse` for the backward direction; one ONNX node per layer, `k` counting
//! the nodes under the same scope) and PyTorch's sizes: ONNX's `W [D, G·H, F]`, `R [D, G·H, H]`
//! and `B [D, 2·G·H]` hold exactly the same numbers, gate-reordered.

use vramscope_core::ops::{Aten, Autocast, Cat, DTypeRule, GradIn, GruCell, LstmCell, Saved, View};
use vramscope_core::{GraphBuilder, TensorId};

use super::lower::{attr, attr_i, input_name, Lowerer, Val, R};
use super::proto::NodeProto;

/// What an `LSTM`/`GRU` node asks for.
struct RnnSpec {
    lstm: bool,
    hidden: u64,
    input: u64,
    directions: usize,
    reverse_only: bool,
    bias: bool,
    layer: usize,
    batch_first: bool,
}

impl Lowerer<'_> {
    pub(super) fn lower_rnn(
        &mut self,
        b: &mut GraphBuilder,
        n: &NodeProto,
        leaf: Option<&str>,
    ) -> R<()> {
        let inp = |i: usize| input_name(n, i);
        let lstm = n.op_type() == "LSTM";
        let gates: u64 = if lstm { 4 } else { 3 };
        let hidden = attr_i(n, "hidden_size", 0);
        if hidden <= 0 {
            return Err(format!("hidden_size = {hidden} must be positive"));
        }
        let hidden = hidden as u64;
        let direction = super::lower::attr_s(n, "direction").unwrap_or_else(|| "forward".into());
        let (directions, reverse_only) = match direction.as_str() {
            "forward" => (1, false),
            "reverse" => (1, true),
            "bidirectional" => (2, false),
            other => {
                return Err(format!(
                    "direction {other:?} is not forward, reverse or bidirectional"
                ))
            }
        };
        let layout = attr_i(n, "layout", 0);
        if layout != 0 && layout != 1 {
            return Err(format!("layout {layout} is not 0 or 1"));
        }
        if let Some(a) = attr(n, "activations").filter(|a| !a.strings.is_empty()) {
            let want: &[&[u8]] = if lstm {
                &[b"Sigmoid", b"Tanh", b"Tanh"]
            } else {
                &[b"Sigmoid", b"Tanh"]
            };
            let per_dir: Vec<&[u8]> = a.strings.iter().map(|s| s.as_ref()).collect();
            if per_dir.chunks(want.len()).any(|c| c != want) {
                return Err(
                    "activations other than PyTorch's (Sigmoid, Tanh[, Tanh]) are not supported"
                        .into(),
                );
            }
        }
        if attr_i(n, "input_forget", 0) != 0 {
            return Err("input_forget=1 (coupled gates) is not supported".into());
        }
        if !inp(4).is_empty() && self.is_act(inp(4)) {
            return Err(
                "sequence_lens computed at run time (packed, variable-length sequences) is not supported"
                    .into(),
            );
        }
        if lstm && !inp(7).is_empty() {
            return Err("peephole weights (input P) are not supported".into());
        }
        let x = self.act(b, inp(0))?;
        let xs = b.shape(x).to_vec();
        if xs.len() != 3 {
            return Err(format!("input X {xs:?} must be 3-D"));
        }
        let w = self.dims_of(b, inp(1))?;
        let r = self.dims_of(b, inp(2))?;
        let d = directions as u64;
        let input = xs[2];
        if w != [d, gates * hidden, input] || r != [d, gates * hidden, hidden] {
            return Err(format!(
                "W {w:?} and R {r:?} do not fit {directions} direction(s), hidden_size {hidden} and input size {input} (expected [{d}, {}, {input}] and [{d}, {}, {hidden}])",
                gates * hidden,
                gates * hidden
            ));
        }
        let bias = !inp(3).is_empty();
        if bias {
            let bd = self.dims_of(b, inp(3))?;
            if bd != [d, 2 * gates * hidden] {
                return Err(format!("B {bd:?} must be [{d}, {}]", 2 * gates * hidden));
            }
        }
        let scope = n.name().rsplit_once('/').map_or("", |(s, _)| s).to_string();
        let layer = {
            let c = self.rnn_layers.entry(scope).or_default();
            *c += 1;
            *c - 1
        };
        let spec = RnnSpec {
            lstm,
            hidden,
            input,
            directions,
            reverse_only,
            bias,
            layer,
            batch_first: layout == 1,
        };
        let batch = xs[if layout == 1 { 0 } else { 1 }];
        let ty = if lstm { "LSTM" } else { "GRU" };
        let (h_name, c_name) = (inp(5).to_string(), inp(6).to_string());
        let run = |lw: &mut Self, b: &mut GraphBuilder| -> R<Vec<TensorId>> {
            let dims = [d, batch, hidden];
            let mut h0 = lw.initial_state(b, &h_name, "h", x, dims)?;
            let mut c0 = if lstm {
                Some(lw.initial_state(b, &c_name, "c", x, dims)?)
            } else {
                None
            };
            // nn.LSTM.forward keeps `hx` until it returns
            b.hold(&[h0]);
            b.hold(&c0.into_iter().collect::<Vec<_>>());
            // layout 1 states are [B, D, H]
            if layout == 1 {
                if lw.is_act(&h_name) {
                    h0 = lw.permute(b, "transpose", h0, &[1, 0, 2]);
                }
                if let Some(c) = c0.filter(|_| lw.is_act(&c_name)) {
                    c0 = Some(lw.permute(b, "transpose", c, &[1, 0, 2]));
                }
            }
            // the C++ layer loop keeps a layer's input until its output is stacked
            b.frame(|b| {
                b.hold(&[x]);
                lw.rnn_body(b, x, &spec, h0, c0)
            })
        };
        let mut err = None;
        let outs = match leaf {
            Some(name) => b.module(name, ty, &[x], |b| {
                run(self, b).unwrap_or_else(|e| {
                    err = Some(e);
                    Vec::new()
                })
            }),
            None => run(self, b)?,
        };
        if let Some(e) = err {
            return Err(e);
        }
        for (name, t) in n.output.iter().zip(outs) {
            if !name.is_empty() {
                self.producer.insert(t, ty.into());
                self.set(b, name, Val::Act(t));
            }
        }
        Ok(())
    }

    /// `initial_h` / `initial_c` `[D, B, H]`: a tensor computed at run time, or zeros made in the
    /// forward (`torch.zeros(layers·D, B, H, dtype=x.dtype)`): for a slice of a
    /// `ConstantOfShape` (the exporter's spelling of that call) the whole constant, once for
    /// all the layers that slice it (`h0` and `c0` are two tensors, `slot`).
    fn initial_state(
        &mut self,
        b: &mut GraphBuilder,
        name: &str,
        slot: &str,
        x: TensorId,
        dims: [u64; 3],
    ) -> R<TensorId> {
        if !name.is_empty() && self.is_act(name) {
            return self.act(b, name);
        }
        let g = self.file.graph();
        let mut root = name.to_string();
        for _ in 0..8 {
            let Some(&p) = self.producer_node.get(&root) else {
                break;
            };
            let pn = &g.node[p];
            if !matches!(
                pn.op_type(),
                "Slice" | "Squeeze" | "Unsqueeze" | "Reshape" | "Identity"
            ) {
                break;
            }
            root = pn.input.first().cloned().unwrap_or_default();
        }
        let full = match self.konst(&root) {
            Some(k) if k.dims.len() == 3 && k.dims[1..] == dims[1..] && k.dims[0] >= dims[0] => {
                k.dims
            }
            _ => {
                root = format!("{name}#");
                dims.to_vec()
            }
        };
        root.push_str(slot);
        if let Some(&z) = self.rnn_zeros.get(&root) {
            return Ok(z);
        }
        let z = b.op(
            Aten::new("zeros", full)
                .dtype(DTypeRule::Like(0))
                .not_differentiable(),
            &[x],
        );
        self.rnn_zeros.insert(root, z);
        Ok(z)
    }

    /// The module's forward: returns Y, Y_h and (LSTM) Y_c in ONNX's shapes.
    fn rnn_body(
        &mut self,
        b: &mut GraphBuilder,
        x: TensorId,
        s: &RnnSpec,
        h0: TensorId,
        c0: Option<TensorId>,
    ) -> R<Vec<TensorId>> {
        let (h, dirs) = (s.hidden, s.directions as u64);
        // batch_first: input.transpose(0, 1)
        let x = if s.batch_first {
            self.permute(b, "transpose", x, &[1, 0, 2])
        } else {
            x
        };
        let xs = b.shape(x).to_vec();
        let (steps, batch) = (xs[0], xs[1]);
        let gates = if s.lstm { 4 } else { 3 } * h;
        let mut ys = Vec::new();
        let mut steps_in: Vec<TensorId> = Vec::new();
        let (mut hn, mut cn) = (Vec::new(), Vec::new());
        for dir in 0..s.directions {
            let reverse = dir == 1 || s.reverse_only;
            let suffix = if dir == 1 { "_reverse" } else { "" };
            let k = s.layer;
            let w_ih = b.parameter(&format!("weight_ih_l{k}{suffix}"), vec![gates, s.input]);
            let w_hh = b.parameter(&format!("weight_hh_l{k}{suffix}"), vec![gates, h]);
            let biases = if s.bias {
                vec![
                    b.parameter(&format!("bias_ih_l{k}{suffix}"), vec![gates]),
                    b.parameter(&format!("bias_hh_l{k}{suffix}"), vec![gates]),
                ]
            } else {
                Vec::new()
            };
            let w_ih_t = b.op(View::new("t", vec![s.input, gates]), &[w_ih]);
            let w_hh_t = b.op(View::new("t", vec![h, gates]), &[w_hh]);
            // hx.unbind(0)[dir]: a view
            let mut hx = self.select(b, h0, 0);
            let mut cx = c0.map(|c| self.select(b, c, 0));
            // one input.unbind(0) serves both directions
            if steps_in.is_empty() {
                let unbind = View {
                    name: "unbind",
                    shapes: vec![vec![batch, s.input]; steps as usize],
                    expand: false,
                };
                steps_in = b.op_multi(unbind, &[x]);
            }
            let mut xt = steps_in.clone();
            if reverse {
                xt.reverse();
            }
            let mut outs = Vec::with_capacity(xt.len());
            for &x_t in &xt {
                let ig = b.op(mm(batch, gates), &[x_t, w_ih_t]);
                let hg = b.op(mm(batch, gates), &[hx, w_hh_t]);
                let mut ins = vec![ig, hg];
                if let Some(c) = cx {
                    ins.push(c);
                    ins.extend(&biases);
                    let o = b.op_multi(LstmCell, &ins);
                    hx = o[0];
                    cx = Some(o[1]);
                } else {
                    ins.push(hx);
                    ins.extend(&biases);
                    hx = b.op(GruCell, &ins);
                }
                outs.push(hx);
            }
            if reverse {
                outs.reverse();
            }
            if s.directions == 2 {
                // FullBidirectionalLayer keeps both directions' step outputs until it returns
                b.hold(&outs);
            }
            ys.push(stack(b, &outs, vec![steps, batch, h]));
            hn.push(hx);
            cn.extend(cx);
        }
        let y = if ys.len() == 2 {
            b.op(Cat { dim: 2 }, &ys)
        } else {
            ys[0]
        };
        let y_h = stack(b, &hn, vec![dirs, batch, h]);
        let y_c = (!cn.is_empty()).then(|| stack(b, &cn, vec![dirs, batch, h]));
        // ONNX's Y is [S, D, B, H] (layout 1: [B, S, D, H]) over PyTorch's [S, B, D·H]
        let y4 = self.reshape(b, "view", y, vec![steps, batch, dirs, h]);
        let perm: &[usize] = if s.batch_first {
            &[1, 0, 2, 3]
        } else {
            &[0, 2, 1, 3]
        };
        let y_onnx = self.permute(b, "permute", y4, perm);
        let state = |lw: &mut Self, b: &mut GraphBuilder, t: TensorId| {
            if s.batch_first {
                lw.permute(b, "transpose", t, &[1, 0, 2])
            } else {
                t
            }
        };
        let mut outs = vec![y_onnx, state(self, b, y_h)];
        if let Some(c) = y_c {
            outs.push(state(self, b, c));
        }
        Ok(outs)
    }
}

/// `mm(a, b)` of the gate projections: each operand is saved only for the other's gradient; in
/// low precision under autocast (the transposed weight is not a leaf, so it is cast every step).
fn mm(rows: u64, cols: u64) -> Aten {
    Aten::new("mm", vec![rows, cols])
        .autocast(Autocast::LowerPrecision)
        .saves(vec![Saved::Input(0), Saved::Input(1)])
        .cross_saves(0, 1)
        .right_to_left()
}

/// `torch.stack(ts)`: a new tensor; backward hands each input a view of the gradient.
fn stack(b: &mut GraphBuilder, ts: &[TensorId], shape: Vec<u64>) -> TensorId {
    let op = Aten::new("stack", shape).grads(vec![GradIn::PassThrough(0); ts.len()]);
    b.op(op, ts)
}
