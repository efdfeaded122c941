//! `nn.Dropout(p, inplace=True)` / `F.dropout(x, p, training, inplace=True)` (MobileNetV3's
//! classifier): ATen's `dropout_` has no fused kernel, so in training it builds a float noise
//! tensor (`empty_like(input).bernoulli_(1 - p).div_(1 - p)`, the input's dtype and shape) and
//! multiplies the input by it in place; `MulBackward0` keeps the noise. In eval mode (or p = 0) it
//! returns its input and allocates nothing. Mixtral's router jitter is the same program with
//! uniform noise (`x *= empty_like(x).uniform_(1 - j, 1 + j)` in training).

use super::*;

/// `nn.Dropout(p, inplace=True)`, or another multiplicative noise drawn in training.
#[derive(Debug, Clone)]
pub struct DropoutInplace {
    /// Drop probability (the jitter's half-width).
    pub p: f64,
    /// What the layer table calls it.
    pub kind: &'static str,
}

impl DropoutInplace {
    /// `nn.Dropout(p, inplace=True)`.
    pub fn new(p: f64) -> Self {
        DropoutInplace { p, kind: "Dropout" }
    }

    /// Mixtral's router jitter: `x *= empty_like(x).uniform_(1 - j, 1 + j)` in training.
    pub fn jitter(j: f64) -> Self {
        DropoutInplace {
            p: j,
            kind: "jitter",
        }
    }

    fn noise(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        if ctx.training && self.p > 0.0 {
            vec![ctx.inputs[0].clone()]
        } else {
            Vec::new()
        }
    }
}

impl Op for DropoutInplace {
    fn kind(&self) -> &'static str {
        self.kind
    }

    fn identity_in_eval(&self) -> bool {
        true
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        super::dropout::dropout_shape(self.p, inputs)
    }

    fn alias(&self) -> Alias {
        Alias::InPlace(0)
    }

    fn forward_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        self.noise(ctx)
    }

    // train mode under no_grad still draws the noise (freed right after the op)
    fn inference_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        self.noise(ctx)
    }

    fn saved_for_backward(&self, ctx: &OpCtx) -> Vec<Saved> {
        if ctx.training && self.p > 0.0 {
            vec![Saved::Extra(0)]
        } else {
            Vec::new()
        }
    }
}
