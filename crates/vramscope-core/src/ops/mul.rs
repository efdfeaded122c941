//! `a * b` (squeeze-excitation scaling, layer scale, stochastic-depth noise): each input's backward
//! needs the other input, so both are saved when both require grad.

use super::*;

/// Element-wise multiplication with broadcasting.
#[derive(Debug, Clone)]
pub struct Mul;

impl Op for Mul {
    fn kind(&self) -> &'static str {
        "mul"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        Ok(vec![broadcast("mul", inputs[0], inputs[1])?])
    }

    fn output_dtypes(&self, inputs: &[DType], n: usize) -> Vec<DType> {
        vec![inputs[0].promote(inputs[1]); n]
    }

    // MulBackward0 releases `other_` before `self_` (Functions.h: saved inputs in name order)
    fn saved_for_backward(&self, _ctx: &OpCtx) -> Vec<Saved> {
        vec![Saved::Input(1), Saved::Input(0)]
    }

    // a broadcast input's gradient is computed at full size, then summed down
    fn backward_temporaries(&self, ctx: &OpCtx) -> Vec<u64> {
        ctx.inputs
            .iter()
            .filter(|t| t.shape != ctx.outputs[0].shape)
            .map(|_| ctx.outputs[0].bytes())
            .collect()
    }
}
