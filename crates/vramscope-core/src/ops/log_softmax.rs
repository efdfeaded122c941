//! `log_softmax(dim)` (the first half of `F.cross_entropy`): keeps its output for backward. Under
//! autocast it runs in its input's dtype: torch 2.15 computes the loss's log-softmax in bf16/fp16
//! and only `nll_loss` casts up to fp32 (seen in the truth traces).

use super::*;

/// Log-softmax over one dimension.
#[derive(Debug, Clone)]
pub struct LogSoftmax {
    /// The dimension.
    pub dim: usize,
}

impl Op for LogSoftmax {
    fn kind(&self) -> &'static str {
        "log_softmax"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        if self.dim >= inputs[0].len() {
            return Err(ShapeError::new(
                "log_softmax",
                format!("dimension {} out of range for {:?}", self.dim, inputs[0]),
            ));
        }
        Ok(vec![inputs[0].to_vec()])
    }

    fn saved_for_backward(&self, _ctx: &OpCtx) -> Vec<Saved> {
        vec![Saved::Output(0)]
    }
}
