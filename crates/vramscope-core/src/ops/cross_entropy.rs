//! `F.cross_entropy(logits, labels)`: `log_softmax` (kept for backward) then `nll_loss` (a scalar
//! loss and a scalar `total_weight`, kept). Autocast runs it in fp32. Backward makes the
//! `nll_loss_backward` gradient, then the `log_softmax` gradient (both `[B, K]`).

use super::*;

/// Cross-entropy over class logits `[B, K]` with int64 labels `[B]`.
#[derive(Debug, Clone)]
pub struct CrossEntropyLoss;

impl Op for CrossEntropyLoss {
    fn kind(&self) -> &'static str {
        "cross_entropy"
    }

    fn output_shapes(&self, inputs: &[&[u64]]) -> Result<Vec<Shape>, ShapeError> {
        let l = inputs[0];
        let y = inputs.get(1).copied().unwrap_or(&[]);
        if l.len() != 2 || y.len() != 1 || y[0] != l[0] {
            return Err(ShapeError::new(
                "cross_entropy",
                format!("logits {l:?} and labels {y:?}: expected [B, K] and [B]"),
            ));
        }
        Ok(vec![vec![]])
    }

    fn autocast(&self) -> Autocast {
        Autocast::Fp32
    }

    fn forward_extras(&self, ctx: &OpCtx) -> Vec<TensorMeta> {
        vec![ctx.inputs[0].clone(), TensorMeta::new(vec![], DType::F32)]
    }

    fn saved_for_backward(&self, _ctx: &OpCtx) -> Vec<Saved> {
        vec![Saved::Extra(0), Saved::Extra(1)]
    }

    fn backward_temporaries(&self, ctx: &OpCtx) -> Vec<u64> {
        vec![ctx.inputs[0].bytes()]
    }
}
