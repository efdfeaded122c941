//! `a + b` and `a += b` (residual connections, position embeddings): saves nothing; the gradient
//! passes through unchanged to an input of the output's shape and is summed (a new tensor) for a
//! broadcast input.

use super::*;

/// Element-wise addition with broadcasting.
#[derive(Debug, Clone)]
pub struct Add {
    /// `a += b` (writes into input 0).
    pub inplace: bool,
}

impl Op for Add {
    fn kind(&self) -> &'static str {
        if self.inplace {
            "add_"
        } else {
            "add"
        }
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let out = broadcast("add", inputs[0], inputs[1])?;
        if self.inplace && out != inputs[0] {
            return Err(ShapeError::new(
                "add_",
                format!("in-place add cannot broadcast {:?} to {out:?}", inputs[0]),
            ));
        }
        Ok(vec![out])
    }

    fn output_dtypes(&self, inputs: &[DType], n: usize) -> Vec<DType> {
        let d = if self.inplace {
            inputs[0]
        } else {
            inputs[0].promote(inputs[1])
        };
        vec![d; n]
    }

    fn alias(&self) -> Alias {
        if self.inplace {
            Alias::InPlace(0)
        } else {
            Alias::None
        }
    }

    fn input_grads(&self, ctx: &OpCtx) -> Vec<GradIn> {
        ctx.inputs
            .iter()
            .map(|t| {
                if !t.dtype.is_float() {
                    GradIn::None
                } else if t.shape == ctx.outputs[0].shape && t.dtype == ctx.outputs[0].dtype {
                    GradIn::PassThrough(0)
                } else {
                    GradIn::New
                }
            })
            .collect()
    }
}
