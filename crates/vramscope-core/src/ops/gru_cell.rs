//! One time step of `nn.GRU` on CUDA without cuDNN: `_thnn_fused_gru_cell(igates, hgates, hx,
//! b_ih, b_hh)`, the kernel PyTorch's native RNN path (`aten/src/ATen/native/RNN.cpp`,
//! `GRUCell`) runs after the gate projections `mm(x_t, w_ih.t())` and `mm(h, w_hh.t())`.
//!
//! It returns `hy` `[B, H]` and a `[B, 5H]` workspace that only backward reads. Autograd keeps
//! both gate inputs, `hx`, the biases and the workspace; backward
//! (`_thnn_fused_gru_cell_backward`) makes a new gradient for each of the five inputs. Autocast
//! runs it in low precision (CUDA `lower_precision_fp` list).

use super::*;

/// `_thnn_fused_gru_cell`: inputs `[igates, hgates, hx]` and, with biases, `b_ih, b_hh`; output
/// `hy`.
#[derive(Debug, Clone)]
pub struct GruCell;

impl Op for GruCell {
    fn kind(&self) -> &'static str {
        "_thnn_fused_gru_cell"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let g = expect_rank("_thnn_fused_gru_cell", inputs, 0, 2)?;
        let h = expect_rank("_thnn_fused_gru_cell", inputs, 2, 2)?;
        let bias_ok = inputs[3..].iter().all(|b| b[..] == [g[1]]);
        if inputs.len() != 3 && inputs.len() != 5
            || inputs[1] != g
            || h[0] != g[0]
            || g[1] != 3 * h[1]
            || !bias_ok
        {
            return Err(ShapeError::new(
                "_thnn_fused_gru_cell",
                format!("gates {g:?}, hidden gates {:?} and hidden state {h:?} do not fit (gates are [B, 3H], the state [B, H], biases [3H])", inputs[1]),
            ));
        }
        Ok(vec![h.to_vec()])
    }

    fn autocast(&self) -> Autocast {
        Autocast::LowerPrecision
    }

    fn forward_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        let g = &ctx.inputs[0];
        let h = ctx.inputs[2].shape[1];
        vec![TensorMeta::new(vec![g.shape[0], 5 * h], g.dtype)]
    }

    // the workspace is an output of the kernel whether or not autograd records it
    fn inference_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        self.forward_extras(ctx)
    }

    fn saved_for_backward(&self, ctx: &OpCtx) -> Vec<Saved> {
        let mut s: Vec<Saved> = (0..ctx.inputs.len()).map(Saved::Input).collect();
        s.push(Saved::Extra(0));
        s
    }
}
