//! `x[:, i]` / `x.select(dim, i)` (ViT's class-token readout, `proj[0]` of the packed q/k/v): a
//! view; `SelectBackward0` allocates a zero tensor of the *input's* size and writes the gradient
//! into it. Several selects of one tensor each make such a tensor, and autograd sums them.

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

    fn input_grads(&self, ctx: &OpCtx) -> Vec<GradIn> {
        ctx.inputs
            .iter()
            .map(|t| {
                if t.dtype.is_float() {
                    GradIn::New
                } else {
                    GradIn::None
                }
            })
            .collect()
    }
}
