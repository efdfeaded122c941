//! `softmax(dim)`: keeps its output for backward; autocast gives it `dtype=float32` (a float32
//! output; a float16 input is read without a copy, a bfloat16 one cast up).

use super::*;

/// Softmax over one dimension.
#[derive(Debug, Clone)]
pub struct Softmax {
    /// The dimension.
    pub dim: usize,
}

impl Op for Softmax {
    fn kind(&self) -> &'static str {
        "softmax"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        if self.dim >= inputs[0].len() {
            return Err(ShapeError::new(
                "softmax",
                format!("dimension {} out of range for {:?}", self.dim, inputs[0]),
            ));
        }
        Ok(vec![inputs[0].to_vec()])
    }

    fn autocast(&self) -> Autocast {
        Autocast::Fp32SetOptDtype
    }

    fn saved_for_backward(&self, _ctx: &OpCtx) -> Vec<Saved> {
        vec![Saved::Output(0)]
    }
}
