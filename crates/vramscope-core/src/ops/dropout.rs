//! `nn.Dropout` (`native_dropout`: output plus a bool mask kept for backward, made and dropped at
//! once when autograd does not record the call; p = 0 or eval mode is the identity and records
//! nothing) and torchvision's `StochasticDepth` (a `[B,1,1,1]` noise
//! tensor and `input * noise`).

use super::*;

/// `nn.Dropout(p)`.
#[derive(Debug, Clone)]
pub struct Dropout {
    /// Drop probability.
    pub p: f64,
}

impl Op for Dropout {
    fn kind(&self) -> &'static str {
        "Dropout"
    }

    fn identity_in_eval(&self) -> bool {
        true
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        dropout_shape(self.p, inputs)
    }

    fn forward_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        vec![TensorMeta::new(ctx.inputs[0].shape.clone(), DType::Bool)]
    }

    // in train mode the fused kernel makes its mask even when autograd does not record the call
    // (a frozen model's first LoRA dropout); it is dropped at once
    fn inference_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        if ctx.training {
            self.forward_extras(ctx)
        } else {
            Vec::new()
        }
    }

    fn saved_for_backward(&self, _ctx: &OpCtx) -> Vec<Saved> {
        vec![Saved::Extra(0)]
    }
}

/// `torchvision.ops.StochasticDepth(p, "row")` in training mode with p > 0.
#[derive(Debug, Clone)]
pub struct StochasticDepth {
    /// Drop probability.
    pub p: f64,
}

impl Op for StochasticDepth {
    fn kind(&self) -> &'static str {
        "StochasticDepth"
    }

    fn identity_in_eval(&self) -> bool {
        true
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        Ok(vec![inputs[0].to_vec()])
    }

    // the noise: empty([B,1,...]).bernoulli_().div_() in the input's dtype
    fn forward_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        let s = &ctx.inputs[0].shape;
        let mut shape = vec![1; s.len()];
        shape[0] = s[0];
        vec![TensorMeta::new(shape, ctx.inputs[0].dtype)]
    }

    fn saved_for_backward(&self, _ctx: &OpCtx) -> Vec<Saved> {
        vec![Saved::Extra(0)]
    }
}

/// The shape rule of both dropout ops: `p` must be a probability; the output is the input's shape.
pub(crate) fn dropout_shape(p: f64, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
    if !(0.0..=1.0).contains(&p) {
        return Err(ShapeError::new(
            "Dropout",
            format!("p = {p} is not a probability"),
        ));
    }
    Ok(vec![inputs[0].to_vec()])
}
