//! `x[:, i]` / `x.select(dim, i)` (ViT's class-token readout, `proj[0]` of the packed q/k/v) and
//! strided slices `x[..., 0::2, :]` (Swin's patch merging): views; `SelectBackward0` /
//! `SliceBackward0` allocate a zero tensor of the *input's* size and write the gradient into it.
//! Several selects or slices of one tensor each make such a tensor, and autograd sums them.

use super::*;

/// `x.select(dim, index)`.
#[derive(Debug, Clone)]
pub struct Select {
    /// The dimension removed.
    pub dim: usize,
}

impl Op for Select {
    fn kind(&self) -> &'static str {
        "select"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let s = inputs[0];
        if self.dim >= s.len() {
            return Err(ShapeError::new(
                "select",
                format!("dimension {} out of range for {s:?}", self.dim),
            ));
        }
        let mut o = s.to_vec();
        o.remove(self.dim);
        Ok(vec![o])
    }

    fn alias(&self) -> Alias {
        Alias::View(0)
    }
}

/// A slice `x[..., a:b:s, ...]` along one dimension that does not cover it whole.
#[derive(Debug, Clone)]
pub struct Slice {
    /// The output shape.
    pub shape: Shape,
}

impl Op for Slice {
    fn kind(&self) -> &'static str {
        "slice"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let s = inputs[0];
        if s.len() != self.shape.len() || s.iter().zip(&self.shape).any(|(a, b)| b > a) {
            return Err(ShapeError::new(
                "slice",
                format!("cannot slice {s:?} to {:?}", self.shape),
            ));
        }
        Ok(vec![self.shape.clone()])
    }

    fn alias(&self) -> Alias {
        Alias::View(0)
    }

    fn input_grads(&self, ctx: &OpCtx) -> Vec<GradIn> {
        Select { dim: 0 }.input_grads(ctx)
    }
}
