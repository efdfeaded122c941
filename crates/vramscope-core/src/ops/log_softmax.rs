//! `log_softmax(dim)`: keeps its output for backward. Autocast's `fp32_set_opt_dtype` gives a
//! plain call `dtype=float32` (a float16 input read as it is, a bfloat16 one cast up);
//! `F.cross_entropy`'s own call passes the input's dtype (`log_softmax(self, dim,
//! self.scalar_type())`, LossNLL.cpp), so the loss's log-softmax runs in bf16/fp16 and only
//! `nll_loss` casts up (truth traces).

use super::*;

/// Log-softmax over one dimension.
#[derive(Debug, Clone)]
pub struct LogSoftmax {
    /// The dimension.
    pub dim: usize,
    /// Called with an explicit dtype, the input's (`F.cross_entropy`): autocast leaves it alone.
    pub dtype_given: bool,
}

impl LogSoftmax {
    /// `F.cross_entropy`'s log-softmax over `dim`, in its input's dtype.
    pub fn of_cross_entropy(dim: usize) -> Self {
        LogSoftmax {
            dim,
            dtype_given: true,
        }
    }
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

    fn autocast(&self) -> Autocast {
        if self.dtype_given {
            Autocast::Unlisted
        } else {
            Autocast::Fp32SetOptDtype
        }
    }

    fn saved_for_backward(&self, _ctx: &OpCtx) -> Vec<Saved> {
        vec![Saved::Output(0)]
    }
}
