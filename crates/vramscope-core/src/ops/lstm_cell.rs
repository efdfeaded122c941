//! One time step of `nn.LSTM` on CUDA without cuDNN: `_thnn_fused_lstm_cell(igates, hgates, cx,
//! b_ih, b_hh)`, the kernel PyTorch's native RNN path (`aten/src/ATen/native/RNN.cpp`,
//! `LSTMCell`) runs after the two gate projections `mm(x_t, w_ih.t())` and `mm(h, w_hh.t())`.
//! The truth tool runs RNN modules this way (its fake `_cudnn_rnn` cannot run), so every step's
//! tensors are visible.
//!
//! It returns `hy` and `cy` `[B, H]` and a `[B, 4H]` workspace (the gate activations), which
//! only backward reads. Autograd keeps both gate inputs, `cx`, the biases, `cy` and the
//! workspace (derivatives.yaml lists the tensors of both backward formulas). Backward
//! (`_thnn_fused_lstm_cell_backward_impl`) makes one `[B, 4H]` gate gradient, handed to both gate
//! inputs, the gradient of `cx`, and one `[4H]` bias gradient handed to both biases.
//!
//! Autocast runs it in low precision (it is on the CUDA `lower_precision_fp` list): `cx` and the
//! biases are cast (the biases through the weight cache).

use super::*;

/// `_thnn_fused_lstm_cell`: inputs `[igates, hgates, cx]` and, with biases, `b_ih, b_hh`;
/// outputs `[hy, cy]`.
#[derive(Debug, Clone)]
pub struct LstmCell;

impl Op for LstmCell {
    fn kind(&self) -> &'static str {
        "_thnn_fused_lstm_cell"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let g = expect_rank("_thnn_fused_lstm_cell", inputs, 0, 2)?;
        let c = expect_rank("_thnn_fused_lstm_cell", inputs, 2, 2)?;
        let bias_ok = inputs[3..].iter().all(|b| b[..] == [g[1]]);
        if inputs.len() != 3 && inputs.len() != 5
            || inputs[1] != g
            || c[0] != g[0]
            || g[1] != 4 * c[1]
            || !bias_ok
        {
            return Err(ShapeError::new(
                "_thnn_fused_lstm_cell",
                format!("gates {g:?}, hidden gates {:?} and cell {c:?} do not fit (gates are [B, 4H], the cell [B, H], biases [4H])", inputs[1]),
            ));
        }
        Ok(vec![c.to_vec(), c.to_vec()])
    }

    fn autocast(&self) -> Autocast {
        Autocast::LowerPrecision
    }

    fn forward_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        vec![ctx.inputs[0].clone()]
    }

    // the workspace is an output of the kernel whether or not autograd records it
    fn inference_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        self.forward_extras(ctx)
    }

    fn saved_for_backward(&self, ctx: &OpCtx) -> Vec<Saved> {
        let mut s: Vec<Saved> = (0..ctx.inputs.len()).map(Saved::Input).collect();
        s.push(Saved::Output(1));
        s.push(Saved::Extra(0));
        s
    }

    fn input_grads(&self, ctx: &OpCtx) -> Vec<GradIn> {
        let mut g = vec![GradIn::New, GradIn::SameAs(0), GradIn::New];
        if ctx.inputs.len() == 5 {
            g.extend([GradIn::New, GradIn::SameAs(3)]);
        }
        g
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Task;
    use crate::sim::{simulate, StepConfig};
    use crate::GraphBuilder;

    /// Backward makes one gate gradient for both gate inputs and one bias gradient for both
    /// biases (`GradIn::SameAs`): three tensors per cell, not five.
    #[test]
    fn backward_shares_the_gate_and_bias_gradients() {
        let mut b = GraphBuilder::new("cell", "Cell");
        let x = b.input(vec![2, 4], DType::F32);
        let out = b.module("cell", "Cell", &[x], |b| {
            let ig = b.parameter("ig", vec![2, 16]);
            let hg = b.parameter("hg", vec![2, 16]);
            let c = b.parameter("c", vec![2, 4]);
            let bi = b.parameter("b_ih", vec![16]);
            let bh = b.parameter("b_hh", vec![16]);
            b.op_multi(LstmCell, &[ig, hg, c, bi, bh])[0]
        });
        let g = b
            .finish(&[out], Task::Classification { num_classes: 4 })
            .unwrap();
        let cfg = StepConfig {
            record_events: true,
            ..StepConfig::default()
        };
        let s = simulate(&g, &cfg).unwrap();
        let cell_grads = s
            .events
            .iter()
            .filter(|e| e.alloc && e.label.to_string() == "grad of _thnn_fused_lstm_cell")
            .map(|e| e.bytes)
            .collect::<Vec<_>>();
        // per iteration: gates [2, 16], cx [2, 4], bias [16] (fp32)
        assert_eq!(cell_grads, [128, 32, 64, 128, 32, 64]);
    }
}
