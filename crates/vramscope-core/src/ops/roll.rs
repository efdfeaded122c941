//! `torch.roll` (Swin's shifted windows): a new tensor; backward rolls the gradient back (new).

use super::*;

/// Cyclic shift along some dimensions.
#[derive(Debug, Clone)]
pub struct Roll;

impl Op for Roll {
    fn kind(&self) -> &'static str {
        "roll"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        Ok(vec![inputs[0].to_vec()])
    }
}
