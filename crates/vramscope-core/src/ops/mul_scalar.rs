//! `x * c` with a Python number (Swin's `q * head_dim ** -0.5`): a new tensor laid out like its
//! input; autograd saves nothing (the scalar is a constant) and backward makes `grad * c`.

use super::*;

/// Multiplication by a constant.
#[derive(Debug, Clone)]
pub struct MulScalar;

impl Op for MulScalar {
    fn kind(&self) -> &'static str {
        "mul"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        Ok(vec![inputs[0].to_vec()])
    }
}
